package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// fakeWorkerConn drives a Worker connected to the scripted fake server: it answers
// SUBSCRIBE, counts CREDITs, and hands every other request to the test.
type fakeWorkerConn struct {
	t       *testing.T
	f       *fake
	nc      net.Conn
	credits uint64
}

// runOnFake runs w, with h handling type "w", against the fake until the test ends, and
// accepts its SUBSCRIBE.
func runOnFake(t *testing.T, f *fake, w *Worker, h HandlerFunc) *fakeWorkerConn {
	t.Helper()
	if err := w.Handle("w", h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return subscribeFake(t, f)
}

// subscribeFake waits for the Worker's SUBSCRIBE and accepts it.
func subscribeFake(t *testing.T, f *fake) *fakeWorkerConn {
	t.Helper()
	r := f.next(t)
	sub, ok := r.m.(*protocol.Subscribe)
	if !ok {
		t.Fatalf("first request %v, want SUBSCRIBE", r.m.Type())
	}
	f.send(r.nc, &protocol.OK{ID: sub.ID})
	return &fakeWorkerConn{t: t, f: f, nc: r.nc}
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
		Due: 1, Epoch: 3, TTR: int64(wait), Durability: protocol.Ephemeral})
}

// TestWorkerBatchesAcks: runs that finish while earlier ACKS frames await their answers
// go out together, and their credits are granted meanwhile. The fake withholds its
// answers until it has seen maxAckFramesInFlight frames and a credit for every run (a
// run's outcome is queued with its credit), so at most two more frames can follow: the
// one the acker holds while it waits, and one with everything queued meanwhile.
func TestWorkerBatchesAcks(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	const n = 20 // below 32, so that acker.creditBatch is 1: every credit is granted while the fake waits
	release := make(chan struct{})
	var mu sync.Mutex
	reported := map[uint64]error{}
	w := newWorkerT(t, f.ln.Addr().String(), WithConcurrency(n), WithOnAcked(func(fi *Fire, result, ackErr error) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := reported[fi.RunID]; dup {
			t.Errorf("run %d reported twice", fi.RunID)
		}
		reported[fi.RunID] = ackErr
	}))
	fw := runOnFake(t, f, w, func(context.Context, *Fire) error { <-release; return nil })
	for run := uint64(1); run <= n; run++ {
		fw.fire(run)
	}
	close(release)

	acked := map[uint64]int{}
	var withheld []*protocol.Acks
	frames := 0
	for len(acked) < n {
		m := fw.next()
		a, ok := m.(*protocol.Acks)
		if !ok {
			t.Fatalf("got %v %+v, want ACKS", m.Type(), m)
		}
		frames++
		if a.Epoch != 3 {
			t.Fatalf("ACKS epoch %d, want the FIREs' 3", a.Epoch)
		}
		for _, r := range a.RunIDs {
			acked[r]++
		}
		withheld = append(withheld, a)
		if len(withheld) < maxAckFramesInFlight && len(acked) < n {
			continue
		}
		if len(acked) < n {
			fw.waitCredits(n) // every outcome is queued; no frame can come meanwhile
		}
		for _, a := range withheld {
			fw.f.send(fw.nc, &protocol.Acked{ID: a.ID})
		}
		withheld = nil
	}
	for r, k := range acked {
		if k != 1 || r < 1 || r > n {
			t.Fatalf("run %d acknowledged %d times", r, k)
		}
	}
	if frames > maxAckFramesInFlight+2 {
		t.Fatalf("%d runs took %d ACKS frames, want at most %d", n, frames, maxAckFramesInFlight+2)
	}
	for _, a := range withheld {
		fw.f.send(fw.nc, &protocol.Acked{ID: a.ID})
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(reported) == n })
	mu.Lock()
	defer mu.Unlock()
	for r, err := range reported {
		if err != nil {
			t.Errorf("run %d: ackErr %v", r, err)
		}
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
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return reported[1] != nil })

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
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(reported) == 3 })
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

// waitFor polls cond until it holds or the test's wait bound passes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", wait)
		}
		time.Sleep(time.Millisecond)
	}
}
