package tockd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// waitWaiting polls the server's waiting-run count until it is n.
func waitWaiting(t *testing.T, s *Server, n int) {
	t.Helper()
	if !waitUntil(func() bool { return s.Stats().Waiting == n }) {
		t.Fatalf("waiting runs: %d, want %d within %v", s.Stats().Waiting, n, waitBound)
	}
}

// Runs that come due with no worker wait for one (back-pressure, not failure), longer
// than their time to run: the TTR starts at the FIRE. They are fired as credits arrive.
func TestRunsWaitForACredit(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr)
	for i := range 3 {
		w := workTask(fmt.Sprint("q", i), 1)
		w.Timeout = int64(20 * time.Millisecond)
		submit(t, c, uint64(2+i), w)
	}
	waitWaiting(t, ts.srv, 3)
	// Several TTRs pass while they wait: a held run must not time out. (A sleep is the
	// point here: time has to pass; nothing is awaited.)
	time.Sleep(100 * time.Millisecond)
	w := connectWorker(t, ts.addr, 2, "w")
	got := map[string]bool{}
	for range 2 {
		f := w.fire()
		if f.Attempt != 1 || f.TTR != int64(20*time.Millisecond) {
			t.Fatalf("FIRE %+v: want attempt 1 (the wait is not an attempt) and the task's TTR", f)
		}
		got[f.TaskID] = true
		wantOK(t, w.ack(f.RunID))
	}
	waitWaiting(t, ts.srv, 1)
	wantOK(t, w.req(&protocol.Credit{Credits: 1}))
	f := w.fire()
	got[f.TaskID] = true
	wantOK(t, w.ack(f.RunID))
	waitWaiting(t, ts.srv, 0)
	for i := range 3 {
		id := fmt.Sprint("q", i)
		if !got[id] {
			t.Fatalf("%s never fired (fired: %v)", id, got)
		}
		c.waitState(20, id, task.Succeeded)
	}
	if st := ts.srv.Stats(); st.Fired != 3 || st.Acked != 3 || st.Engine.TimedOut != 0 {
		t.Fatalf("stats: fired %d acked %d timed out %d, want 3, 3, 0", st.Fired, st.Acked, st.Engine.TimedOut)
	}
}

// A paused type's due runs wait, undispatched, until RESUME; other types go on.
func TestPauseResume(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr)
	w := connectWorker(t, ts.addr, 10, "w", "other")
	wantOK(t, c.call(&protocol.Pause{ID: 2, TaskType: "w"}))
	submit(t, c, 3, workTask("paused", 1))
	waitWaiting(t, ts.srv, 1)
	other := workTask("other", 1)
	other.Type = "other"
	submit(t, c, 4, other)
	if f := w.fire(); f.TaskID != "other" {
		t.Fatalf("FIRE of %s while its type is paused", f.TaskID)
	}
	wantOK(t, c.call(&protocol.Resume{ID: 5, TaskType: "w"}))
	f := w.fire()
	if f.TaskID != "paused" {
		t.Fatalf("FIRE of %s, want the resumed task", f.TaskID)
	}
	wantOK(t, w.ack(f.RunID))
	c.waitState(6, "paused", task.Succeeded)
}

// Beyond MaxWaitingRuns a due run fails at once, retryably: its retry policy decides
// (one attempt: DEAD, with the reason).
func TestMaxWaitingRuns(t *testing.T) {
	ts := startServer(t, Options{MaxWaitingRuns: 1})
	c := connect(t, ts.addr)
	submit(t, c, 2, workTask("first", 1))
	waitWaiting(t, ts.srv, 1)
	submit(t, c, 3, workTask("second", 1))
	info := c.waitState(4, "second", task.Dead)
	if !strings.Contains(info.LastError, "MaxWaitingRuns") {
		t.Fatalf("DEAD with %q, want the MaxWaitingRuns reason", info.LastError)
	}
	if s := c.call(&protocol.Get{ID: 5, TaskRef: protocol.TaskRef{TaskID: "first"}}).(*protocol.TaskInfo).Info.State; s != task.Running {
		t.Fatalf("the waiting task is %v, want RUNNING (waiting for a worker)", s)
	}
}

// A type nobody serves cannot starve the others: it holds at most
// MaxWaitingRunsPerType waiting runs (the rest fail at once, retryably), so another
// type's runs still wait within MaxWaitingRuns, and run when its worker comes.
func TestWaitingRunsBoundedPerType(t *testing.T) {
	ts := startServer(t, Options{MaxWaitingRuns: 4, MaxWaitingRunsPerType: 2})
	c := connect(t, ts.addr)
	for i := range 5 { // a flood of a type with no worker at all
		w := workTask(fmt.Sprint("idle", i), 1)
		w.Type = "idle"
		submit(t, c, uint64(10+i), w)
	}
	// The five come due together, so which two wait is the engine's choice; three fail.
	waitWaiting(t, ts.srv, 2)
	dead := 0
	if !waitUntil(func() bool {
		dead = 0
		for i := range 5 {
			info := c.call(&protocol.Get{ID: 20, TaskRef: protocol.TaskRef{TaskID: fmt.Sprint("idle", i)}}).(*protocol.TaskInfo).Info
			if info.State != task.Dead {
				continue
			}
			if !strings.Contains(info.LastError, "MaxWaitingRunsPerType") {
				t.Fatalf("idle%d DEAD with %q, want the MaxWaitingRunsPerType reason", i, info.LastError)
			}
			dead++
		}
		return dead >= 3
	}) {
		t.Fatalf("%d of the unserved type's runs DEAD within %v, want 3 (2 waiting)", dead, waitBound)
	}
	waitWaiting(t, ts.srv, 2)
	for i := range 2 {
		submit(t, c, uint64(30+i), workTask(fmt.Sprint("served", i), 1))
	}
	waitWaiting(t, ts.srv, 4)
	for i := range 2 {
		if s := c.call(&protocol.Get{ID: 40, TaskRef: protocol.TaskRef{TaskID: fmt.Sprint("served", i)}}).(*protocol.TaskInfo).Info; s.State != task.Running {
			t.Fatalf("served%d is %v (%s), want RUNNING: waiting for its worker", i, s.State, s.LastError)
		}
	}
	w := connectWorker(t, ts.addr, 2, "w")
	for range 2 {
		wantOK(t, w.ack(w.fire().RunID))
	}
	for i := range 2 {
		c.waitState(50, fmt.Sprint("served", i), task.Succeeded)
	}
	waitWaiting(t, ts.srv, 2) // the idle type's two are still there
}

// While this node does not lead, nothing is fired and ACKs are refused STALE_EPOCH; on
// leading again, waiting runs go out with the new epoch, and an ACK must carry it.
func TestLeadershipFencesDispatch(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr)
	w := connectWorker(t, ts.addr, 10, "w")
	submit(t, c, 2, workTask("before", 1))
	old := w.fire()
	ts.srv.router.setLeading(false, 0, nil, nil) // deposed: the session is gone
	e := wantError(t, w.ack(old.RunID), protocol.CodeStaleEpoch, "")
	if e.RunID != old.RunID {
		t.Fatalf("STALE_EPOCH names run %d, want %d", e.RunID, old.RunID)
	}
	submit(t, c, 3, workTask("during", 1))
	waitWaiting(t, ts.srv, 1)
	ts.srv.router.setLeading(true, 7, nil, nil) // elected again, at a later epoch
	f := w.fire()
	if f.TaskID != "during" || f.Epoch != 7 {
		t.Fatalf("FIRE %+v, want task during at epoch 7", f)
	}
	wantError(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: 0}), protocol.CodeStaleEpoch, "")
	wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: 7}))
	c.waitState(4, "during", task.Succeeded)
	if st := ts.srv.Stats(); !st.IsLeader || st.Epoch != 7 || st.LeaderChanges != 2 {
		t.Fatalf("stats: leader %v epoch %d changes %d, want true, 7, 2", st.IsLeader, st.Epoch, st.LeaderChanges)
	}
}

// With a store the node campaigns: once elected, FIREs carry its election key's
// revision as the epoch; Shutdown resigns.
func TestElectedEpochOnFires(t *testing.T) {
	_, d := startLeader(t)
	waitLeading(t, d.srv, "the lone node never led")
	epoch := d.srv.Stats().Epoch
	if epoch == 0 {
		t.Fatal("elected with epoch 0: want the election key's revision")
	}
	c := connect(t, d.addr)
	w := connectWorker(t, d.addr, 1, "w")
	submit(t, c, 2, workTask("e", 1))
	f := w.fire()
	if f.Epoch != epoch {
		t.Fatalf("FIRE epoch %d, want %d", f.Epoch, epoch)
	}
	wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: epoch}))
	c.waitState(3, "e", task.Succeeded)
}
