package client

import (
	"context"
	"sync"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// twoNodes starts two tockd nodes on one embedded etcd; the first is elected before the
// second starts. Cleanup stops both and the stores.
func twoNodes(t *testing.T) (leader, follower *tockdtest.Server) {
	t.Helper()
	leader = tockdtest.Start(t, tockdtest.Etcd(), tockdtest.Options(tockd.Options{NodeName: "n1"}))
	tockdtest.Eventually(t, "n1 elected", func() bool { return leader.Stats().IsLeader })
	follower = tockdtest.Start(t, tockdtest.EtcdOf(leader), tockdtest.Options(tockd.Options{NodeName: "n2"}))
	return leader, follower
}

// A client and a worker pointed at a follower end up at the leader (NOT_LEADER names
// it); when the leader steps down, both move to the new leader, which holds the durable
// task submitted before and runs it.
//
// The held-over task has a type no worker serves until the leader has stepped down, so
// that it cannot run before the failover however slowly this machine runs the rest (a
// short delay instead raced the stop on a loaded box: "later" ran at the first leader,
// and the new leader, rightly, no longer held it).
func TestClientAndWorkerFollowTheLeader(t *testing.T) {
	leader, follower := twoNodes(t)
	ctx := bounded(t)
	c := dialT(t, follower.Addr+","+leader.Addr)
	if _, err := c.Submit(ctx, oneShot("first", "job", 0), protocol.Durable); err != nil {
		t.Fatalf("submit through the follower's address: %v", err)
	}
	if _, err := c.Submit(ctx, oneShot("later", "held", 0), protocol.Durable); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]uint64{} // task -> epoch of its FIRE
	record := func(ctx context.Context, f *Fire) error {
		mu.Lock()
		defer mu.Unlock()
		ran[f.TaskID] = f.Epoch
		return nil
	}
	runWorker := func(typ string) {
		w, err := NewWorker(follower.Addr + "," + leader.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Handle(typ, record); err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	runWorker("job")
	waitState(t, c, "first", task.Succeeded)
	firstEpoch := leader.Stats().Epoch
	leader.Stop() // resigns; n2 is elected and loads "later" from etcd
	if _, err := c.Submit(ctx, oneShot("after", "job", 0), protocol.Durable); err != nil {
		t.Fatalf("submit after the step-down: %v", err)
	}
	runWorker("held")
	waitState(t, c, "later", task.Succeeded)
	waitState(t, c, "after", task.Succeeded)
	newEpoch := follower.Stats().Epoch
	mu.Lock()
	defer mu.Unlock()
	if ran["first"] != firstEpoch {
		t.Errorf("first ran at epoch %d; want the first leader's (%d)", ran["first"], firstEpoch)
	}
	for _, id := range []string{"later", "after"} {
		if ran[id] <= firstEpoch || ran[id] != newEpoch {
			t.Errorf("%s ran at epoch %d; want the new leader's (%d), above %d", id, ran[id], newEpoch, firstEpoch)
		}
	}
}
