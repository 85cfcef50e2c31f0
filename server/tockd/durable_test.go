package tockd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// storedVersions reads every record's version from etcd, by "ns/id".
func storedVersions(t *testing.T, st *store.Store) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	vs := map[string]uint64{}
	if _, err := st.Records().Load(ctx, func(r store.Record) error { vs[r.Namespace+"/"+r.ID] = r.Version; return nil }); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return vs
}

// storedIDs reads which tasks have a record in etcd, by "ns/id".
func storedIDs(t *testing.T, st *store.Store) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for id := range storedVersions(t, st) {
		ids[id] = true
	}
	return ids
}

// packsLeft counts the packs (and their done keys) st holds.
func packsLeft(t *testing.T, st *store.Store) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	n := 0
	if _, err := st.Records().LoadAll(ctx, func(store.Record) error { return nil },
		store.LoadHooks{Pack: func(store.PackDone) { n++ }}); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitNoRecord waits until task id (namespace default) has no record in etcd; what names
// the record in the failure.
func waitNoRecord(t *testing.T, st *store.Store, id, what string) {
	t.Helper()
	if !waitUntil(func() bool { return !storedIDs(t, st)["default/"+id] }) {
		t.Fatalf("%s is still stored after %v", what, waitBound)
	}
}

// durableTask is wireTask(id, d), durable.
func durableTask(id string, d time.Duration) protocol.Task {
	w := wireTask(id, d)
	w.Durability = protocol.Durable
	return w
}

// TestDurableTasksSurviveRestart: durable one-shot (single and batch) and Every tasks
// come back after a clean stop of tockd and etcd, the ephemeral one does not, a durable
// task due soon fires after the restart, and a durable task that succeeded has no record.
func TestDurableTasksSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	ds := startDurable(t, st, nil)
	ds.handle(t, "t", func(context.Context, *task.Run) error { return nil })
	c := connect(t, ds.addr)

	// A durable task that succeeds: its record goes.
	if r := c.call(&protocol.Submit{ID: 2, Task: durableTask("done", 0)}).(*protocol.TaskStatus); r.Durability != protocol.Durable {
		t.Fatalf("durable submit replied %+v", r)
	}
	c.waitState(3, "done", task.Succeeded)
	waitNoRecord(t, st, "done", "the record of a succeeded durable task")

	ds.handle(t, "t", func(context.Context, *task.Run) error { return errors.New("not before the restart") })
	every := durableTask("every", 0)
	every.Schedule = protocol.Schedule{Kind: task.KindEvery, Interval: int64(time.Hour)}
	for i, w := range []protocol.Task{durableTask("later", time.Hour), every, durableTask("soon", 1500*time.Millisecond), wireTask("eph", time.Hour)} {
		r, ok := c.call(&protocol.Submit{ID: uint64(10 + i), Task: w}).(*protocol.TaskStatus)
		if !ok || r.Durability != w.Durability || r.State != task.Pending {
			t.Fatalf("submit %s: %+v", w.ID, r)
		}
	}
	// "later" again, but another task at its version: EXISTS (the same task again would
	// be a retry, answered with its status).
	otherLater := durableTask("later", time.Hour)
	otherLater.Payload = []byte("another")
	res := c.call(&protocol.SubmitBatch{ID: 20, Tasks: []protocol.Task{durableTask("b1", time.Hour), durableTask("b2", time.Hour), otherLater}}).(*protocol.BatchResult).Results
	if res[0].Code != 0 || res[1].Code != 0 || res[0].Durability != protocol.Durable || res[2].Code != protocol.CodeExists {
		t.Fatalf("durable batch: %+v", res)
	}
	if ti := c.call(&protocol.Get{ID: 21, TaskRef: protocol.TaskRef{TaskID: "every"}}).(*protocol.TaskInfo); ti.Info.Task.Durability != protocol.Durable {
		t.Fatalf("GET of a durable task says %v", ti.Info.Task.Durability)
	}
	// An ephemeral submit cannot silently replace a durable task.
	eph := wireTask("later", time.Hour)
	eph.Version = 5
	wantError(t, c.call(&protocol.Submit{ID: 22, Task: eph}), protocol.CodeInvalidTask, "task.durability")

	if ti := c.call(&protocol.Get{ID: 23, TaskRef: protocol.TaskRef{TaskID: "soon"}}).(*protocol.TaskInfo); ti.Info.State != task.Pending {
		t.Fatalf("the task due soon is %v before the restart (a machine too slow for this test?)", ti.Info.State)
	}
	// Clean stop of tockd, then of etcd.
	ds.stop(t)
	if err := st.Close(); err != nil {
		t.Fatalf("store Close: %v", err)
	}
	restart := time.Now()

	st = openStore(t, dir)
	fired := make(chan time.Time, 4)
	// The handler goes in before the node leads: on a slow restart "soon" is due when the
	// load submits it, and runs at once.
	ds = startDurableRunning(t, st, func(ev task.Event) {
		if ev.Kind == task.EventStarted && ev.ID == "soon" {
			fired <- time.Now()
		}
	}, "t", func(context.Context, *task.Run) error { return nil })
	c = connect(t, ds.addr)
	for i, id := range []string{"later", "every", "b1", "b2"} {
		r := c.call(&protocol.Get{ID: uint64(30 + i), TaskRef: protocol.TaskRef{TaskID: id}})
		ti, ok := r.(*protocol.TaskInfo)
		if !ok {
			t.Fatalf("GET %s after the restart: %v %+v", id, r.Type(), r)
		}
		if ti.Info.State != task.Pending || ti.Info.Task.Durability != protocol.Durable || ti.Info.NextRun <= restart.UnixNano() {
			t.Fatalf("GET %s after the restart: %+v", id, ti.Info)
		}
	}
	wantError(t, c.call(&protocol.Get{ID: 40, TaskRef: protocol.TaskRef{TaskID: "eph"}}), protocol.CodeNotFound, "")
	wantError(t, c.call(&protocol.Get{ID: 41, TaskRef: protocol.TaskRef{TaskID: "done"}}), protocol.CodeNotFound, "")
	select {
	case at := <-fired:
		t.Logf("the durable task due soon fired %v after the restart began", at.Sub(restart))
	case <-time.After(waitBound):
		t.Fatalf("the durable task due soon did not fire within %v of the restart", waitBound)
	}
	c.waitState(42, "soon", task.Succeeded)
	waitNoRecord(t, st, "soon", "the record of the succeeded task")
	// Cancelling a durable task deletes its record too.
	if r := c.call(&protocol.Cancel{ID: 43, TaskRef: protocol.TaskRef{TaskID: "b1"}}).(*protocol.TaskStatus); r.Durability != protocol.Durable || r.State != task.Cancelled {
		t.Fatalf("cancel of a durable task: %+v", r)
	}
	waitNoRecord(t, st, "b1", "the record of the cancelled task")
	if ids := storedIDs(t, st); len(ids) != 3 || !ids["default/later"] || !ids["default/every"] || !ids["default/b2"] {
		t.Fatalf("stored after the restart: %v", ids)
	}
}

// startDurableWithWorker starts a tockd with a store on a fresh etcd, a client and a
// worker of type "w" with credits; they stop when the test ends.
func startDurableWithWorker(t *testing.T, credits uint64) (*store.Store, *testServer, *client, *wkr) {
	t.Helper()
	st, ds := startLeader(t)
	return st, ds, connect(t, ds.addr), connectWorker(t, ds.addr, credits, "w")
}

// durableWorkTask is workTask(id, 1), durable.
func durableWorkTask(id string) protocol.Task {
	tk := workTask(id, 1)
	tk.Durability = protocol.Durable
	return tk
}

// The OK to an ACK or CANCEL that ends a durable task comes only once its record is
// gone from etcd: an acknowledged end is never undone by a reload.
func TestDurableEndRepliesAfterTheRecordIsDeleted(t *testing.T) {
	st, _, c, w := startDurableWithWorker(t, 10)
	submit(t, c, 2, durableWorkTask("acked"))
	cancelled := durableTask("cancelled", time.Hour)
	submit(t, c, 3, cancelled)
	if ids := storedIDs(t, st); !ids["default/acked"] || !ids["default/cancelled"] {
		t.Fatalf("records before: %v", ids)
	}
	f := w.fire()
	if f.Durability != protocol.Durable {
		t.Fatalf("FIRE of a durable task says %v", f.Durability)
	}
	wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	if storedIDs(t, st)["default/acked"] {
		t.Fatal("ACK answered OK while the record was still stored")
	}
	if r, ok := c.call(&protocol.Cancel{ID: 4, TaskRef: protocol.TaskRef{TaskID: "cancelled"}}).(*protocol.TaskStatus); !ok || r.State != task.Cancelled {
		t.Fatalf("CANCEL answered %+v", r)
	}
	if storedIDs(t, st)["default/cancelled"] {
		t.Fatal("CANCEL answered while the record was still stored")
	}
}

// A worker that pipelines many ACKs of durable tasks gets every answer, even with a tiny
// reply queue: answers that waited for etcd queue beside it, never close the connection.
func TestManyDurableAcksOnASmallReplyQueue(t *testing.T) {
	st := openStore(t, t.TempDir())
	srv := newServer(t, Options{Store: st, MaxPendingPerConn: 2, EngineOptions: []task.Option{task.WithWorkers(2)}})
	ds := serve(t, srv)
	waitLeading(t, srv, "not elected")
	const n = 200
	c := connect(t, ds.addr)
	batch := make([]protocol.Task, n)
	for i := range batch {
		batch[i] = workTask(fmt.Sprint("d", i), 1)
		batch[i].Durability = protocol.Durable
	}
	if r, ok := c.call(&protocol.SubmitBatch{ID: 2, Tasks: batch}).(*protocol.BatchResult); !ok || len(r.Results) != n {
		t.Fatalf("SUBMIT_BATCH answered %+v", r)
	}
	w := connectWorker(t, ds.addr, n, "w")
	oks := 0
	for fired := 0; fired < n || oks < n; {
		var m protocol.Message
		var err error
		if len(w.fires) > 0 { // read while SUBSCRIBE's answer was awaited
			m, w.fires = w.fires[0], w.fires[1:]
		} else if m, err = w.next(); err != nil {
			t.Fatalf("after %d FIREs and %d OKs: %v (waiting runs %d)", fired, oks, err, srv.Stats().Waiting)
		}
		switch m := m.(type) {
		case *protocol.Fire:
			fired++
			w.send(&protocol.Ack{ID: 1000 + m.RunID, RunID: m.RunID, Epoch: m.Epoch}) // replies not awaited
		case *protocol.OK:
			oks++
		default:
			t.Fatalf("got %v %+v", m.Type(), m)
		}
	}
	if left := storedIDs(t, st); len(left) != 0 {
		t.Fatalf("%d records left after every ACK was answered", len(left))
	}
}

// Durable writes are fenced by the leadership term: once it is over (here the fence is
// dropped by hand, as stepping down does), an ACK that ends a durable task is answered
// STALE_EPOCH, not OK, and the record stays for the next leader.
func TestDeleteAfterTheTermIsFenced(t *testing.T) {
	st, ds, c, w := startDurableWithWorker(t, 1)
	submit(t, c, 2, durableWorkTask("fenced"))
	f := w.fire()
	ds.srv.replica.lead.fence.Store(nil)
	e := wantError(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}), protocol.CodeStaleEpoch, "")
	if e.RunID != f.RunID {
		t.Fatalf("STALE_EPOCH names run %d, want %d", e.RunID, f.RunID)
	}
	if !storedIDs(t, st)["default/fenced"] {
		t.Fatal("the record was deleted after the term ended")
	}
	wantError(t, c.call(&protocol.Submit{ID: 3, Task: durableTask("late", time.Hour)}), protocol.CodeNotLeader, "")
	if storedIDs(t, st)["default/late"] {
		t.Fatal("a durable submit was written after the term ended")
	}
}

// ACKS of durable tasks is answered once their records are deleted; a run whose record
// could not be deleted (the term ended: fenced) is listed as STALE_EPOCH, and its record
// stays for the next leader.
func TestDurableAcksBatch(t *testing.T) {
	st, ds, c, w := startDurableWithWorker(t, 10)
	submit(t, c, 2, durableWorkTask("d1"))
	submit(t, c, 3, durableWorkTask("d2"))
	submit(t, c, 4, workTask("e1", 1))
	fires := map[string]*protocol.Fire{}
	for range 3 {
		f := w.fire()
		fires[f.TaskID] = f
	}
	r := w.req(&protocol.Acks{RunIDs: []uint64{fires["d1"].RunID, fires["e1"].RunID}, Epoch: fires["d1"].Epoch})
	if acked, ok := r.(*protocol.Acked); !ok || len(acked.Failed) != 0 {
		t.Fatalf("ACKS answered %v %+v, want ACKED with no failures", r.Type(), r)
	}
	if storedIDs(t, st)["default/d1"] {
		t.Fatal("ACKS answered while d1's record was still stored")
	}
	ds.srv.replica.lead.fence.Store(nil)
	r = w.req(&protocol.Acks{RunIDs: []uint64{fires["d2"].RunID}, Epoch: fires["d2"].Epoch})
	acked, ok := r.(*protocol.Acked)
	if !ok || len(acked.Failed) != 1 || acked.Failed[0].RunID != fires["d2"].RunID || acked.Failed[0].Code != protocol.CodeStaleEpoch {
		t.Fatalf("ACKS after the term ended answered %v %+v, want d2's run refused as STALE_EPOCH", r.Type(), r)
	}
	if !storedIDs(t, st)["default/d2"] {
		t.Fatal("d2's record was deleted after the term ended")
	}
}
