package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
	"github.com/tock-sched/tock/server/tockd"
	"go.uber.org/zap"
)

// twoNodes starts two tockd nodes on one embedded etcd; the first is elected before the
// second starts. Cleanup stops both and the stores.
func twoNodes(t *testing.T) (leader, follower *server) {
	t.Helper()
	ctx := bounded(t)
	st1, err := store.Open(ctx, store.WithEmbedded(t.TempDir()), store.WithNode("n1"), store.WithEmbeddedTick(10*time.Millisecond),
		store.WithEmbeddedElection(100*time.Millisecond), store.WithEmbeddedLog(zap.NewNop()))
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	o2 := st1.ClientOptions() // the embedded etcd wants its root password
	o2.Node = "n2"
	st2, err := store.Open(ctx, store.WithOptions(o2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close(); st1.Close() }) // after the servers' cleanups (LIFO)
	leader = startServer(t, "127.0.0.1:0", tockd.Options{Store: st1, NodeName: "n1"})
	deadline := time.Now().Add(wait)
	for !leader.srv.Stats().IsLeader {
		if time.Now().After(deadline) {
			t.Fatal("n1 not elected")
		}
		time.Sleep(time.Millisecond)
	}
	follower = startServer(t, "127.0.0.1:0", tockd.Options{Store: st2, NodeName: "n2"})
	return leader, follower
}

// A client and a worker pointed at a follower end up at the leader (NOT_LEADER names
// it); when the leader steps down, both move to the new leader, which holds the durable
// task submitted before and runs it.
func TestClientAndWorkerFollowTheLeader(t *testing.T) {
	leader, follower := twoNodes(t)
	ctx := bounded(t)
	c := dialT(t, follower.addr+","+leader.addr)
	if _, err := c.Submit(ctx, oneShot("first", "job", 0), protocol.Durable); err != nil {
		t.Fatalf("submit through the follower's address: %v", err)
	}
	if _, err := c.Submit(ctx, oneShot("later", "job", 300*time.Millisecond), protocol.Durable); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]uint64{} // task -> epoch of its FIRE
	w, err := NewWorker(follower.addr + "," + leader.addr)
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
	case <-time.After(wait):
		t.Fatal("the worker never ran the first task")
	}
	waitState(t, c, "first", task.Succeeded)
	firstEpoch := leader.srv.Stats().Epoch
	leader.stop(t) // resigns; n2 is elected and loads "later" from etcd
	waitState(t, c, "later", task.Succeeded)
	mu.Lock()
	defer mu.Unlock()
	if ran["later"] <= firstEpoch || follower.srv.Stats().Epoch != ran["later"] {
		t.Fatalf("later ran at epoch %d; want the new leader's (%d), above %d", ran["later"], follower.srv.Stats().Epoch, firstEpoch)
	}
}
