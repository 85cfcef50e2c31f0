package tockd

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// startCarryNodes is startTwoNodes with a follower (node "n2") whose carry grace is long,
// so that a worker's reconnection is surely within it on a loaded machine; the hold ends
// as soon as the one registered worker has handed in.
func startCarryNodes(t *testing.T) *twoNodes {
	t.Helper()
	return startTwoNodes(t, Options{NodeName: "n2", CarryGrace: waitBound, EngineOptions: []task.Option{task.WithWorkers(2)}})
}

// waitRegistered waits until the follower has read the worker registry (it does every
// workerReportInterval) and so knows whom to wait for.
func waitRegistered(t *testing.T, follower *Server) {
	t.Helper()
	if !waitUntil(func() bool { return follower.replica.registry.registered.Load() >= 1 }) {
		t.Fatalf("the follower never saw the worker in the registry within %v", waitBound)
	}
}

// outcomeOf is the outcome a worker that ran f's run hands in (CARRY).
func outcomeOf(f *protocol.Fire) protocol.Outcome {
	return protocol.Outcome{RunID: f.RunID, Epoch: f.Epoch, Namespace: f.Namespace, TaskID: f.TaskID,
		Version: f.Version, Attempt: f.Attempt, Due: f.Due}
}

// carryTo connects a worker to addr (the node it reconnects to) that hands in f's outcome
// before it subscribes to typ; CARRY must be answered ACKED with nothing refused.
func carryTo(t *testing.T, addr string, f *protocol.Fire, typ string) *wkr {
	t.Helper()
	w := dialWorker(t, addr, "worker")
	sent := time.Now()
	r := w.req(&protocol.Carry{Outcomes: []protocol.Outcome{outcomeOf(f)}})
	if acked, ok := r.(*protocol.Acked); !ok || len(acked.Failed) != 0 {
		t.Fatalf("CARRY of %s's run answered %v %+v after %v, want ACKED with nothing refused", f.TaskID, r.Type(), r, time.Since(sent))
	}
	wantOK(t, w.req(&protocol.Subscribe{Types: []string{typ}, Credits: 10}))
	return w
}

// wantEndedByCarry requires f's task to have SUCCEEDED with its one carried run, w to
// have been sent no FIRE (if it was: why), and st to hold no record.
func wantEndedByCarry(t *testing.T, c *client, w *wkr, st *store.Store, f *protocol.Fire, why string) {
	t.Helper()
	if in := c.waitState(10, f.TaskID, task.Succeeded); in.Runs != 1 {
		t.Fatalf("%s ran %d times, want its one carried attempt", f.TaskID, in.Runs)
	}
	if w.drain(); len(w.fires) > 0 {
		t.Fatalf("FIRE %+v after the carried outcome: %s", w.fires[0], why)
	}
	if ids := storedIDs(t, st); len(ids) != 0 {
		t.Fatalf("records left: %v", ids)
	}
}

// A worker's ACK reaches a leader that has lost its leadership in etcd (its election key
// is gone): the ACK is answered STALE_EPOCH, or the worker is sent away first. The next leader, elected meanwhile, holds back the runs it
// loaded until the worker registered at the old leader reconnects; the worker hands in
// the outcome (CARRY) before it subscribes, and the new leader accepts it, ends the task
// with it, deletes its record and never FIREs it again. The run the worker had not
// finished is FIREd by the new leader as before.
func TestNextLeaderAcceptsACarriedOutcome(t *testing.T) {
	n := startCarryNodes(t)
	st1, st2, l1, n2, l2 := n.st1, n.st2, n.leader, n.follower, n.fd

	c := connect(t, l1.addr)
	w := connectWorker(t, l1.addr, 10, "w")
	submit(t, c, 2, durableWorkTask("carried"))
	submit(t, c, 3, durableWorkTask("unfinished"))
	fires := map[string]*protocol.Fire{}
	for range 2 {
		f := w.fire()
		fires[f.TaskID] = f
	}
	done := fires["carried"]
	if done == nil || fires["unfinished"] == nil || done.Version != 0 || done.Attempt != 1 {
		t.Fatalf("FIREs at the first leader: %+v", fires)
	}
	// The follower must have read the registry (every workerReportInterval) to know
	// whom to wait for.
	waitRegistered(t, n2)

	// The first leader's term ends in etcd: its key goes, the follower is elected.
	key := l1.srv.replica.lead.fence.Load().Key
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if _, err := st1.Client().Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	waitLeading(t, n2, "the follower was not elected")
	// The first leader sees its key go (it watches it) and sends its worker away; an
	// ACK that reaches it first is refused STALE_EPOCH. Either way the outcome stays
	// unconfirmed.
	w.send(&protocol.Ack{ID: 3, RunID: done.RunID, Epoch: done.Epoch})
	for {
		m, err := w.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the deposed leader kept its worker's connection open %v after its key went", waitBound)
		}
		if err != nil {
			break // sent away
		}
		switch m := m.(type) {
		case *protocol.Error:
			if m.ID == 3 && (m.Code != protocol.CodeStaleEpoch || m.RunID != done.RunID) {
				t.Fatalf("the ACK at the deposed leader answered %+v, want STALE_EPOCH for run %d", m, done.RunID)
			}
		case *protocol.OK:
			t.Fatalf("the deposed leader confirmed the ACK: %+v", m)
		}
	}

	// The worker moves to the new leader and hands the outcome in before subscribing.
	w2 := dialWorker(t, l2.addr, "worker")
	carryReply := w2.req(&protocol.Carry{Outcomes: []protocol.Outcome{outcomeOf(done)}})
	if acked, ok := carryReply.(*protocol.Acked); ok && len(acked.Failed) == 0 && storedIDs(t, st2)["default/carried"] {
		t.Fatal("CARRY answered while the task's record was still stored")
	}
	wantOK(t, w2.req(&protocol.Subscribe{Types: []string{"w"}, Credits: 10}))
	var again []*protocol.Fire // FIREs of "carried" at the new leader: duplicates
	for {
		f := w2.fire()
		if f.Epoch <= done.Epoch {
			t.Fatalf("the new leader FIREd %s at epoch %d, not above the old %d", f.TaskID, f.Epoch, done.Epoch)
		}
		if f.TaskID == "carried" {
			again = append(again, f)
			continue
		}
		wantOK(t, w2.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
		break
	}
	w2.drain()
	for _, f := range w2.fires {
		again = append(again, f)
	}
	if len(again) > 0 {
		t.Fatalf("the new leader FIREd carried again (%d times): its carried outcome was not accepted; CARRY answered %v %+v",
			len(again), carryReply.Type(), carryReply)
	}
	if acked, ok := carryReply.(*protocol.Acked); !ok || len(acked.Failed) != 0 {
		t.Fatalf("CARRY answered %v %+v, want ACKED with nothing refused", carryReply.Type(), carryReply)
	}
	c2 := connect(t, l2.addr)
	c2.waitState(10, "unfinished", task.Succeeded)
	if in := c2.waitState(11, "carried", task.Succeeded); in.Runs != 1 {
		t.Fatalf("carried ran %d times at the new leader, want its one carried attempt", in.Runs)
	}
	if ids := storedIDs(t, st2); len(ids) != 0 {
		t.Fatalf("records left: %v", ids)
	}
	if st := n2.Stats(); st.Fired != 1 || st.Carried != 1 {
		t.Fatalf("new leader: Fired %d, Carried %d; want 1, 1", st.Fired, st.Carried)
	}
}

// An outcome carried before its run has reached the handler (the engine had not brought
// it due yet: at a takeover, the loaded runs go through the engine one by one) waits for
// it: the handler ends the run with the outcome instead of FIREing it, and the ACKED
// comes once the record is deleted. An outcome of the same task at another attempt is
// refused when the run comes.
func TestCarriedOutcomeWaitsForItsRun(t *testing.T) {
	st, ds, c, w := startDurableWithWorker(t, 10)
	soon := durableWorkTask("soon")
	soon.Schedule = protocol.Schedule{Kind: task.KindAfter, Delay: int64(300 * time.Millisecond)}
	submit(t, c, 2, soon)
	other := durableWorkTask("other")
	other.Schedule = soon.Schedule
	submit(t, c, 3, other)
	r := w.req(&protocol.Carry{Outcomes: []protocol.Outcome{
		{RunID: 1, Epoch: 1, TaskID: "soon", Attempt: 1, Due: 1},
		{RunID: 2, Epoch: 1, TaskID: "other", Attempt: 2, Due: 1},
	}})
	acked, ok := r.(*protocol.Acked)
	if !ok || len(acked.Failed) != 1 || acked.Failed[0].RunID != 2 || acked.Failed[0].Code != protocol.CodeUnknownRun {
		t.Fatalf("CARRY answered %v %+v; want ACKED refusing run 2 (attempt 2) only", r.Type(), r)
	}
	if storedIDs(t, st)["default/soon"] {
		t.Fatal("CARRY answered while the accepted task's record was still stored")
	}
	f := w.fire()
	if f.TaskID != "other" {
		t.Fatalf("FIREd %s; want only other (soon's outcome was carried)", f.TaskID)
	}
	wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	if in := c.waitState(4, "soon", task.Succeeded); in.Runs != 1 {
		t.Fatalf("soon: %d runs, want the one carried", in.Runs)
	}
	if st := ds.srv.Stats(); st.Fired != 1 || st.Carried != 1 {
		t.Fatalf("Fired %d, Carried %d; want 1, 1", st.Fired, st.Carried)
	}
}

// An exclusive durable task whose run was in flight at the takeover is parked for its
// time to run (exclusive.go); the worker that ran it carries the outcome of that very
// run (its lock named it, the task is unchanged): the new leader ends the park, ends the
// task with the outcome at once (long before the time to run), never FIREs it again,
// and leaves neither its record nor its lock in etcd.
func TestCarriedOutcomeEndsAPark(t *testing.T) {
	n, done := startParked(t, protocol.Schedule{})
	st2, l2 := n.st2, n.fd
	w2 := carryTo(t, l2.addr, done, "w")
	wantEndedByCarry(t, connect(t, l2.addr), w2, st2, done, "the carried outcome did not end the park")
	waitNoLocks(t, st2, "after the carried outcome ended the parked task")
}

// startParked runs the exclusive durable task "excl" (time to run a minute: the park,
// which no test sits out; schedule sched, or workTask's if zero) at the first leader of
// startCarryNodes, then ends that leader's term: the follower takes over and parks the
// task. It returns the nodes and the run the first leader FIREd.
func startParked(t *testing.T, sched protocol.Schedule) (*twoNodes, *protocol.Fire) {
	t.Helper()
	n := startCarryNodes(t)
	c := connect(t, n.leader.addr)
	w := connectWorker(t, n.leader.addr, 10, "w")
	excl := durableWorkTask("excl")
	excl.Exclusive, excl.Timeout = true, int64(time.Minute)
	if sched.Kind != 0 {
		excl.Schedule = sched
	}
	submit(t, c, 2, excl)
	f := w.fire()
	waitRegistered(t, n.follower)
	deleteLeaderKey(t, n.st1.Client()) // the first leader's term ends; the follower takes over
	waitLeading(t, n.follower, "the follower was not elected")
	if in := get(t, connect(t, n.fd.addr), 2, "excl"); in.State != task.Pending {
		t.Fatalf("the task at the new leader is %v, want PENDING (parked)", in.State)
	}
	return n, f
}

// A worker's connection to the leader is cut after it ran a run but before it sent the
// ACK (a network blip; the leader lives on). It reconnects to the same leader within the
// run's time to run and carries the outcome: the leader accepts it (the run was kept
// for the worker, not failed and redelivered at the cut), the task ends with it, and it
// is never FIREd again.
func TestReconnectedWorkerCarriesToTheSameLeader(t *testing.T) {
	st, ds, c, _ := startDurableWithWorker(t, 1)
	p := newCutProxy(t, ds.addr)
	w := connectWorker(t, p.ln.Addr().String(), 1, "blip")
	tk := durableWorkTask("blipped")
	tk.Type, tk.Timeout = "blip", int64(time.Minute)
	submit(t, c, 2, tk)
	f := w.fire()
	p.cutAll() // the worker ran it; its ACK never leaves
	// The leader sees the connection close: its reader has gone when the router no
	// longer lists the worker's connection for the type.
	if !waitUntil(func() bool {
		n := 0
		ds.srv.router.subscribed(func(_ *conn, ws *workerState) {
			for _, typ := range ws.types {
				if typ == "blip" {
					n++
				}
			}
		})
		return n == 0
	}) {
		t.Fatalf("the leader never noticed the cut connection within %v", waitBound)
	}

	w2 := carryTo(t, ds.addr, f, "blip")
	wantEndedByCarry(t, c, w2, st, f, "the run was redelivered at the cut")
}

// A term with no takeover hold (the registry named no worker: the count was spent on a
// term that lasted moments, or read just after the old leader's entries expired with its
// lease) still meets a carried outcome: the run waits in the router's queue, unFIREd
// (no worker has subscribed yet), and the worker carries its outcome before it
// subscribes. The outcome ends the run (it was refused as "started" before, and the run
// FIREd again: thousands of re-runs a failover in make loadgen-cluster on a loaded box).
func TestCarriedOutcomeMeetsAWaitingRunWithoutAHold(t *testing.T) {
	st, ts := startLeader(t) // a lone node: elected with no worker registered, so no hold
	c := connect(t, ts.addr)
	submit(t, c, 2, durableWorkTask("waits"))
	if !waitUntil(func() bool { return ts.srv.Stats().Waiting == 1 }) {
		t.Fatalf("the run never waited for a worker: %+v", ts.srv.Stats())
	}
	in := get(t, c, 3, "waits")
	// The run of the previous leader's term (another epoch and run ID), at the same
	// version and attempt.
	prev := &protocol.Fire{RunID: 7, Epoch: 1, Namespace: in.Task.Namespace, TaskID: "waits", Version: in.Task.Version,
		Attempt: 1, Due: in.NextRun}
	w := carryTo(t, ts.addr, prev, "w")
	wantEndedByCarry(t, c, w, st, prev, "the carried outcome did not end its waiting run")
	if st := ts.srv.Stats(); st.Carried != 1 || st.CarryRefused != ([NumCarryRefusals]uint64{}) {
		t.Fatalf("Carried %d, refused %v; want 1, none", st.Carried, st.CarryRefused)
	}
}

// The count of workers registered at the previous leader outlives a takeover: a term
// that lasts moments (elected, then its session or key lost at once, as under load in
// make loadgen-cluster) must not leave the next takeover with nobody to wait for, and
// so no hold. A stale count costs at most one CarryGrace.
func TestRegisteredCountOutlivesATakeover(t *testing.T) {
	g := newRegistry(nil, &Options{NodeName: "n2"}, nil)
	g.registered.Store(2)
	for term := 1; term <= 2; term++ {
		if n := g.registeredBefore(); n != 2 {
			t.Fatalf("takeover %d waits for %d workers, want the 2 last read", term, n)
		}
	}
}

// A worker that connects to a node about to be elected hands in while the node still
// follows (its CARRY answered NOT_LEADER: the outcomes stay the worker's) and subscribes
// once it leads. That SUBSCRIBE is refused NOT_LEADER naming the node, so that the worker
// connects again and hands the outcomes in, instead of being FIREd the very runs they end
// (make loadgen-cluster with -workers 2 re-ran 11,000 tasks after one takeover with no
// carried outcome refused). A connection that hands in to the leader subscribes.
func TestSubscribeAfterABouncedCarryIsRefused(t *testing.T) {
	n := startCarryNodes(t)
	w := dialWorker(t, n.fd.addr, "worker")
	carry := &protocol.Carry{Outcomes: []protocol.Outcome{{RunID: 7, Epoch: 1, TaskID: "gone", Attempt: 1}}}
	if r, ok := w.req(carry).(*protocol.Error); !ok || r.Code != protocol.CodeNotLeader {
		t.Fatalf("CARRY at the follower answered %+v, want NOT_LEADER", r)
	}
	// The follower campaigns (startTwoNodes waited for its key), then the leader's term ends.
	deleteLeaderKey(t, n.st1.Client())
	waitLeading(t, n.follower, "the follower was not elected")
	r := w.req(&protocol.Subscribe{Types: []string{"w"}, Credits: 10})
	if perr, ok := r.(*protocol.Error); !ok || perr.Code != protocol.CodeNotLeader || perr.Leader != n.fd.addr {
		t.Fatalf("SUBSCRIBE after a CARRY answered NOT_LEADER, the node leading now: %v %+v, want NOT_LEADER naming %s", r.Type(), r, n.fd.addr)
	}
	again := dialWorker(t, n.fd.addr, "worker")
	if r := again.req(carry); r.Type() != protocol.TypeAcked {
		t.Fatalf("CARRY at the new leader answered %v %+v, want ACKED", r.Type(), r)
	}
	wantOK(t, again.req(&protocol.Subscribe{Types: []string{"w"}, Credits: 10}))
}

// WELCOME tells a worker whether the node follows, and names the leader, so that the
// worker hands its carried outcomes to the leader only (PROTOCOL.md, WELCOME): a follower
// answers a CARRY NOT_LEADER only after the worker has streamed all of it.
func TestWelcomeSaysWhoLeads(t *testing.T) {
	n := startCarryNodes(t)
	var last *protocol.Welcome
	if !waitUntil(func() bool { // the follower learns the leader from its watch on the election
		c := dial(t, n.fd.addr)
		defer c.nc.Close()
		last = c.hello(helloAs(protocol.RoleWorker, "worker"))
		return last.Follower && last.Leader == n.leader.addr
	}) {
		t.Fatalf("the follower's WELCOME %+v, want follower naming the leader %s, within %v", last, n.leader.addr, waitBound)
	}
	c := dial(t, n.leader.addr)
	if w := c.hello(helloAs(protocol.RoleWorker, "worker")); w.Follower || w.Leader != "" {
		t.Fatalf("the leader's WELCOME %+v, want neither follower nor leader", w)
	}
}
