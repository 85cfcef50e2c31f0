package client

import (
	"context"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// fakeWorkerConn drives a Worker connected to the scripted fake server: it answers
// SUBSCRIBE, counts CREDITs, and hands every other request to the test.
type fakeWorkerConn struct {
	t       *testing.T
	f       *fake
	nc      net.Conn
	credits uint64
	sub     *protocol.Subscribe // the SUBSCRIBE accepted
}

// runOnFake runs w, with h handling type "w" (nil: the handlers w has), against the
// fake until the test ends, and accepts its SUBSCRIBE.
func runOnFake(t *testing.T, f *fake, w *Worker, h HandlerFunc) *fakeWorkerConn {
	t.Helper()
	fw, _ := runOnFakeStoppable(t, f, w, h)
	return fw
}

// runOnFakeStoppable is runOnFake, with a func that stops w and waits for Run (also
// called when the test ends; it may be called more than once).
func runOnFakeStoppable(t *testing.T, f *fake, w *Worker, h HandlerFunc) (*fakeWorkerConn, func()) {
	t.Helper()
	if h != nil {
		if err := w.Handle("w", h); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return subscribeFake(t, f), stop
}

// subscribeFake waits for the Worker's CARRY (with nothing to carry: a fresh Worker)
// and its SUBSCRIBE, and accepts both.
func subscribeFake(t *testing.T, f *fake) *fakeWorkerConn {
	t.Helper()
	r := f.next(t)
	carry, ok := r.m.(*protocol.Carry)
	if !ok || len(carry.Outcomes) != 0 {
		t.Fatalf("first request %v %+v, want an empty CARRY", r.m.Type(), r.m)
	}
	f.send(r.nc, &protocol.Acked{ID: carry.ID})
	r = f.next(t)
	sub, ok := r.m.(*protocol.Subscribe)
	if !ok {
		t.Fatalf("request after CARRY: %v, want SUBSCRIBE", r.m.Type())
	}
	f.send(r.nc, &protocol.OK{ID: sub.ID})
	return &fakeWorkerConn{t: t, f: f, nc: r.nc, sub: sub}
}

// next returns the next request that is not a CREDIT; credits, in CREDIT or ACKS, are
// counted.
func (fw *fakeWorkerConn) next() protocol.Message {
	fw.t.Helper()
	for {
		r := fw.f.next(fw.t)
		switch m := r.m.(type) {
		case *protocol.Credit:
			fw.credits += m.Credits
			continue
		case *protocol.Acks:
			fw.credits += m.Credits
		}
		return r.m
	}
}

// waitCredits reads CREDITs until n credits in all came back; any other request
// meanwhile fails the test.
func (fw *fakeWorkerConn) waitCredits(n uint64) {
	fw.t.Helper()
	for fw.credits < n {
		r := fw.f.next(fw.t)
		c, ok := r.m.(*protocol.Credit)
		if !ok {
			fw.t.Fatalf("got %v %+v while waiting for credits", r.m.Type(), r.m)
		}
		fw.credits += c.Credits
	}
}

func (fw *fakeWorkerConn) fire(run uint64) {
	fw.f.send(fw.nc, &protocol.Fire{Namespace: "default", TaskID: "t", TaskType: "w", RunID: run, Attempt: 1,
		Due: 1, Epoch: 3, TTR: int64(tockdtest.Limit), Durability: protocol.Ephemeral})
}

// withheldAcks runs n FIREs through a Worker whose handlers return at once, while the
// fake withholds its answers to the first maxAckFramesInFlight ACKS frames: the acker
// may then send nothing more, so the other runs' outcomes queue (the test waits until
// every one is queued). It returns the fake, the withheld frames, the runs they carry,
// the Worker's OnAcked reports and a func that stops the Worker.
func withheldAcks(t *testing.T, n int) (fw *fakeWorkerConn, withheld []*protocol.Acks, acked map[uint64]int, reported func() map[uint64]error, stop func()) {
	t.Helper()
	f := startFake(t, "127.0.0.1:0")
	var mu sync.Mutex
	reports := map[uint64]error{}
	w := newWorkerT(t, f.ln.Addr().String(), WithConcurrency(n), WithOnAcked(func(fi *Fire, result, ackErr error) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := reports[fi.RunID]; dup {
			t.Errorf("run %d reported twice", fi.RunID)
		}
		reports[fi.RunID] = ackErr
	}))
	var queued atomic.Int32
	allQueued := make(chan struct{})
	w.queued = func() {
		if queued.Add(1) == int32(n) {
			close(allQueued)
		}
	}
	fw, stop = runOnFakeStoppable(t, f, w, func(context.Context, *Fire) error { return nil })
	for run := uint64(1); run <= uint64(n); run++ {
		fw.fire(run)
	}
	acked = map[uint64]int{}
	for len(withheld) < maxAckFramesInFlight && len(acked) < n {
		a, ok := fw.next().(*protocol.Acks)
		if !ok {
			t.Fatal("want ACKS")
		}
		for _, r := range a.RunIDs {
			acked[r]++
		}
		withheld = append(withheld, a)
	}
	select {
	case <-allQueued:
	case <-time.After(tockdtest.Limit):
		t.Fatalf("only %d of %d outcomes queued", queued.Load(), n)
	}
	reported = func() map[uint64]error {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(reports)
	}
	return fw, withheld, acked, reported, stop
}

// TestWorkerBatchesAcks: runs that finish while maxAckFramesInFlight ACKS frames await
// their answers tockdtest.Limit, and their credits with them (the Worker's back-pressure); once
// answers come they go out together, in at most two more frames (the one the acker held
// when the bound stopped it, and everything queued meanwhile), each ACKS carrying the
// credits of the runs it reports.
func TestWorkerBatchesAcks(t *testing.T) {
	const n = 60
	fw, withheld, acked, reported, _ := withheldAcks(t, n)
	frames := len(withheld)
	for len(acked) < n {
		for _, a := range withheld {
			fw.f.send(fw.nc, &protocol.Acked{ID: a.ID})
		}
		withheld = withheld[:0]
		m := fw.next()
		a, ok := m.(*protocol.Acks)
		if !ok {
			t.Fatalf("got %v %+v, want ACKS", m.Type(), m)
		}
		frames++
		for _, r := range a.RunIDs {
			acked[r]++
		}
		withheld = append(withheld, a)
	}
	for _, a := range withheld {
		fw.f.send(fw.nc, &protocol.Acked{ID: a.ID})
	}
	for r, k := range acked {
		if k != 1 || r < 1 || r > n {
			t.Fatalf("run %d acknowledged %d times", r, k)
		}
	}
	if frames > maxAckFramesInFlight+2 {
		t.Fatalf("%d runs took %d ACKS frames, want at most %d", n, frames, maxAckFramesInFlight+2)
	}
	if fw.credits != n {
		t.Fatalf("the ACKS frames granted %d credits, want %d: one per run, with its report", fw.credits, n)
	}
	tockdtest.Eventually(t, "every run reported", func() bool { return len(reported()) == n })
	for r, err := range reported() {
		if err != nil {
			t.Errorf("run %d: ackErr %v", r, err)
		}
	}
}

// TestWorkerStopReportsFinishedRuns: runs that finished before the Worker stopped are
// reported before it closes its connection, and their answers reach OnAcked: a stop
// does not make the server run them again.
func TestWorkerStopReportsFinishedRuns(t *testing.T) {
	const n = 40
	fw, withheld, acked, reported, stop := withheldAcks(t, n)
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	for _, a := range withheld {
		fw.f.send(fw.nc, &protocol.Acked{ID: a.ID})
	}
	for len(acked) < n {
		a, ok := fw.next().(*protocol.Acks)
		if !ok {
			t.Fatal("want ACKS")
		}
		for _, r := range a.RunIDs {
			acked[r]++
		}
		fw.f.send(fw.nc, &protocol.Acked{ID: a.ID})
	}
	tockdtest.Receive(t, stopped, "Run's return after its last reports were answered")
	if got := reported(); len(got) != n {
		t.Fatalf("%d runs reported to OnAcked by the time Run returned, want %d", len(got), n)
	}
}

// TestWorkerAckFallsBackToAck: a server that does not know ACKS (UNKNOWN_TYPE) gets the
// same runs as ACKs, one each, and ACKs and CREDITs from then on; a failure listed in
// ACKED reaches OnAcked as that run's error.
func TestWorkerAckFallsBackToAck(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	var mu sync.Mutex
	reported := map[uint64]error{}
	w := newWorkerT(t, f.ln.Addr().String(), WithConcurrency(4), WithOnAcked(func(fi *Fire, result, ackErr error) {
		mu.Lock()
		defer mu.Unlock()
		reported[fi.RunID] = ackErr
	}))
	fw := runOnFake(t, f, w, func(context.Context, *Fire) error { return nil })

	fw.fire(1)
	a, ok := fw.next().(*protocol.Acks)
	if !ok || len(a.RunIDs) != 1 || a.RunIDs[0] != 1 {
		t.Fatalf("want ACKS of run 1, got %+v", a)
	}
	fw.f.send(fw.nc, &protocol.Acked{ID: a.ID, Failed: []protocol.AckFailure{{RunID: 1, Code: protocol.CodeUnknownRun, Message: "gone"}}})
	tockdtest.Eventually(t, "run 1 reported", func() bool { mu.Lock(); defer mu.Unlock(); return reported[1] != nil })

	fw.fire(2)
	a, ok = fw.next().(*protocol.Acks)
	if !ok || len(a.RunIDs) != 1 || a.RunIDs[0] != 2 {
		t.Fatalf("want ACKS of run 2, got %+v", a)
	}
	fw.f.send(fw.nc, &protocol.Error{ID: a.ID, Code: protocol.CodeUnknownType, Message: "unknown type 53"})
	fw.credits -= a.Credits // refused with the frame: they must be granted again
	for _, run := range []uint64{2, 3} {
		if run == 3 {
			fw.fire(3)
		}
		ack, ok := fw.next().(*protocol.Ack)
		if !ok || ack.RunID != run || ack.Epoch != 3 {
			t.Fatalf("want ACK of run %d after UNKNOWN_TYPE, got %+v", run, ack)
		}
		fw.f.send(fw.nc, &protocol.OK{ID: ack.ID})
	}
	tockdtest.Eventually(t, "3 runs reported", func() bool { mu.Lock(); defer mu.Unlock(); return len(reported) == 3 })
	fw.waitCredits(3) // one per run, the refused ACKS's granted again by CREDIT
	mu.Lock()
	defer mu.Unlock()
	if perr, ok := reported[1].(*protocol.Error); !ok || perr.Code != protocol.CodeUnknownRun || perr.RunID != 1 {
		t.Errorf("run 1: ackErr %v, want UNKNOWN_RUN", reported[1])
	}
	if reported[2] != nil || reported[3] != nil {
		t.Errorf("runs 2, 3: ackErr %v, %v, want nil", reported[2], reported[3])
	}
}
