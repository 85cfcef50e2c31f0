package client

import (
	"context"
	"sync"
	"testing"
	"time"

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
func TestClientAndWorkerFollowTheLeader(t *testing.T) {
	leader, follower := twoNodes(t)
	ctx := bounded(t)
	c := dialT(t, follower.Addr+","+leader.Addr)
	if _, err := c.Submit(ctx, oneShot("first", "job", 0), protocol.Durable); err != nil {
		t.Fatalf("submit through the follower's address: %v", err)
	}
	if _, err := c.Submit(ctx, oneShot("later", "job", 300*time.Millisecond), protocol.Durable); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]uint64{} // task -> epoch of its FIRE
	w, err := NewWorker(follower.Addr + "," + leader.Addr)
	if err != nil {
		t.Fatal(err)
	}
	stepDown := make(chan struct{})
	w.Handle("job", func(ctx context.Context, f *Fire) error {
		mu.Lock()
		defer mu.Unlock()
		ran[f.TaskID] = f.Epoch
		if f.TaskID == "first" {
			close(stepDown)
		}
		return nil
	})
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()

	select {
	case <-stepDown:
	case <-time.After(tockdtest.Limit):
		t.Fatal("the worker never ran the first task")
	}
	waitState(t, c, "first", task.Succeeded)
	firstEpoch := leader.Stats().Epoch
	leader.Stop() // resigns; n2 is elected and loads "later" from etcd
	waitState(t, c, "later", task.Succeeded)
	mu.Lock()
	defer mu.Unlock()
	if ran["later"] <= firstEpoch || follower.Stats().Epoch != ran["later"] {
		t.Fatalf("later ran at epoch %d; want the new leader's (%d), above %d", ran["later"], follower.Stats().Epoch, firstEpoch)
	}
}
