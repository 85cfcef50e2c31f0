package tockd

import (
	"context"
	"encoding/json"
	"github.com/tock-sched/tock/core/task"
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
	o := st.ClientOptions()
	o.Node = node
	peer, err := store.Open(ctx, store.WithOptions(o))
	if err != nil {
		t.Fatalf("open a peer store: %v", err)
	}
	return peer
}

// twoNodes is a leader and a follower on one embedded etcd; cleanup stops what is left.
type twoNodes struct {
	st1, st2     *store.Store
	leader, fd   *durableServer
	follower     *Server
	leaderActive bool
}

// startTwoNodes starts the leader (elected first: the only candidate yet), then the
// follower.
func startTwoNodes(t *testing.T) *twoNodes {
	t.Helper()
	n := &twoNodes{st1: openStore(t, t.TempDir())}
	t.Cleanup(func() { n.st1.Close() })
	n.st2 = openPeerStore(t, n.st1, "n2")
	t.Cleanup(func() { n.st2.Close() })
	n.leader, n.leaderActive = startDurable(t, n.st1, nil), true
	t.Cleanup(func() {
		if n.leaderActive {
			n.leader.stop(t)
		}
	})
	var err error
	if n.follower, err = New(Options{Store: n.st2}); err != nil {
		t.Fatal(err)
	}
	n.fd = serveDurable(t, n.follower)
	t.Cleanup(func() { n.fd.stop(t) })
	return n
}

// stopLeader stops the leader (it resigns on the way).
func (n *twoNodes) stopLeader(t *testing.T) {
	n.leader.stop(t)
	n.leaderActive = false
}

// Two nodes on one etcd: the follower refuses task requests and SUBSCRIBE with
// NOT_LEADER naming the leader's address; when the leader resigns (Shutdown), the
// follower is elected, loads the durable tasks from etcd and dispatches them at its own,
// higher epoch.
func TestFollowerRedirectsThenTakesOver(t *testing.T) {
	n := startTwoNodes(t)
	st2, leader, follower, fd := n.st2, n.leader, n.follower, n.fd

	c := connect(t, leader.addr)
	submit(t, c, 2, durableTask("kept", 0))
	firstEpoch := leader.srv.Stats().Epoch

	fc := connect(t, fd.addr)
	// A follower names the leader once it has read who leads (it polls etcd every
	// leaderPollInterval, never in a request); until then NOT_LEADER names nobody.
	for deadline := time.Now().Add(replyWait); ; {
		e := wantError(t, fc.call(&protocol.Submit{ID: 3, Task: durableTask("refused", 0)}), protocol.CodeNotLeader, "")
		if e.Leader == leader.addr {
			break
		}
		if e.Leader != "" || time.Now().After(deadline) {
			t.Fatalf("NOT_LEADER names %q, want the leader's address %q", e.Leader, leader.addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	w := dial(t, fd.addr)
	w.hello(&protocol.Hello{ID: 1, Version: protocol.Version, Name: "w", Role: protocol.RoleWorker})
	wantError(t, w.call(&protocol.Subscribe{ID: 2, Types: []string{"t"}, Credits: 1}), protocol.CodeNotLeader, "")
	if st := follower.Stats(); st.IsLeader || st.Engine.Tasks != 0 {
		t.Fatalf("follower stats: leader %v, %d tasks; want false and none (it holds no tasks)", st.IsLeader, st.Engine.Tasks)
	}

	n.stopLeader(t) // resigns: the follower takes over without waiting for a TTL
	waitLeading(t, follower, "the follower never took over")
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

// An exclusive durable task whose run was in flight when its leader went away is run by
// the next leader only one time to run after the takeover (the old run may still execute
// somewhere); a plain durable task in the same position runs at once.
func TestExclusiveTaskWaitsOutARunInFlight(t *testing.T) {
	n := startTwoNodes(t)
	st1, st2, leader, follower, fd := n.st1, n.st2, n.leader, n.follower, n.fd

	const ttr = time.Second
	c := connect(t, leader.addr)
	excl := durableTask("excl", 0)
	excl.Type, excl.Exclusive, excl.Timeout = "w", true, int64(ttr)
	plain := durableTask("plain", 0)
	plain.Type, plain.Timeout = "w", int64(ttr)
	submit(t, c, 2, excl)
	submit(t, c, 3, plain)
	w := connectWorker(t, leader.addr, 2, "w")
	for range 2 { // both FIREd, neither ACKed: in flight when the leader goes
		if f := w.fire(); f.TaskID == "excl" && f.Durability != protocol.Durable {
			t.Fatalf("FIRE %+v", f)
		}
	}
	if locks, err := st1.Locks(context.Background()); err != nil || !locks[store.Key{Namespace: "default", ID: "excl"}] || len(locks) != 1 {
		t.Fatalf("run locks while in flight: %v, %v; want only excl's", locks, err)
	}

	// The old run's time to run ends before this instant plus ttr: its FIRE came earlier.
	stopping := time.Now()
	n.stopLeader(t)
	waitLeading(t, follower, "the follower never took over")
	w2 := connectWorker(t, fd.addr, 2, "w")
	first := w2.fire()
	if first.TaskID != "plain" {
		t.Fatalf("first FIRE after the takeover is %s, want the plain task (excl waits)", first.TaskID)
	}
	second := w2.fire()
	if after := time.Since(stopping); second.TaskID != "excl" || after < ttr {
		t.Fatalf("FIRE of %s %v after the old leader began to stop; want excl, no sooner than its time to run %v (the old run's may not have ended)",
			second.TaskID, after, ttr)
	}
	wantOK(t, w2.req(&protocol.Ack{RunID: second.RunID, Epoch: second.Epoch}))
	deadline := time.Now().Add(replyWait)
	for {
		locks, err := st2.Locks(context.Background())
		if err == nil && len(locks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run locks after the ACK: %v, %v; want none", locks, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A recurring durable task resumes, after a time with no leader, where its last leader
// left it: the occurrences that fell due meanwhile get its misfire policy (fire once:
// one run at once, due at the latest missed occurrence; skip: the next occurrence on the
// same phase) instead of the schedule starting over.
func TestRecurringTaskResumesAcrossAnOutage(t *testing.T) {
	for _, policy := range []task.MisfirePolicy{task.MisfireFireOnce, task.MisfireSkip} {
		t.Run(policy.String(), func(t *testing.T) {
			st := openStore(t, t.TempDir())
			defer st.Close()
			const every = 500 * time.Millisecond
			a := startDurable(t, st, nil)
			c := connect(t, a.addr)
			tk := workTask("tick", 1)
			tk.Durability, tk.Misfire = protocol.Durable, policy
			tk.Schedule = protocol.Schedule{Kind: task.KindEvery, Interval: int64(every)}
			submit(t, c, 2, tk)
			w := connectWorker(t, a.addr, 10, "w")
			var last *protocol.Fire
			for range 2 {
				last = w.fire()
				wantOK(t, w.req(&protocol.Ack{RunID: last.RunID, Epoch: last.Epoch}))
			}
			a.stop(t)             // records the progress, resigns
			time.Sleep(3 * every) // the outage: no node leads (time must pass; nothing to await)

			b, err := New(Options{Store: st, EngineOptions: []task.Option{task.WithWorkers(2)}})
			if err != nil {
				t.Fatal(err)
			}
			bd := serveDurable(t, b)
			defer bd.stop(t)
			waitLeading(t, b, "the second node was not elected")
			tookOver := time.Now().UnixNano()
			f := connectWorker(t, bd.addr, 10, "w").fire()
			phase := (f.Due - last.Due) % int64(every)
			switch {
			case policy == task.MisfireFireOnce && !(f.Due < tookOver && f.Due > last.Due && phase == 0):
				t.Fatalf("first run after the outage is due at %v, want a missed occurrence (after %v, before the takeover %v, on the schedule's phase)",
					time.Unix(0, f.Due), time.Unix(0, last.Due), time.Unix(0, tookOver))
			case policy == task.MisfireSkip && !(f.Due >= tookOver-int64(every) && phase == 0):
				t.Fatalf("first run after the outage is due at %v, want the next occurrence on the schedule's phase (takeover %v)",
					time.Unix(0, f.Due), time.Unix(0, tookOver))
			}
		})
	}
}

// The leader keeps a registry of its workers in etcd: an entry appears when a worker
// subscribes, follows its load, and goes when it disconnects.
func TestWorkerRegistry(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	ds := startDurable(t, st, nil)
	defer ds.stop(t)
	entries := func(want int) []store.Worker {
		t.Helper()
		deadline := time.Now().Add(replyWait)
		for {
			ws, err := st.Workers(context.Background())
			if err == nil && len(ws) == want {
				return ws
			}
			if time.Now().After(deadline) {
				t.Fatalf("registry %+v (%v), want %d entries", ws, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	w := connectNamedWorker(t, ds.addr, "reporter", 7, "w", "v")
	ws := entries(1)
	var e workerEntry
	if err := json.Unmarshal(ws[0].Value, &e); err != nil || ws[0].Node != ds.srv.opts.NodeName || e.Name != "reporter" ||
		e.Credits != 7 || len(e.Types) != 2 {
		t.Fatalf("entry %+v %+v (%v)", ws[0], e, err)
	}
	w.nc.Close()
	entries(0)
}
