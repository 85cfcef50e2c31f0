package tockd

import (
	"fmt"
	"testing"

	"github.com/tock-sched/tock/server/protocol"
)

// TestConcurrencyKeyOverTheWire: six tasks submitted with concurrency key "db", limit
// 2, to a worker with credit for ten that holds every FIRE un-acked: it is sent two;
// the other four wait, DUE with no attempt used; each ACK brings one more FIRE, so the
// worker, counting what it holds, never holds more than two, and every task is fired
// once.
func TestConcurrencyKeyOverTheWire(t *testing.T) {
	const n, limit = 6, 2
	ts, c, w := startWithWorker(t, Options{}, 10)
	for i := range n {
		wt := workTask(fmt.Sprint("k", i), 1)
		wt.ConcurrencyKey, wt.ConcurrencyLimit = "db", limit
		submit(t, c, uint64(2+i), wt)
	}
	held := []*protocol.Fire{w.fire(), w.fire()}
	if !waitUntil(func() bool { return ts.srv.Stats().Engine.WaitingOnLimit == n-limit }) {
		t.Fatalf("%d runs waiting on the key, want %d within %v", ts.srv.Stats().Engine.WaitingOnLimit, n-limit, waitBound)
	}
	waiting := 0
	for i := range n {
		info := c.call(&protocol.Get{ID: uint64(100 + i), TaskRef: protocol.TaskRef{TaskID: fmt.Sprint("k", i)}}).(*protocol.TaskInfo).Info
		if info.State.String() == "DUE" {
			waiting++
			if info.Attempts != 0 {
				t.Errorf("k%d waits with %d attempts used", i, info.Attempts)
			}
		}
	}
	if waiting != n-limit {
		t.Errorf("%d tasks read DUE, want %d", waiting, n-limit)
	}
	fired := map[string]int{}
	for _, f := range held {
		fired[f.TaskID]++
	}
	for len(held) > 0 {
		w.drain() // a FIRE sent beyond the limit would be read by now
		if len(held)+len(w.fires) > limit {
			t.Fatalf("the worker holds %d un-acked runs of the key, limit %d", len(held)+len(w.fires), limit)
		}
		held = append(held, w.fires...)
		for _, f := range w.fires {
			fired[f.TaskID]++
		}
		w.fires = nil
		wantOK(t, w.ack(held[0].RunID))
		held = held[1:]
		if len(fired) < n && len(held) < limit {
			f := w.fire()
			fired[f.TaskID]++
			held = append(held, f)
		}
	}
	for i := range n {
		if got := fired[fmt.Sprint("k", i)]; got != 1 {
			t.Errorf("k%d fired %d times, want once", i, got)
		}
	}
}
