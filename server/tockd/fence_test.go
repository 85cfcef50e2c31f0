package tockd

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// exclusiveEvery is a durable exclusive task of type "w" due every interval, with ttr as
// its time to run.
func exclusiveEvery(id string, interval, ttr time.Duration) protocol.Task {
	w := durableTask(id, 0)
	w.Type, w.Exclusive, w.Timeout = "w", true, int64(ttr)
	w.Schedule = protocol.Schedule{Kind: task.KindEvery, Interval: int64(interval)}
	return w
}

// A leader whose term etcd ended while its session still looks alive (its election key
// is gone, as after a stall past its lease that the process did not notice) must not
// start another exclusive run: its run-lock write is refused (fenced), and that refusal
// ends its term at once: it stops dispatching and sends its workers away. The next
// leader's runs are then the only ones whose locks are written, and the two leaders'
// run IDs differ.
func TestDeposedLeaderStopsAtItsFencedRunLock(t *testing.T) {
	n := startTwoNodes(t, Options{})
	cli := n.st1.Client()
	const every, ttr = 100 * time.Millisecond, 300 * time.Millisecond
	c := connect(t, n.leader.addr)
	submit(t, c, 2, exclusiveEvery("excl", every, ttr))
	old := connectWorker(t, n.leader.addr, 10, "w")
	oldRuns := map[uint64]bool{}
	for range 2 { // the task runs at the leader
		f := old.fire()
		oldRuns[f.RunID] = true
		wantOK(t, old.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	}

	// End the leader's term in etcd behind its back (its session and keep-alives carry
	// on). The follower is elected. The watch sees every lock written from then on.
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	deleted := deleteLeaderKey(t, cli)
	locks := cli.Watch(ctx, "/tock/locks/", clientv3.WithPrefix(), clientv3.WithRev(deleted+1))

	// The deposed leader's next run lock is refused: it must step down and close its
	// worker's connection. Until it does, its worker keeps acknowledging what it gets
	// (and granting the credit back).
	deposedAt, firedBefore := time.Now(), len(oldRuns)
	closed := false
	if !waitUntil(func() bool {
		if closed {
			return !n.leader.srv.Stats().IsLeader
		}
		m, err := old.next()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Fatalf("the deposed leader neither FIREd nor closed its worker's connection within %v", waitBound)
		case err != nil:
			closed = true
		default:
			if f, ok := m.(*protocol.Fire); ok {
				oldRuns[f.RunID] = true
				// Replies not awaited; the credit back keeps FIREs coming.
				old.send(&protocol.Acks{ID: 1000 + uint64(len(oldRuns)), RunIDs: []uint64{f.RunID}, Epoch: f.Epoch, Credits: 1})
			}
		}
		return false
	}) {
		t.Fatalf("the deposed leader still leads %v after etcd ended its term (connection closed: %v; %d runs FIREd there)",
			waitBound, closed, len(oldRuns))
	}

	t.Logf("the deposed leader stepped down %v after its key went, %d FIREs later", time.Since(deposedAt), len(oldRuns)-firedBefore)
	waitLeading(t, n.follower, "the follower was not elected after the leader's key went")
	nw := connectWorker(t, n.fd.addr, 10, "w")
	var last uint64
	newRuns := map[uint64]bool{}
	for range 2 {
		f := nw.fire()
		if oldRuns[f.RunID] {
			t.Fatalf("the new leader's run ID %#x was issued by the old leader too", f.RunID)
		}
		// A lock naming the new term is the new leader's too: it parked the task, if it
		// found the old leader's lock at its takeover.
		newRuns[f.RunID], newRuns[parkMarker(f.Epoch)], last = true, true, f.RunID
		wantOK(t, nw.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	}
	// Every run lock written since the term ended is the new leader's, up to its last
	// run's (the watch delivers them in revision order).
	for {
		select {
		case wr, ok := <-locks:
			if !ok || wr.Err() != nil {
				t.Fatalf("watch of the run locks ended: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				run := binary.BigEndian.Uint64(ev.Kv.Value)
				if !newRuns[run] {
					t.Fatalf("run lock %#x written at revision %d, after the old leader's term ended, is not the new leader's (old leader's run: %v)",
						run, ev.Kv.ModRevision, oldRuns[run])
				}
				if run == last {
					return
				}
			}
		case <-ctx.Done():
			t.Fatal("the new leader's run lock was never seen")
		}
	}
}

// deposedStopBound is how soon a leader whose election key went must stop FIREing: the
// watch on its key delivers the deletion within milliseconds on loopback; the rest is
// slack for a loaded 2-core machine running -race (goroutine scheduling, the step-down's
// eviction of workers). Without the watch, the node would FIRE until its session ends,
// which with live keep-alives is never.
const deposedStopBound = 2 * time.Second

// A leader that makes no durable write (here: an ephemeral recurring task) learns its
// term ended the moment its election key is deleted, while its session and keep-alives
// carry on: it stops dispatching and sends its worker away within deposedStopBound.
func TestDeposedLeaderWithoutWritesStopsWhenItsKeyGoes(t *testing.T) {
	n := startTwoNodes(t, Options{})
	every := workTask("tick", 1)
	every.Schedule = protocol.Schedule{Kind: task.KindEvery, Interval: int64(20 * time.Millisecond)}
	c := connect(t, n.leader.addr)
	submit(t, c, 2, every)
	w := connectWorker(t, n.leader.addr, 10, "w")
	for range 2 { // it runs at the leader
		f := w.fire()
		wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	}

	deleteLeaderKey(t, n.st1.Client())
	deletedAt := time.Now()
	fired := 0
	for {
		m, err := w.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the deposed leader neither FIREd nor closed its worker's connection within %v", waitBound)
		}
		if err != nil {
			break // evicted
		}
		if f, ok := m.(*protocol.Fire); ok {
			fired++
			if since := time.Since(deletedAt); since > deposedStopBound {
				t.Fatalf("the deposed leader still FIREs %v after its election key was deleted (%d FIREs since; leading %v)",
					since, fired, n.leader.srv.Stats().IsLeader)
			}
			w.send(&protocol.Acks{ID: 1000 + uint64(fired), RunIDs: []uint64{f.RunID}, Epoch: f.Epoch, Credits: 1})
		}
	}
	if since := time.Since(deletedAt); since > deposedStopBound {
		t.Fatalf("the worker was sent away only %v after the key was deleted, want within %v", since, deposedStopBound)
	}
	t.Logf("stepped down %v after the key went, %d FIREs later", time.Since(deletedAt), fired)
	waitLeading(t, n.follower, "the follower was not elected after the leader's key went")
}

// An exclusive task whose run was in flight at a takeover waits out that run's time to
// run at the new leader, and every request finds it meanwhile: GET shows it PENDING,
// CANCEL ends it for good, and its record, progress and run lock leave etcd.
func TestParkedExclusiveTaskIsFoundAndCancelled(t *testing.T) {
	n := startTwoNodes(t, Options{})
	const ttr = 30 * time.Second // the wait at the takeover: the test never sits it out
	c := connect(t, n.leader.addr)
	submit(t, c, 2, exclusiveEvery("excl", 200*time.Millisecond, ttr))
	w := connectWorker(t, n.leader.addr, 1, "w")
	w.fire() // in flight, never ACKed, when the leader goes
	n.leader.stop(t)
	waitLeading(t, n.follower, "the follower never took over")

	fc := connect(t, n.fd.addr)
	in := get(t, fc, 2, "excl")
	if in.State != task.Pending {
		t.Fatalf("the exclusive task waiting out its last run is %v at the new leader, want PENDING", in.State)
	}
	st, ok := fc.call(&protocol.Cancel{ID: 3, TaskRef: protocol.TaskRef{TaskID: "excl"}}).(*protocol.TaskStatus)
	if !ok || st.State != task.Cancelled || st.Durability != protocol.Durable {
		t.Fatalf("CANCEL answered %+v, want the durable task CANCELLED", st)
	}
	if in := get(t, fc, 4, "excl"); in.State != task.Cancelled {
		t.Fatalf("after CANCEL the task is %v", in.State)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	var locks map[store.Key]bool
	var next map[store.Key]store.NextDue
	var lerr, nerr error
	recorded := true
	if !waitUntil(func() bool {
		locks, lerr = n.st2.Locks().Held(ctx)
		next, nerr = n.st2.Progress().At(ctx, 0)
		recorded = storedIDs(t, n.st2)["default/excl"]
		return lerr == nil && nerr == nil && len(locks) == 0 && len(next) == 0 && !recorded
	}) {
		t.Fatalf("after CANCEL: record stored %v, progress %v (%v), run locks %v (%v); want none left", recorded, next, nerr, locks, lerr)
	}
}

// deleteLeaderKey deletes the current leader's election key from the test's own etcd
// client, as etcd does when a stalled leader's lease expires, but leaves the leader's
// session (and its keep-alives) alone: only its fenced writes can tell it its term ended.
// It returns the deletion's revision.
func deleteLeaderKey(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	keys, err := cli.Get(ctx, "/tock/leader/", clientv3.WithFirstCreate()...)
	if err != nil || len(keys.Kvs) != 1 {
		t.Fatalf("the leader's election key: %v, %v", keys, err)
	}
	del, err := cli.Delete(ctx, string(keys.Kvs[0].Key))
	if err != nil || del.Deleted != 1 {
		t.Fatalf("delete the leader's election key: %v, %v", del, err)
	}
	return del.Header.Revision
}

// A durable SUBMIT refused as fenced (the node's term ended in etcd) is answered
// NOT_LEADER and ends the node's term at once: a lone node then campaigns again and leads
// at a new epoch.
func TestFencedSubmitEndsTheTerm(t *testing.T) {
	st, ds := startLeader(t)
	before := ds.srv.Stats()
	c := connect(t, ds.addr)
	deleteLeaderKey(t, st.Client())
	wantError(t, c.call(&protocol.Submit{ID: 2, Task: durableTask("late", time.Hour)}), protocol.CodeNotLeader, "")
	var now Stats
	if !waitUntil(func() bool {
		now = ds.srv.Stats()
		return now.IsLeader && now.Epoch > before.Epoch && now.LeaderChanges >= before.LeaderChanges+2
	}) {
		t.Fatalf("after a fenced submit: leading %v at epoch %d (was %d), %d leadership changes (was %d); want a new term",
			now.IsLeader, now.Epoch, before.Epoch, now.LeaderChanges, before.LeaderChanges)
	}
	submit(t, c, 3, durableTask("again", time.Hour)) // the new term writes
}
