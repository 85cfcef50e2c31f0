package tockd

import (
	"context"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// openPeerStore connects a second node's store to the etcd of st.
func openPeerStore(t *testing.T, st *store.Store, node string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), replyWait)
	defer cancel()
	peer, err := store.Open(ctx, store.Options{Endpoints: []string{st.ClientURL()}, Node: node})
	if err != nil {
		t.Fatalf("open a peer store: %v", err)
	}
	return peer
}

// Two nodes on one etcd: the follower refuses task requests and SUBSCRIBE with
// NOT_LEADER naming the leader's address; when the leader resigns (Shutdown), the
// follower is elected, loads the durable tasks from etcd and dispatches them at its own,
// higher epoch.
func TestFollowerRedirectsThenTakesOver(t *testing.T) {
	st1 := openStore(t, t.TempDir())
	defer st1.Close()
	st2 := openPeerStore(t, st1, "n2")
	defer st2.Close()
	leader := startDurable(t, st1, nil) // elected first: the only candidate yet
	stopped := false
	defer func() {
		if !stopped {
			leader.stop(t)
		}
	}()
	follower, err := New(Options{Store: st2})
	if err != nil {
		t.Fatal(err)
	}
	fd := serveDurable(t, follower)
	defer fd.stop(t)

	c := connect(t, leader.addr)
	submit(t, c, 2, durableTask("kept", 0))
	firstEpoch := leader.srv.Stats().Epoch

	fc := connect(t, fd.addr)
	e := wantError(t, fc.call(&protocol.Submit{ID: 3, Task: durableTask("refused", 0)}), protocol.CodeNotLeader, "")
	if e.Leader != leader.addr {
		t.Fatalf("NOT_LEADER names %q, want the leader's address %q", e.Leader, leader.addr)
	}
	w := dial(t, fd.addr)
	w.hello(&protocol.Hello{ID: 1, Version: protocol.Version, Name: "w", Role: protocol.RoleWorker})
	wantError(t, w.call(&protocol.Subscribe{ID: 2, Types: []string{"t"}, Credits: 1}), protocol.CodeNotLeader, "")
	if st := follower.Stats(); st.IsLeader || st.Engine.Tasks != 0 {
		t.Fatalf("follower stats: leader %v, %d tasks; want false and none (it holds no tasks)", st.IsLeader, st.Engine.Tasks)
	}

	leader.stop(t) // resigns: the follower takes over without waiting for a TTL
	stopped = true
	deadline := time.Now().Add(replyWait)
	for !follower.Stats().IsLeader {
		if time.Now().After(deadline) {
			t.Fatal("the follower never took over")
		}
		time.Sleep(time.Millisecond)
	}
	wk := connectWorker(t, fd.addr, 1, "t")
	f := wk.fire()
	if f.TaskID != "kept" || f.Durability != protocol.Durable || f.Epoch <= firstEpoch {
		t.Fatalf("FIRE %+v after the takeover: want the durable task at an epoch above %d", f, firstEpoch)
	}
	wantOK(t, wk.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	if storedIDs(t, st2)["default/kept"] {
		t.Fatal("the record outlived the ACK at the new leader")
	}
}
