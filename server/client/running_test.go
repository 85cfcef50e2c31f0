package client

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// heldHandler is a handler that runs until release is closed (or its context ends),
// telling started when it begins; ended gets its context's error when it returns
// (nil: released).
type heldHandler struct {
	started chan *Fire
	release chan struct{}
	ended   chan error
}

func newHeldHandler() *heldHandler {
	return &heldHandler{started: make(chan *Fire, 4), release: make(chan struct{}), ended: make(chan error, 4)}
}

func (h *heldHandler) handle(ctx context.Context, f *Fire) error {
	h.started <- f
	select {
	case <-h.release:
		h.ended <- nil
		return nil
	case <-ctx.Done():
		h.ended <- ctx.Err()
		return ctx.Err()
	}
}

// acked records OnAcked's calls.
type acked struct {
	mu   sync.Mutex
	runs map[uint64][]error // by the RunID of the Fire OnAcked was given
	ch   chan struct{}
}

func newAcked() *acked { return &acked{runs: map[uint64][]error{}, ch: make(chan struct{}, 8)} }

func (a *acked) on(f *Fire, _, ackErr error) {
	a.mu.Lock()
	a.runs[f.RunID] = append(a.runs[f.RunID], ackErr)
	a.mu.Unlock()
	a.ch <- struct{}{}
}

// nextOf returns the next request on the fake that is not a CREDIT (counted in credits).
func nextOf(t *testing.T, f *fake, credits *uint64) fakeReq {
	t.Helper()
	for {
		r := f.next(t)
		if c, ok := r.m.(*protocol.Credit); ok {
			*credits += c.Credits
			continue
		}
		return r
	}
}

// startHeld starts a Worker (Concurrency 2, with opts, OnAcked recorded) on a fake
// server with a heldHandler, FIREs run 7 at epoch 3 on its first connection, waits for
// the handler to start, and cuts that connection: the handler then runs with no
// connection.
func startHeld(t *testing.T, opts ...Option) (*fake, *heldHandler, *acked, *Worker) {
	t.Helper()
	f := startFake(t, "127.0.0.1:0")
	h, a := newHeldHandler(), newAcked()
	w := newWorkerT(t, f.ln.Addr().String(), append([]Option{WithConcurrency(2),
		WithReconnectBackoff(time.Millisecond, time.Millisecond), WithOnAcked(a.on)}, opts...)...)
	fw := runOnFake(t, f, w, h.handle)
	pf := &protocol.Fire{Namespace: "billing", TaskID: "t7", TaskType: "w", RunID: 7, Attempt: 2, Due: 1007, Epoch: 3,
		TTR: int64(tockdtest.Limit), Durability: protocol.Durable, Version: 5}
	f.send(fw.nc, pf)
	tockdtest.Receive(t, h.started, "the handler's start")
	fw.nc.Close() // the leader dies while the handler runs
	return f, h, a, w
}

// wantCarryThenAdopt reads the next connection's first requests: an empty CARRY
// (answered), then an ADOPT naming run 7 as its FIRE did; it returns the ADOPT's request.
func wantCarryThenAdopt(t *testing.T, f *fake, credits *uint64) fakeReq {
	t.Helper()
	r := nextOf(t, f, credits)
	carry, ok := r.m.(*protocol.Carry)
	if !ok || len(carry.Outcomes) != 0 {
		t.Fatalf("first request on the new connection: %v %+v, want an empty CARRY", r.m.Type(), r.m)
	}
	f.send(r.nc, &protocol.Acked{ID: carry.ID})
	r = nextOf(t, f, credits)
	adopt, ok := r.m.(*protocol.Adopt)
	want := protocol.Outcome{RunID: 7, Epoch: 3, Namespace: "billing", TaskID: "t7", Version: 5, Attempt: 2, Due: 1007}
	if !ok || len(adopt.Runs) != 1 || adopt.Runs[0] != want {
		t.Fatalf("after CARRY: %v %+v, want ADOPT of %+v", r.m.Type(), r.m, want)
	}
	return r
}

// wantSubscribe reads the SUBSCRIBE, requires credits want, and accepts it.
func wantSubscribe(t *testing.T, f *fake, credits *uint64, want uint64) {
	t.Helper()
	r := nextOf(t, f, credits)
	sub, ok := r.m.(*protocol.Subscribe)
	if !ok || sub.Credits != want {
		t.Fatalf("after ADOPT: %v %+v, want SUBSCRIBE with %d credits (Concurrency less the run handed in)", r.m.Type(), r.m, want)
	}
	f.send(r.nc, &protocol.OK{ID: sub.ID})
}

// A handler still running when its connection goes keeps running (its context does not
// end); the next connection hands its run in (ADOPT) after CARRY and before SUBSCRIBE,
// which leaves that run's credit out. The leader adopts it under a run ID and epoch of
// its own: when the handler returns, the Worker reports it under those (ACKS, granting
// its credit back), and OnAcked hears of the run its handler got.
func TestWorkerHandsInARunStillRunning(t *testing.T) {
	f, h, a, w := startHeld(t)
	var credits uint64
	r := wantCarryThenAdopt(t, f, &credits)
	adopt := r.m.(*protocol.Adopt)
	f.send(r.nc, &protocol.Acked{ID: adopt.ID, Adopted: []protocol.Adoption{{RunID: 7, As: 91, Epoch: 4}}})
	wantSubscribe(t, f, &credits, 1)
	select {
	case err := <-h.ended:
		t.Fatalf("the handler returned (%v) before its release: its context ended with the connection", err)
	default:
	}
	close(h.release)
	r = nextOf(t, f, &credits)
	acks, ok := r.m.(*protocol.Acks)
	if !ok || len(acks.RunIDs) != 1 || acks.RunIDs[0] != 91 || acks.Epoch != 4 || acks.Credits+credits != 1 {
		t.Fatalf("after the handler returned: %v %+v (credits %d), want ACKS of run 91 at epoch 4 granting 1", r.m.Type(), r.m, credits)
	}
	f.send(r.nc, &protocol.Acked{ID: acks.ID})
	tockdtest.Receive(t, a.ch, "OnAcked for the adopted run")
	a.mu.Lock()
	if len(a.runs) != 1 || len(a.runs[7]) != 1 || a.runs[7][0] != nil {
		t.Errorf("OnAcked heard %v, want run 7 (the handler's Fire) once, accepted", a.runs)
	}
	a.mu.Unlock()
	if got, want := w.CarryStats(), (CarryStats{RunningSent: 1, RunningAdopted: 1}); got != want {
		t.Fatalf("CarryStats %+v, want %+v", got, want)
	}
}

// A run handed in that the leader refuses has its handler's context ended; the outcome
// is dropped when it returns (OnAcked hears why), and the credit the SUBSCRIBE left out
// is granted back in a CREDIT.
func TestWorkerDropsARefusedRunStillRunning(t *testing.T) {
	f, h, a, w := startHeld(t)
	var credits uint64
	r := wantCarryThenAdopt(t, f, &credits)
	adopt := r.m.(*protocol.Adopt)
	f.send(r.nc, &protocol.Acked{ID: adopt.ID, Failed: []protocol.AckFailure{{RunID: 7, Code: protocol.CodeUnknownRun, Message: "already FIREd"}}})
	wantSubscribe(t, f, &credits, 1)
	if err := tockdtest.Receive(t, h.ended, "the refused handler's end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the refused handler ended with %v, want its context cancelled", err)
	}
	tockdtest.Receive(t, a.ch, "OnAcked for the refused run")
	a.mu.Lock()
	if len(a.runs[7]) != 1 || !errors.Is(a.runs[7][0], errNotAdopted) {
		t.Errorf("OnAcked heard %v, want run 7 once, not adopted", a.runs)
	}
	a.mu.Unlock()
	tockdtest.EventuallyWithin(t, "the refused run's credit", tockdtest.Limit, func() bool {
		select {
		case r := <-f.reqs:
			if c, ok := r.m.(*protocol.Credit); ok {
				credits += c.Credits
			} else {
				t.Fatalf("got %v %+v, want only a CREDIT", r.m.Type(), r.m)
			}
		default:
		}
		return credits == 1
	})
	if got, want := w.CarryStats(), (CarryStats{RunningSent: 1, RunningRefused: 1, RunningDropped: 1}); got != want {
		t.Fatalf("CarryStats %+v, want %+v", got, want)
	}
}

// A run handed in whose handler returns while the ADOPT is unanswered, its connection
// then lost too, is carried (CARRY) to the next connection as a finished outcome, under
// the identity its FIRE gave it.
func TestWorkerCarriesARunThatEndsUnadopted(t *testing.T) {
	f, h, a, w := startHeld(t)
	var credits uint64
	r := wantCarryThenAdopt(t, f, &credits) // not answered
	r2 := nextOf(t, f, &credits)            // the SUBSCRIBE, not answered either
	if _, ok := r2.m.(*protocol.Subscribe); !ok {
		t.Fatalf("after ADOPT: %v, want SUBSCRIBE", r2.m.Type())
	}
	close(h.release)
	if err := tockdtest.Receive(t, h.ended, "the handler's end"); err != nil {
		t.Fatalf("the handler ended with %v, want released", err)
	}
	r.nc.Close()
	r = nextOf(t, f, &credits)
	carry, ok := r.m.(*protocol.Carry)
	want := protocol.Outcome{RunID: 7, Epoch: 3, Namespace: "billing", TaskID: "t7", Version: 5, Attempt: 2, Due: 1007}
	if !ok || len(carry.Outcomes) != 1 || carry.Outcomes[0] != want {
		t.Fatalf("first request on the third connection: %v %+v, want CARRY of %+v", r.m.Type(), r.m, want)
	}
	f.send(r.nc, &protocol.Acked{ID: carry.ID})
	tockdtest.Receive(t, a.ch, "OnAcked for the carried run")
	if cs := w.CarryStats(); cs.Kept != 1 || cs.Accepted != 1 || cs.RunningSent != 1 || cs.RunningAdopted != 0 {
		t.Fatalf("CarryStats %+v, want 1 kept and accepted, 1 handed in, none adopted", cs)
	}
}

// With CancelOnDisconnect a handler's context ends with its connection, and its run is
// abandoned: the next connection hands nothing in and subscribes with every credit.
func TestWorkerCancelOnDisconnect(t *testing.T) {
	f, h, _, w := startHeld(t, WithCancelOnDisconnect(true))
	if err := tockdtest.Receive(t, h.ended, "the handler's end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the handler ended with %v, want its context cancelled with the connection", err)
	}
	var credits uint64
	r := nextOf(t, f, &credits)
	if carry, ok := r.m.(*protocol.Carry); !ok || len(carry.Outcomes) != 0 {
		t.Fatalf("first request on the new connection: %v %+v, want an empty CARRY", r.m.Type(), r.m)
	}
	f.send(r.nc, &protocol.Acked{ID: r.m.RequestID()})
	wantSubscribe(t, f, &credits, 2)
	tockdtest.EventuallyWithin(t, "the abandoned run counted", tockdtest.Limit, func() bool { return w.CarryStats().Abandoned == 1 })
	if cs := w.CarryStats(); cs.RunningSent != 0 {
		t.Fatalf("CarryStats %+v, want nothing handed in", cs)
	}
}

// cutProxy forwards TCP connections to a target until cut, which closes every one it
// has made (a network blip between a Worker and a live leader).
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); p.cut(); wg.Wait() })
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A Worker whose connection to a live leader is cut while its handler runs reconnects to
// that leader and hands the run in: the leader kept it for ReconnectGrace (an orphan) and
// takes it over under its own run ID, so the task runs once, its handler never cancelled,
// and the ACK after the reconnect ends it (real tockd over TCP).
func TestWorkerRunSurvivesABlipToTheSameLeader(t *testing.T) {
	s := tockdtest.Start(t)
	p := newCutProxy(t, s.Addr)
	c := dialT(t, s.Addr)
	h := newHeldHandler()
	w := newWorkerT(t, p.ln.Addr().String(), WithConcurrency(2), WithReconnectBackoff(time.Millisecond, 10*time.Millisecond))
	if err := w.Handle("w", h.handle); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	tk := oneShot("blip", "w", 0)
	tk.Timeout = tockdtest.Limit
	if _, err := c.Submit(bounded(t), tk, protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	f := tockdtest.Receive(t, h.started, "the handler's start")
	p.cut()
	tockdtest.Eventually(t, "the run handed in and adopted", func() bool { return w.CarryStats().RunningAdopted == 1 })
	close(h.release)
	if err := tockdtest.Receive(t, h.ended, "the handler's end"); err != nil {
		t.Fatalf("the handler ended with %v, want released (its context must outlive the blip)", err)
	}
	if in := waitState(t, c, "blip", task.Succeeded); in.Runs != 1 {
		t.Fatalf("blip ran %d times, want once (run %d adopted)", in.Runs, f.RunID)
	}
	select {
	case f2 := <-h.started:
		t.Fatalf("the task ran again (run %d) after the blip", f2.RunID)
	default:
	}
	if st := s.Stats(); st.Adopted != 1 || st.Redelivered != 0 {
		t.Fatalf("tockd: Adopted %d, Redelivered %d; want 1, 0", st.Adopted, st.Redelivered)
	}
}

// A server that does not know ADOPT (an older one) answers it UNKNOWN_TYPE: it holds
// none of the runs, so the Worker treats them as refused, ending the handler's context.
func TestWorkerTreatsAnOlderServersAdoptAsRefused(t *testing.T) {
	f, h, _, w := startHeld(t)
	var credits uint64
	r := wantCarryThenAdopt(t, f, &credits)
	f.send(r.nc, &protocol.Error{ID: r.m.RequestID(), Code: protocol.CodeUnknownType, Message: "unknown message type 57"})
	wantSubscribe(t, f, &credits, 1)
	if err := tockdtest.Receive(t, h.ended, "the handler's end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the handler ended with %v, want its context cancelled (the run is not held)", err)
	}
	tockdtest.EventuallyWithin(t, "the run dropped", tockdtest.Limit, func() bool { return w.CarryStats().RunningDropped == 1 })
	if cs := w.CarryStats(); cs.RunningRefused != 1 || cs.RunningAdopted != 0 {
		t.Fatalf("CarryStats %+v, want 1 refused, none adopted", cs)
	}
}
