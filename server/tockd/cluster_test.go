package tockd

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// Two nodes on one etcd: the follower refuses task requests and SUBSCRIBE with
// NOT_LEADER naming the leader's address; when the leader resigns (Shutdown), the
// follower is elected, loads the durable tasks from etcd and dispatches them at its own,
// higher epoch.
func TestFollowerRedirectsThenTakesOver(t *testing.T) {
	n := startTwoNodes(t, Options{})
	st2, leader, follower, fd := n.st2, n.leader, n.follower, n.fd

	c := connect(t, leader.addr)
	submit(t, c, 2, durableTask("kept", 0))
	firstEpoch := leader.srv.Stats().Epoch

	fc := connect(t, fd.addr)
	// A follower names the leader once it has read who leads (from etcd, when its watch
	// on the election begins or sees a change, and every leaderPollInterval; never in a
	// request); until then NOT_LEADER names nobody.
	var named string
	if !waitUntil(func() bool {
		e := wantError(t, fc.call(&protocol.Submit{ID: 3, Task: durableTask("refused", 0)}), protocol.CodeNotLeader, "")
		if named = e.Leader; named != "" && named != leader.addr {
			t.Fatalf("NOT_LEADER names %q, want the leader's address %q", named, leader.addr)
		}
		return named == leader.addr
	}) {
		t.Fatalf("NOT_LEADER names %q after %v, want the leader's address %q", named, waitBound, leader.addr)
	}
	w := connectAs(t, fd.addr, protocol.RoleWorker, "w")
	wantError(t, w.call(&protocol.Subscribe{ID: 2, Types: []string{"t"}, Credits: 1}), protocol.CodeNotLeader, "")
	if st := follower.Stats(); st.IsLeader || st.Engine.Tasks != 0 {
		t.Fatalf("follower stats: leader %v, %d tasks; want false and none (it holds no tasks)", st.IsLeader, st.Engine.Tasks)
	}

	n.leader.stop(t) // resigns: the follower takes over without waiting for a TTL
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
	n := startTwoNodes(t, Options{})
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
	if locks, err := st1.Locks().Held(context.Background()); err != nil || !locks[store.Key{Namespace: "default", ID: "excl"}] || len(locks) != 1 {
		t.Fatalf("run locks while in flight: %v, %v; want only excl's", locks, err)
	}

	// The old run's time to run ends before this instant plus ttr: its FIRE came earlier.
	stopping := time.Now()
	n.leader.stop(t)
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
	waitNoLocks(t, st2, "after the ACK")
}

// A recurring durable task resumes, after a time with no leader, where its last leader
// left it: the occurrences that fell due meanwhile get its misfire policy (fire once:
// one run at once, due at the latest missed occurrence; skip: the next occurrence on the
// same phase) instead of the schedule starting over.
func TestRecurringTaskResumesAcrossAnOutage(t *testing.T) {
	for _, policy := range []task.MisfirePolicy{task.MisfireFireOnce, task.MisfireSkip} {
		t.Run(policy.String(), func(t *testing.T) {
			st := openStore(t, t.TempDir())
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

			b := newServer(t, Options{Store: st, EngineOptions: []task.Option{task.WithWorkers(2)}})
			bd := serve(t, b)
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
	st, ds := startLeader(t)
	entries := func(want int) []store.Worker {
		t.Helper()
		var ws []store.Worker
		var err error
		if !waitUntil(func() bool {
			ws, err = st.Workers().List(context.Background())
			return err == nil && len(ws) == want
		}) {
			t.Fatalf("registry %+v (%v), want %d entries", ws, err, want)
		}
		return ws
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

// A follower learns of a new leader from its watch on the election, not from its poll:
// with the poll made too rare to matter, once the leader resigns and one of two
// followers takes over, the other's NOT_LEADER names the new leader.
func TestFollowerNamesTheNextLeaderFromItsWatch(t *testing.T) {
	st := openStore(t, t.TempDir())
	leader := startDurable(t, st, nil)
	follow := func(node string) (*Server, *testServer) {
		srv := newServer(t, Options{Store: openPeerStore(t, st, node)})
		srv.replica.lead.pollEvery = time.Hour // a read at start, then only on a change seen
		return srv, serve(t, srv)
	}
	second, sd := follow("n2")
	third, td := follow("n3")
	wantNamed := func(addr, leader string) {
		t.Helper()
		c := connect(t, addr)
		var named string
		if !waitUntil(func() bool {
			named = wantError(t, c.call(&protocol.Submit{ID: 3, Task: durableTask("refused", 0)}), protocol.CodeNotLeader, "").Leader
			return named == leader
		}) {
			t.Fatalf("NOT_LEADER at %s names %q after %v, want the leader %q", addr, named, waitBound, leader)
		}
	}
	wantNamed(sd.addr, leader.addr)
	wantNamed(td.addr, leader.addr)

	leader.stop(t) // resigns: a follower takes over at once
	var next, other *testServer
	if !waitUntil(func() bool {
		switch {
		case second.Stats().IsLeader:
			next, other = sd, td
		case third.Stats().IsLeader:
			next, other = td, sd
		}
		return next != nil
	}) {
		t.Fatalf("no follower took over within %v", waitBound)
	}
	wantNamed(other.addr, next.addr)
}
