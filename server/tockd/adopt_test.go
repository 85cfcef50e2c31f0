package tockd

import (
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// adoptTo hands f's run in as still running on w (ADOPT) and requires it taken over:
// ACKED lists it adopted, refusing nothing; it returns the run ID and epoch its ACK names.
func adoptTo(t *testing.T, w *wkr, f *protocol.Fire) (as, epoch uint64) {
	t.Helper()
	r := w.req(&protocol.Adopt{Runs: []protocol.Outcome{outcomeOf(f)}})
	acked, ok := r.(*protocol.Acked)
	if !ok || len(acked.Failed) != 0 || len(acked.Adopted) != 1 || acked.Adopted[0].RunID != f.RunID {
		t.Fatalf("ADOPT of %s's run %d answered %v %+v, want ACKED adopting it", f.TaskID, f.RunID, r.Type(), r)
	}
	return acked.Adopted[0].As, acked.Adopted[0].Epoch
}

// wantRefused requires r, the answer to an ADOPT, to refuse exactly the runs named (with
// UNKNOWN_RUN) and adopt none.
func wantRefused(t *testing.T, r protocol.Message, runs ...uint64) {
	t.Helper()
	acked, ok := r.(*protocol.Acked)
	if !ok || len(acked.Adopted) != 0 || len(acked.Failed) != len(runs) {
		t.Fatalf("ADOPT answered %v %+v, want ACKED refusing runs %v and adopting none", r.Type(), r, runs)
	}
	for i, f := range acked.Failed {
		if f.RunID != runs[i] || f.Code != protocol.CodeUnknownRun {
			t.Fatalf("ADOPT refused %+v, want runs %v refused UNKNOWN_RUN", acked.Failed, runs)
		}
	}
}

// The leader's term ends while a worker still runs a durable run (its handler has not
// returned). The worker hands the run in at the next leader (ADOPT) before it
// subscribes: the leader takes it over under a run ID and epoch of its own, never FIREs
// it again, and the worker's ACK naming them ends the task (OK once its record is gone).
// The run the worker did not hand in is FIREd by the new leader as before.
func TestNextLeaderAdoptsARunStillRunning(t *testing.T) {
	n := startCarryNodes(t)
	st1, st2, l1, n2, l2 := n.st1, n.st2, n.leader, n.follower, n.fd

	c := connect(t, l1.addr)
	w := connectWorker(t, l1.addr, 10, "w")
	submit(t, c, 2, durableWorkTask("running"))
	submit(t, c, 3, durableWorkTask("dropped"))
	fires := map[string]*protocol.Fire{}
	for range 2 {
		f := w.fire()
		fires[f.TaskID] = f
	}
	running := fires["running"]
	if running == nil || fires["dropped"] == nil {
		t.Fatalf("FIREs at the first leader: %+v", fires)
	}
	waitRegistered(t, n2)
	deleteLeaderKey(t, st1.Client())
	waitLeading(t, n2, "the follower was not elected")

	w2 := dialWorker(t, l2.addr, "worker")
	as, epoch := adoptTo(t, w2, running)
	if epoch <= running.Epoch {
		t.Fatalf("adopted at epoch %d, not above the old leader's %d", epoch, running.Epoch)
	}
	wantOK(t, w2.req(&protocol.Subscribe{Types: []string{"w"}, Credits: 10}))
	f := w2.fire() // "dropped": the only run the new leader FIREs
	if f.TaskID != "dropped" {
		t.Fatalf("the new leader FIREd %s (run %d): the run handed in was FIREd again", f.TaskID, f.RunID)
	}
	wantOK(t, w2.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	wantOK(t, w2.req(&protocol.Ack{RunID: as, Epoch: epoch}))
	c2 := connect(t, l2.addr)
	if in := c2.waitState(10, "running", task.Succeeded); in.Runs != 1 {
		t.Fatalf("running ran %d times at the new leader, want its one adopted attempt", in.Runs)
	}
	c2.waitState(11, "dropped", task.Succeeded)
	if w2.drain(); len(w2.fires) > 0 {
		t.Fatalf("FIRE %+v after the adopted run's ACK", w2.fires[0])
	}
	if ids := storedIDs(t, st2); len(ids) != 0 {
		t.Fatalf("records left: %v", ids)
	}
	if st := n2.Stats(); st.Fired != 1 || st.Adopted != 1 {
		t.Fatalf("new leader: Fired %d, Adopted %d; want 1, 1", st.Fired, st.Adopted)
	}
}

// A run handed in that the leader does not hold as named is refused (UNKNOWN_RUN, and
// counted): a task it does not hold, and one at another attempt (whose run is then FIREd
// as usual). A run named twice in one ADOPT is taken over once at most.
func TestAdoptRefusesARunNotHeld(t *testing.T) {
	_, ds := startLeader(t)
	c := connect(t, ds.addr)
	tk := durableWorkTask("held")
	tk.Type = "a"
	submit(t, c, 2, tk)
	if !waitUntil(func() bool { return ds.srv.Stats().Waiting == 1 }) {
		t.Fatalf("the run never waited for a worker: %+v", ds.srv.Stats())
	}
	in := get(t, c, 3, "held")
	w := dialWorker(t, ds.addr, "worker")
	r := w.req(&protocol.Adopt{Runs: []protocol.Outcome{
		{RunID: 7, Epoch: 1, TaskID: "none", Attempt: 1, Due: 1},
		{RunID: 8, Epoch: 1, TaskID: "held", Version: in.Task.Version, Attempt: 2, Due: in.NextRun},
	}})
	wantRefused(t, r, 7, 8)
	wantOK(t, w.req(&protocol.Subscribe{Types: []string{"a"}, Credits: 10}))
	f := w.fire()
	if f.TaskID != "held" || f.Attempt != 1 {
		t.Fatalf("FIREd %+v, want held's attempt 1 (the ADOPT named attempt 2)", f)
	}
	wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	st := ds.srv.Stats()
	if st.Adopted != 0 || st.CarryRefused[CarryNotHeld] != 1 || st.CarryRefused[CarryChanged] != 1 {
		t.Fatalf("Adopted %d, refused %v; want 0, one not_held and one changed", st.Adopted, st.CarryRefused)
	}
	// Named twice: the second is refused, whatever became of the first.
	w2 := dialWorker(t, ds.addr, "worker")
	twice := protocol.Outcome{RunID: 9, Epoch: 1, TaskID: "none", Attempt: 1, Due: 1}
	wantRefused(t, w2.req(&protocol.Adopt{Runs: []protocol.Outcome{twice, twice}}), 9, 9)
}

// A run handed in before the engine has brought it due (at a takeover the loaded runs
// come due one by one) waits for it: the handler takes the run over instead of FIREing
// it, and the ADOPT is answered then; the worker's NACK of it ends the attempt as any
// NACK does (the retry is FIREd).
func TestAdoptWaitsForItsRun(t *testing.T) {
	_, ds, c, w := startDurableWithWorker(t, 10)
	soon := durableWorkTask("soon")
	soon.Schedule = protocol.Schedule{Kind: task.KindAfter, Delay: int64(300 * time.Millisecond)}
	soon.Retry = protocol.Retry{MaxAttempts: 2, InitialBackoff: int64(time.Millisecond), MaxBackoff: int64(time.Millisecond), Multiplier: 1}
	submit(t, c, 2, soon)
	w2 := dialWorker(t, ds.addr, "worker")
	prev := &protocol.Fire{RunID: 1, Epoch: 1, TaskID: "soon", Attempt: 1, Due: 1}
	sent := time.Now()
	as, epoch := adoptTo(t, w2, prev)
	if waited := time.Since(sent); waited < 200*time.Millisecond {
		// The run comes due 300 ms after the submit: an answer well before is no wait.
		t.Fatalf("ADOPT answered after %v, before its run came due", waited)
	}
	wantOK(t, w2.req(&protocol.Nack{RunID: as, Epoch: epoch, Err: "failed at last", Retryable: true}))
	f := w.fire()
	if f.TaskID != "soon" || f.Attempt != 2 {
		t.Fatalf("FIREd %+v, want soon's attempt 2 (the adopted attempt 1 was NACKed)", f)
	}
	wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	if in := c.waitState(3, "soon", task.Succeeded); in.Runs != 2 {
		t.Fatalf("soon: %d runs, want 2 (the adopted one and its retry)", in.Runs)
	}
	if st := ds.srv.Stats(); st.Fired != 1 || st.Adopted != 1 {
		t.Fatalf("Fired %d, Adopted %d; want 1, 1", st.Fired, st.Adopted)
	}
}

// A run taken over is in flight on the connection that handed it in: when that
// connection closes too, it is an orphan as any run in flight. Handed in again within
// ReconnectGrace (the same run ID and epoch), it is taken over once more; lost a third
// time and not handed in, it fails at the grace's end and is FIREd again, to the next
// worker.
func TestAdoptedRunWhoseWorkerDropsAgain(t *testing.T) {
	st, ds := startLeader(t) // a lone node: no takeover hold
	c := connect(t, ds.addr)
	tk := durableWorkTask("waits")
	tk.Retry.MaxAttempts = 2
	submit(t, c, 2, tk)
	if !waitUntil(func() bool { return ds.srv.Stats().Waiting == 1 }) {
		t.Fatalf("the run never waited for a worker: %+v", ds.srv.Stats())
	}
	in := get(t, c, 3, "waits")
	prev := &protocol.Fire{RunID: 7, Epoch: 1, Namespace: in.Task.Namespace, TaskID: "waits", Version: in.Task.Version,
		Attempt: 1, Due: in.NextRun}
	w := dialWorker(t, ds.addr, "worker")
	as, epoch := adoptTo(t, w, prev)
	waitRemoved := func(what string) {
		t.Helper()
		if !waitUntil(func() bool { // the reader has gone when the router holds no state for it
			ds.srv.router.mu.Lock()
			defer ds.srv.router.mu.Unlock()
			return len(ds.srv.router.table.workers) == 0
		}) {
			t.Fatalf("the leader never dropped %s within %v", what, waitBound)
		}
	}
	w.nc.Close()
	waitRemoved("the first connection")
	again := &protocol.Fire{RunID: as, Epoch: epoch, Namespace: prev.Namespace, TaskID: "waits", Version: prev.Version,
		Attempt: 1, Due: prev.Due}
	w2 := dialWorker(t, ds.addr, "worker")
	if as2, epoch2 := adoptTo(t, w2, again); as2 != as || epoch2 != epoch {
		t.Fatalf("the orphan was adopted as run %d epoch %d, want its own %d, %d", as2, epoch2, as, epoch)
	}
	if ds.srv.Stats().Redelivered != 0 {
		t.Fatal("the adopted run was failed at its connection's loss, not kept as an orphan")
	}
	w2.nc.Close()
	waitRemoved("the second connection")
	w3 := connectWorker(t, ds.addr, 10, "w")
	f := w3.fire() // after ReconnectGrace: the orphan failed, its retry FIREd
	if f.TaskID != "waits" || f.Attempt != 2 {
		t.Fatalf("FIREd %+v, want waits' attempt 2", f)
	}
	wantOK(t, w3.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	c.waitState(4, "waits", task.Succeeded)
	if ids := storedIDs(t, st); len(ids) != 0 {
		t.Fatalf("records left: %v", ids)
	}
	if s := ds.srv.Stats(); s.Adopted != 2 || s.Redelivered != 1 {
		t.Fatalf("Adopted %d, Redelivered %d; want 2, 1", s.Adopted, s.Redelivered)
	}
}

// adoptParked is startParked (with sched), then a worker at the new leader that hands
// the parked task's run in, adopted, and subscribes: the task is RUNNING, the run taken
// over. It returns the nodes, a client of the new leader, the worker, and the run ID and
// epoch the adopted run's ACK names.
func adoptParked(t *testing.T, sched protocol.Schedule) (*twoNodes, *client, *wkr, uint64, uint64) {
	t.Helper()
	n, running := startParked(t, sched)
	c2 := connect(t, n.fd.addr)
	w2 := dialWorker(t, n.fd.addr, "worker")
	as, epoch := adoptTo(t, w2, running)
	wantOK(t, w2.req(&protocol.Subscribe{Types: []string{"w"}, Credits: 10}))
	if in := get(t, c2, 3, "excl"); in.State != task.Running {
		t.Fatalf("the task after the ADOPT is %v, want RUNNING (the run taken over)", in.State)
	}
	return n, c2, w2, as, epoch
}

// An exclusive durable task whose run was in flight at the takeover is parked for its
// time to run (exclusive.go); the worker still running that very run hands it in: the
// park ends at once, the run taken over is the lock's holder (no second run is FIREd,
// so none overlaps it), and its ACK ends the task, its record and lock deleted.
func TestAdoptEndsAPark(t *testing.T) {
	n, c2, w2, as, epoch := adoptParked(t, protocol.Schedule{})
	st2, n2 := n.st2, n.follower
	wantOK(t, w2.req(&protocol.Ack{RunID: as, Epoch: epoch}))
	if in := c2.waitState(4, "excl", task.Succeeded); in.Runs != 1 {
		t.Fatalf("excl ran %d times at the new leader, want the one adopted", in.Runs)
	}
	if w2.drain(); len(w2.fires) > 0 {
		t.Fatalf("FIRE %+v: the parked task ran a second run", w2.fires[0])
	}
	if ids := storedIDs(t, st2); len(ids) != 0 {
		t.Fatalf("records left: %v", ids)
	}
	waitNoLocks(t, st2, "after the adopted run's ACK")
	if st := n2.Stats(); st.Fired != 0 || st.Adopted != 1 {
		t.Fatalf("new leader: Fired %d, Adopted %d; want 0, 1", st.Fired, st.Adopted)
	}
}

// A recurring exclusive task parked at the takeover, whose run the worker hands in still
// running: the run the park held back is that run's continuation, taken over, not FIREd
// beside it, and its ACK moves the schedule on to the next occurrence, FIREd as usual.
// (Across processes, TestExclusiveNeverOverlaps met a held-back run at another due time
// than the FIRE's: the ADOPT was refused as "changed" after it had ended the park, and
// the next run was FIREd beside the one still running. Here the due times agree; the
// rule that takes over the parked run whatever its occurrence is checked there.)
func TestAdoptEndsTheParkOfARecurringTask(t *testing.T) {
	n, _, w2, as, epoch := adoptParked(t, protocol.Schedule{Kind: task.KindEvery, Interval: int64(200 * time.Millisecond)})
	n2 := n.follower
	if w2.drain(); len(w2.fires) > 0 {
		t.Fatalf("FIRE %+v: the parked task ran a second run beside the one handed in", w2.fires[0])
	}
	wantOK(t, w2.req(&protocol.Ack{RunID: as, Epoch: epoch}))
	next := w2.fire()
	if next.TaskID != "excl" || next.RunID == as || next.Epoch != epoch {
		t.Fatalf("after the adopted run's ACK: FIRE %+v, want excl's next occurrence at epoch %d", next, epoch)
	}
	if st := n2.Stats(); st.Fired != 1 || st.Adopted != 1 {
		t.Fatalf("new leader: Fired %d, Adopted %d; want 1 (the next occurrence), 1", st.Fired, st.Adopted)
	}
}
