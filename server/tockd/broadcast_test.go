package tockd

import (
	"errors"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// A broadcast's targets are the type's workers in subscription order; each shard's run
// goes to its own target whatever the strategy would pick, and fails instead of waiting:
// retryably while its worker has no credit, for good once it has gone.
func TestBroadcastRunsGoToTheirOwnWorker(t *testing.T) {
	tr := newTestRouter(t, Options{})
	w1 := tr.worker("1", 1, "bc")
	w2 := tr.worker("2", 100, "bc") // least loaded would take every run
	tr.worker("3", 100, "other")
	bc := &task.Task{Namespace: "ns", ID: "b", Type: "bc", Broadcast: true}
	if n := tr.r.broadcasts.fanOut(bc); n != 2 {
		t.Fatalf("fanOut = %d, want the 2 workers of the type", n)
	}
	fire := func(runID uint64, i int) *protocol.Fire {
		return &protocol.Fire{RunID: runID, Namespace: "ns", TaskID: "b", TaskType: "bc", Shard: protocol.ShardOf{Index: uint16(i), Of: 2}}
	}
	for i, w := range []*fakeWorker{w1, w2} {
		if err := tr.r.broadcasts.route(fire(uint64(i+1), i), i); !errors.Is(err, task.ErrDeferred) {
			t.Fatalf("shard %d: %v, want it FIREd", i, err)
		}
		if len(w.fires) != 1 || w.fires[0].RunID != uint64(i+1) {
			t.Fatalf("shard %d: worker %s got %d FIREs, want this one", i, w.name, len(w.fires))
		}
	}
	tr.verify()
	// w1's one credit is spent: a retry of shard 0 fails retryably, w2 untouched.
	if err := tr.r.broadcasts.route(fire(3, 0), 0); !errors.Is(err, errNoWorker) || task.IsNonRetryable(err) {
		t.Fatalf("shard 0 with its worker out of credit: %v, want a retryable errNoWorker", err)
	}
	tr.r.remove(w1, false)
	if err := tr.r.broadcasts.route(fire(4, 0), 0); !errors.Is(err, errBroadcastGone) || !task.IsNonRetryable(err) {
		t.Fatalf("shard 0 with its worker gone: %v, want a non-retryable errBroadcastGone", err)
	}
	if len(w2.fires) != 1 {
		t.Errorf("worker 2 got %d FIREs, want only its own", len(w2.fires))
	}
	tr.verify()
}
