package tockd

import (
	"fmt"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// placed submits a task due now and returns which of ws it was FIREd at, and the FIRE.
// It waits for the server's fired count to grow, then pings every worker: a FIRE queued
// before a PING's reply is read before it, so exactly one worker holds it.
func placed(t *testing.T, ts *testServer, c *client, ws []*wkr, w protocol.Task) (int, *protocol.Fire) {
	t.Helper()
	before := ts.srv.Stats().Fired
	submit(t, c, 2, w)
	if !waitUntil(func() bool { return ts.srv.Stats().Fired != before }) {
		t.Fatalf("%s was never fired within %v", w.ID, waitBound)
	}
	at, fire := -1, (*protocol.Fire)(nil)
	for i, wk := range ws {
		if wk.drain(); len(wk.fires) > 0 {
			if at >= 0 || len(wk.fires) > 1 {
				t.Fatalf("%s fired more than once", w.ID)
			}
			at, fire = i, wk.fires[0]
			wk.fires = nil
		}
	}
	if fire == nil || fire.TaskID != w.ID {
		t.Fatalf("no worker holds the FIRE of %s", w.ID)
	}
	wantOK(t, ws[at].ack(fire.RunID))
	wantOK(t, ws[at].req(&protocol.Credit{Credits: 1}))
	return at, fire
}

func TestDispatchRoundRobin(t *testing.T) {
	ts := startServer(t, Options{Dispatch: DispatchRoundRobin})
	c := connect(t, ts.addr)
	var ws []*wkr
	for _, name := range []string{"a", "b", "c"} {
		ws = append(ws, connectNamedWorker(t, ts.addr, name, 5, "w"))
	}
	for i := range 7 {
		if at, _ := placed(t, ts, c, ws, workTask(fmt.Sprint("rr", i), 1)); at != i%3 {
			t.Fatalf("task %d went to worker %d, want %d (in turn)", i, at, i%3)
		}
	}
}

// Key hashing: the same task key lands on the same worker every time; a worker joining
// takes over some keys and moves no other key.
func TestDispatchKeyHash(t *testing.T) {
	ts := startServer(t, Options{Dispatch: DispatchKeyHash})
	c := connect(t, ts.addr)
	ws := []*wkr{connectNamedWorker(t, ts.addr, "a", 5, "w"), connectNamedWorker(t, ts.addr, "b", 5, "w")}
	const keys = 24
	round := func(version uint64) []int {
		at := make([]int, keys)
		for k := range keys {
			w := workTask(fmt.Sprint("key", k), 1)
			w.Version = version
			at[k], _ = placed(t, ts, c, ws, w)
		}
		return at
	}
	first := round(1)
	per := map[int]int{}
	for _, a := range first {
		per[a]++
	}
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("every key on one worker: %v", per) // 2^-23 for a fair hash
	}
	if again := round(2); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("placement changed with nothing else changing:\n%v\n%v", first, again)
	}
	ws = append(ws, connectNamedWorker(t, ts.addr, "c", 5, "w"))
	third := round(3)
	moved := 0
	for k := range keys {
		if third[k] != first[k] {
			if third[k] != 2 {
				t.Fatalf("key%d moved from worker %d to %d, not to the new worker", k, first[k], third[k])
			}
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("the new worker won no key") // (2/3)^24 ≈ 6e-5 for a fair hash
	}
}

// A run whose worker never ACKs is redelivered, after its TTR, to another worker.
func TestNeverAckedRunRunsElsewhere(t *testing.T) {
	ts := startServer(t, Options{DefaultTTR: 100 * time.Millisecond, EngineOptions: []task.Option{task.WithWorkers(2)}})
	c := connect(t, ts.addr)
	silent := connectWorker(t, ts.addr, 1, "w")
	submit(t, c, 2, workTask("x", 2))
	f1 := silent.fire() // taken, never ACKed; silent has no credit left
	other := connectWorker(t, ts.addr, 1, "w")
	f2 := other.fire()
	if f2.TaskID != "x" || f2.Attempt != 2 || f2.RunID == f1.RunID {
		t.Fatalf("redelivered FIRE %+v after %+v", f2, f1)
	}
	wantOK(t, other.ack(f2.RunID))
	c.waitState(3, "x", task.Succeeded)
	wantError(t, silent.ack(f1.RunID), protocol.CodeUnknownRun, "")
}
