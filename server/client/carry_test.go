package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// A Worker keeps the outcome of every run whose report got no definite answer (an ACKS
// answered STALE_EPOCH: the leader stepped down before recording it; a NACK never
// answered before the connection died) and hands both in, in a CARRY, first thing on its
// next connection, before SUBSCRIBE. OnAcked hears of each run once, when the CARRY is
// answered (accepted, or refused as ACKED lists it); settled outcomes are not carried
// again.
func TestWorkerCarriesUnconfirmedOutcomes(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	var mu sync.Mutex
	reports := map[uint64][]error{}
	reported := make(chan struct{}, 4)
	w := newWorkerT(t, f.ln.Addr().String(), WithConcurrency(2), WithReconnectBackoff(time.Millisecond, time.Millisecond),
		WithOnAcked(func(fi *Fire, _, ackErr error) {
			mu.Lock()
			reports[fi.RunID] = append(reports[fi.RunID], ackErr)
			mu.Unlock()
			reported <- struct{}{}
		}))
	fw := runOnFake(t, f, w, func(_ context.Context, fi *Fire) error {
		if fi.RunID == 8 {
			return task.NonRetryable(errors.New("bad input"))
		}
		return nil
	})
	fire := func(run uint64) {
		f.send(fw.nc, &protocol.Fire{Namespace: "billing", TaskID: "t" + string(rune('0'+run)), TaskType: "w", RunID: run,
			Attempt: 2, Due: 1000 + int64(run), Epoch: 3, TTR: int64(tockdtest.Limit), Durability: protocol.Durable, Version: 5})
	}
	fire(7)
	fire(8)
	var unsettled []fakeReq // the NACK, never answered
	for got := 0; got < 2; got++ {
		r := f.next(t)
		switch m := r.m.(type) {
		case *protocol.Credit:
			got--
		case *protocol.Acks:
			f.send(r.nc, &protocol.Error{ID: m.ID, Code: protocol.CodeStaleEpoch, Message: "stepped down"})
		case *protocol.Nack:
			unsettled = append(unsettled, r)
		default:
			t.Fatalf("got %v %+v, want the runs' reports", r.m.Type(), r.m)
		}
	}
	if len(unsettled) != 1 {
		t.Fatalf("NACKs seen: %d", len(unsettled))
	}
	fw.nc.Close() // the leader dies with the NACK unanswered

	// The next connection: CARRY first, with both outcomes as their FIREs named them.
	r := f.next(t)
	for {
		if _, ok := r.m.(*protocol.Credit); !ok { // a CREDIT may still have been on its way
			break
		}
		r = f.next(t)
	}
	carry, ok := r.m.(*protocol.Carry)
	if !ok {
		t.Fatalf("first request on the new connection: %v %+v, want CARRY", r.m.Type(), r.m)
	}
	want := []protocol.Outcome{
		{RunID: 7, Epoch: 3, Namespace: "billing", TaskID: "t7", Version: 5, Attempt: 2, Due: 1007},
		{RunID: 8, Epoch: 3, Namespace: "billing", TaskID: "t8", Version: 5, Attempt: 2, Due: 1008, Failed: true, Err: "bad input"},
	}
	if !reflect.DeepEqual(carry.Outcomes, want) {
		t.Fatalf("CARRY outcomes:\n got %+v\nwant %+v", carry.Outcomes, want)
	}
	mu.Lock()
	if len(reports) != 0 {
		t.Fatalf("OnAcked called before the CARRY was answered: %v", reports)
	}
	mu.Unlock()
	f.send(r.nc, &protocol.Acked{ID: carry.ID, Failed: []protocol.AckFailure{{RunID: 8, Code: protocol.CodeUnknownRun, Message: "replaced"}}})
	r = f.next(t)
	sub, ok := r.m.(*protocol.Subscribe)
	if !ok {
		t.Fatalf("after CARRY: %v, want SUBSCRIBE", r.m.Type())
	}
	f.send(r.nc, &protocol.OK{ID: sub.ID})
	for range 2 {
		tockdtest.Receive(t, reported, "OnAcked for the carried runs")
	}
	mu.Lock()
	if len(reports[7]) != 1 || reports[7][0] != nil {
		t.Errorf("run 7 (accepted) reported %v, want once with nil", reports[7])
	}
	var perr *protocol.Error
	if len(reports[8]) != 1 || !errors.As(reports[8][0], &perr) || perr.Code != protocol.CodeUnknownRun {
		t.Errorf("run 8 (refused) reported %v, want once with UNKNOWN_RUN", reports[8])
	}
	mu.Unlock()

	// Settled: a third connection carries nothing.
	r.nc.Close()
	r = f.next(t)
	if carry, ok := r.m.(*protocol.Carry); !ok || len(carry.Outcomes) != 0 {
		t.Fatalf("third connection's first request: %v %+v, want an empty CARRY", r.m.Type(), r.m)
	}
	if got, want := w.CarryStats(), (CarryStats{Kept: 2, Sent: 2, Accepted: 1, Refused: 1}); got != want {
		t.Fatalf("CarryStats %+v, want %+v", got, want)
	}
}

// A node whose WELCOME says it follows is sent nothing, CARRY above all: the worker dials
// the leader it names and hands its outcomes in there. Streaming the carry set to each
// node tried during a failover sent 23.5M carried outcomes for 268k kept (make
// loadgen-cluster, 600k tasks, two workers, 10 leader kills).
func TestWorkerSendsNothingToAFollower(t *testing.T) {
	leader := startFake(t, "127.0.0.1:0")
	follower := startFakeFollower(t, leader.ln.Addr().String())
	w := newWorkerT(t, follower.ln.Addr().String(), WithReconnectBackoff(time.Millisecond, time.Millisecond))
	runOnFake(t, leader, w, func(context.Context, *Fire) error { return nil }) // CARRY, then SUBSCRIBE, at the leader
	select {
	case r := <-follower.reqs:
		t.Fatalf("the follower was sent %v %+v, want nothing", r.m.Type(), r.m)
	default:
	}
}

// Outcomes that do not fit one CARRY within the server's max_frame go in several, each
// within it, together all of them.
func TestWorkerSplitsACarryToFitMaxFrame(t *testing.T) {
	const n, maxFrame = 12, 1024
	f := startFakeWelcome(t, "127.0.0.1:0", 0, maxFrame)
	w := newWorkerT(t, f.ln.Addr().String(), WithConcurrency(n), WithReconnectBackoff(time.Millisecond, time.Millisecond))
	fw := runOnFake(t, f, w, func(context.Context, *Fire) error { return nil })
	long := strings.Repeat("x", 200) // 12 outcomes of ~250 bytes: 3 KB, three times max_frame
	for run := uint64(1); run <= n; run++ {
		f.send(fw.nc, &protocol.Fire{TaskID: fmt.Sprintf("%s-%d", long, run), TaskType: "w", RunID: run, Attempt: 1, Due: 1,
			Epoch: 3, TTR: int64(tockdtest.Limit), Durability: protocol.Durable})
	}
	for reported := 0; reported < n; {
		r := f.next(t)
		switch m := r.m.(type) {
		case *protocol.Acks:
			f.send(r.nc, &protocol.Error{ID: m.ID, Code: protocol.CodeStaleEpoch, Message: "stepped down"})
			reported += len(m.RunIDs)
		case *protocol.Credit:
		default:
			t.Fatalf("got %v, want ACKS", r.m.Type())
		}
	}
	fw.nc.Close()
	carried := map[uint64]bool{}
	for frames := 0; len(carried) < n; frames++ {
		r := f.next(t)
		if _, ok := r.m.(*protocol.Credit); ok {
			continue
		}
		c, ok := r.m.(*protocol.Carry)
		if !ok || frames > n {
			t.Fatalf("got %v after %d CARRY frames carrying %d runs, want CARRY", r.m.Type(), frames, len(carried))
		}
		if b, err := protocol.AppendFrame(nil, c, maxFrame); err != nil || len(b) > maxFrame+4 {
			t.Fatalf("a CARRY of %d outcomes does not fit max_frame %d: %v", len(c.Outcomes), maxFrame, err)
		}
		for _, o := range c.Outcomes {
			carried[o.RunID] = true
		}
		f.send(r.nc, &protocol.Acked{ID: c.ID})
	}
}

// A carried outcome the leader lists STALE_EPOCH (it stepped down before recording the
// end) is not settled: the next connection carries it again, and OnAcked waits for that.
func TestWorkerCarriesAgainAfterStaleEpoch(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	acked := make(chan error, 2)
	w := newWorkerT(t, f.ln.Addr().String(), WithReconnectBackoff(time.Millisecond, time.Millisecond),
		WithOnAcked(func(_ *Fire, _, ackErr error) { acked <- ackErr }))
	fw := runOnFake(t, f, w, func(context.Context, *Fire) error { return nil })
	fw.fire(7)
	nextCarry := func() (fakeReq, *protocol.Carry) {
		for {
			r := f.next(t)
			switch m := r.m.(type) {
			case *protocol.Carry:
				return r, m
			case *protocol.Acks:
				f.send(r.nc, &protocol.Error{ID: m.ID, Code: protocol.CodeStaleEpoch})
				r.nc.Close()
			}
		}
	}
	r, c := nextCarry()
	if len(c.Outcomes) != 1 || c.Outcomes[0].RunID != 7 {
		t.Fatalf("first CARRY: %+v", c.Outcomes)
	}
	f.send(r.nc, &protocol.Acked{ID: c.ID, Failed: []protocol.AckFailure{{RunID: 7, Code: protocol.CodeStaleEpoch}}})
	r.nc.Close()
	r, c = nextCarry()
	if len(c.Outcomes) != 1 || c.Outcomes[0].RunID != 7 {
		t.Fatalf("CARRY after STALE_EPOCH: %+v, want run 7 again", c.Outcomes)
	}
	select {
	case err := <-acked:
		t.Fatalf("OnAcked called (%v) while the outcome was still carried", err)
	default:
	}
	f.send(r.nc, &protocol.Acked{ID: c.ID})
	if err := tockdtest.Receive(t, acked, "OnAcked"); err != nil {
		t.Fatalf("OnAcked after the accepting CARRY: %v, want nil", err)
	}
}

// TestKeptOutcomeHoldsNoFrame: an outcome kept for the next connection holds its own
// copy of its run's task ID and payload, not the FIRES frame's buffer, which holds every
// other run's too.
func TestKeptOutcomeHoldsNoFrame(t *testing.T) {
	w := newWorkerT(t, "127.0.0.1:1")
	fs := firesOf([]protocol.Fire{
		{Namespace: "default", TaskID: "t1", TaskType: "w", Payload: []byte("first"), RunID: 1, Epoch: 3},
		{Namespace: "default", TaskID: "t2", TaskType: "w", Payload: []byte("second"), RunID: 2, Epoch: 3},
	})
	if !w.carry.keep(outcome{fire: &fs[0]}, ErrConnectionLost) {
		t.Fatal("keep refused an outcome with room")
	}
	kept := w.carry.runs[runRef{3, 1}].o.fire
	if kept == &fs[0] || unsafe.StringData(kept.TaskID) == unsafe.StringData(fs[0].TaskID) || &kept.Payload[0] == &fs[0].Payload[0] {
		t.Fatal("the kept outcome shares its run's memory")
	}
	if kept.TaskID != "t1" || string(kept.Payload) != "first" || kept.RunID != 1 {
		t.Fatalf("kept %+v", kept)
	}
}
