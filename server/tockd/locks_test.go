package tockd

import (
	"context"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// waitNoLocks waits until no run lock is left in etcd (lock deletes run in the
// background).
func waitNoLocks(t *testing.T, st *store.Store, why string) {
	t.Helper()
	var locks map[store.Key]bool
	var err error
	if !waitUntil(func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		locks, err = st.Locks().Held(ctx)
		return err == nil && len(locks) == 0
	}) {
		t.Fatalf("%s: run locks left in etcd after %v: %v (%v)", why, waitBound, locks, err)
	}
}

// replaceRunningExclusive starts a lone node with a client and a worker holding credits,
// submits the exclusive durable task "repl", takes its run (which holds a run lock),
// submits replacement(v1) as version 1 and ends the old run: v2 is what is left.
func replaceRunningExclusive(t *testing.T, credits uint64, replacement func(v1 protocol.Task) protocol.Task) (*store.Store, *client, *wkr) {
	t.Helper()
	st, _, c, w := startDurableWithWorker(t, credits)
	v1 := durableWorkTask("repl")
	v1.Exclusive, v1.Timeout = true, int64(time.Minute)
	submit(t, c, 2, v1)
	f1 := w.fire()
	if locks, err := st.Locks().Held(context.Background()); err != nil || !locks[store.Key{Namespace: "default", ID: "repl"}] {
		t.Fatalf("run lock while v1 runs: %v, %v", locks, err)
	}
	v2 := replacement(v1)
	v2.Version = 1
	submit(t, c, 3, v2)
	w.req(&protocol.Ack{RunID: f1.RunID, Epoch: f1.Epoch}) // the old run ends (its answer does not matter here)
	return st, c, w
}

// An exclusive durable task replaced, while its run holds a run lock, by a non-exclusive
// version leaves no lock in etcd once the old run and the new version have ended: the
// lock is deleted when the replaced version's run ends.
func TestReplacedExclusiveTaskLeavesNoLock(t *testing.T) {
	st, c, w := replaceRunningExclusive(t, 10, func(protocol.Task) protocol.Task { return durableWorkTask("repl") })
	f2 := w.fire()
	if f2.Version != 1 {
		t.Fatalf("FIRE %+v, want v2's", f2)
	}
	wantOK(t, w.req(&protocol.Ack{RunID: f2.RunID, Epoch: f2.Epoch}))
	c.waitState(4, "repl", task.Succeeded)
	waitNoLocks(t, st, "after v2 ended")
}

// A task's run lock goes with its record: an exclusive version whose run was in flight
// when an exclusive successor replaced it, and the successor cancelled before it ran,
// leaves no lock.
func TestCancelledReplacementLeavesNoLock(t *testing.T) {
	st, c, _ := replaceRunningExclusive(t, 1, func(v2 protocol.Task) protocol.Task {
		v2.Schedule = protocol.Schedule{Kind: task.KindAfter, Delay: int64(time.Hour)}
		return v2
	})
	if ts, ok := c.call(&protocol.Cancel{ID: 4, TaskRef: protocol.TaskRef{TaskID: "repl"}}).(*protocol.TaskStatus); !ok || ts.State != task.Cancelled {
		t.Fatalf("CANCEL answered %+v", ts)
	}
	if storedIDs(t, st)["default/repl"] {
		t.Fatal("record left after CANCEL")
	}
	waitNoLocks(t, st, "after v2 was cancelled")
}
