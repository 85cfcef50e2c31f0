package tockd

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// A SUBMIT_BATCH of packFrom or more one-shot durable tasks is recorded as one pack
// (store's packs.go); its tasks' ends are done bits. These tests follow a pack through
// the ends a task can have and through a takeover.

// submitPacked submits n durable tasks of type "w" (two attempts each) named
// prefix0..prefix(n-1) in one SUBMIT_BATCH at c, and fails unless each is accepted and
// the batch went in one pack.
func submitPacked(t *testing.T, st *store.Store, c *client, prefix string, n int) {
	t.Helper()
	batch := make([]protocol.Task, n)
	for i := range batch {
		batch[i] = workTask(fmt.Sprint(prefix, i), 2)
		batch[i].Durability = protocol.Durable
	}
	r, ok := c.call(&protocol.SubmitBatch{ID: 2, Tasks: batch}).(*protocol.BatchResult)
	if !ok || len(r.Results) != n {
		t.Fatalf("SUBMIT_BATCH answered %+v", r)
	}
	for _, res := range r.Results {
		if res.Code != 0 || res.Durability != protocol.Durable {
			t.Fatalf("batch item %+v", res)
		}
	}
	if p := packsLeft(t, st); p != 1 {
		t.Fatalf("a batch of %d went in %d packs, want 1", n, p)
	}
}

// firesByID takes n runs from w, by task ID.
func firesByID(w *wkr, n int) map[string]*protocol.Fire {
	fires := map[string]*protocol.Fire{}
	for range n {
		f := w.fire()
		fires[f.TaskID] = f
	}
	return fires
}

// A packed batch whose tasks end every way a task can (ACK, NACK then ACK of the
// retry, CANCEL, replaced by a later version's own record), then taken over by the
// next leader, from its standby mirror or from etcd: the new leader holds exactly the
// tasks not ended (the replacement at its own version, once), and once those end too
// nothing is left in etcd.
func TestPackedBatchEndsAndTakeover(t *testing.T) {
	for _, fromMirror := range []bool{true, false} {
		t.Run(fmt.Sprintf("mirror=%v", fromMirror), func(t *testing.T) {
			const n = 20
			nodes := startTwoNodes(t, Options{})
			if !fromMirror { // the mirror stalls at the pack: the new leader reads etcd
				nodes.follower.replica.lead.standbyHook = func(ctx context.Context, c store.Change) {
					if c.Kind == store.PackPut {
						<-ctx.Done()
					}
				}
			}
			st, leader := nodes.st1, nodes.leader
			c := connect(t, leader.addr)
			w := connectWorker(t, leader.addr, n+1, "w") // a credit for the retry
			submitPacked(t, st, c, "p", n)
			fires := firesByID(w, n)
			for i := range 8 { // p0..p7 succeed
				f := fires[fmt.Sprint("p", i)]
				wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
			}
			// p8 fails once and is retried: its record is unchanged, and its retry succeeds.
			f := fires["p8"]
			wantOK(t, w.req(&protocol.Nack{RunID: f.RunID, Epoch: f.Epoch, Err: "once", Retryable: true}))
			f = w.fire()
			if f.TaskID != "p8" {
				t.Fatalf("fired %s, want p8's retry", f.TaskID)
			}
			wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
			// p9 is cancelled while it runs.
			if r, ok := c.call(&protocol.Cancel{ID: 3, TaskRef: protocol.TaskRef{TaskID: "p9"}}).(*protocol.TaskStatus); !ok || r.State != task.Cancelled {
				t.Fatalf("CANCEL answered %+v", r)
			}
			// p10 is replaced by a later version, delayed so that it does not run before the
			// takeover: its record of its own replaces the pack entry.
			repl := durableTask("p10", 0)
			repl.Type, repl.Version, repl.Payload = "w", 2, []byte("v2")
			submit(t, c, 4, repl)
			want := map[string]uint64{"default/p10": 2}
			for i := 11; i < n; i++ {
				want[fmt.Sprint("default/p", i)] = 0 // version 0: as submitted
			}
			if !waitUntil(func() bool { return len(storedVersions(t, st)) == len(want) }) {
				t.Fatalf("stored before the takeover: %v, want %v", storedVersions(t, st), want)
			}
			leader.stop(t) // resigns
			waitLeading(t, nodes.follower, "the follower was not elected")
			if got := storedVersions(t, st); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("stored at the takeover: %v, want %v", got, want)
			}
			for i := range n {
				id := fmt.Sprint("p", i)
				in, err := nodes.follower.Engine().Get("default", id)
				v, live := want["default/"+id]
				switch {
				case live && (err != nil || in.Task.Version != v):
					t.Errorf("%s: held %+v, %v; want version %d", id, in.Task, err, v)
				case !live && err == nil:
					t.Errorf("%s ended before the takeover, and the new leader holds it: %+v", id, in)
				}
			}
			// The new leader runs what is left, each once; then nothing is left in etcd.
			w2 := connectWorker(t, nodes.fd.addr, n, "w")
			for id, f := range firesByID(w2, len(want)) {
				if _, ok := want["default/"+id]; !ok {
					t.Fatalf("the new leader ran %s, which had ended", id)
				}
				wantOK(t, w2.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
			}
			if left, p := storedIDs(t, st), packsLeft(t, st); len(left) != 0 || p != 0 {
				t.Fatalf("after every task ended: records %v, %d packs left", left, p)
			}
		})
	}
}

// A deposed leader's done bit is refused (fenced): an ACK of a packed task after the
// term ended is answered STALE_EPOCH, and its pack entry stays for the next leader.
func TestPackDoneAfterTheTermIsFenced(t *testing.T) {
	st, ds, c, w := startDurableWithWorker(t, 20)
	submitPacked(t, st, c, "f", 20)
	f := w.fire()
	ds.srv.replica.lead.fence.Store(nil)
	e := wantError(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}), protocol.CodeStaleEpoch, "")
	if e.RunID != f.RunID {
		t.Fatalf("STALE_EPOCH names run %d, want %d", e.RunID, f.RunID)
	}
	if !storedIDs(t, st)["default/"+f.TaskID] {
		t.Fatal("the pack entry was marked done after the term ended")
	}
}

// uncertainPacks makes srv's pack writes report a timeout (ErrUncertain) after the
// write, the first `first` of them, or every one if first is 0; it returns how many
// writes it saw.
func uncertainPacks(t *testing.T, srv *Server, first int32) *atomic.Int32 {
	t.Helper()
	var seen atomic.Int32
	srv.replica.dur.afterPack = func(errs []error, err error) ([]error, error) {
		if n := seen.Add(1); first > 0 && n > first {
			return errs, err
		}
		if err != nil {
			t.Errorf("the pack write itself failed: %v", err)
		}
		err = fmt.Errorf("%w: put pack: %w", store.ErrUncertain, context.DeadlineExceeded)
		for i := range errs {
			errs[i] = err
		}
		return errs, err
	}
	return &seen
}

// startUncertainPacks is startDurableWithWorker with uncertainPacks(first) set before
// the node serves.
func startUncertainPacks(t *testing.T, first int32) (*store.Store, *Server, *client, *wkr, *atomic.Int32) {
	t.Helper()
	st := openStore(t, t.TempDir())
	srv := newServer(t, Options{Store: st, EngineOptions: []task.Option{task.WithWorkers(2)}})
	seen := uncertainPacks(t, srv, first)
	ds := serve(t, srv)
	waitLeading(t, srv, "the lone node was not elected")
	return st, srv, connect(t, ds.addr), connectWorker(t, ds.addr, 100, "w"), seen
}

// packBatch is n durable tasks of type "w" named prefix0..prefix(n-1), as submitPacked
// sends them.
func packBatch(prefix string, n int) []protocol.Task {
	batch := make([]protocol.Task, n)
	for i := range batch {
		batch[i] = workTask(fmt.Sprint(prefix, i), 2)
		batch[i].Durability = protocol.Durable
	}
	return batch
}

// A pack write whose answer is lost (it landed, and the store reports a timeout) is
// written again at once under the same ID, which finds it: the submit is answered OK,
// and there is one pack, not a second one for the client's retry (whose entries, done,
// would leave the first pack's live: run again at the next takeover, after their ACKs).
func TestUncertainPackWriteIsResolved(t *testing.T) {
	st, _, c, w, seen := startUncertainPacks(t, 1)
	const n = 20
	r, ok := c.call(&protocol.SubmitBatch{ID: 2, Tasks: packBatch("u", n)}).(*protocol.BatchResult)
	if !ok || len(r.Results) != n {
		t.Fatalf("SUBMIT_BATCH answered %+v", r)
	}
	for _, res := range r.Results {
		if res.Code != 0 {
			t.Fatalf("item %+v after a pack write that landed, its answer lost; want accepted", res)
		}
	}
	if p := packsLeft(t, st); p != 1 || seen.Load() != 2 {
		t.Fatalf("%d packs after %d writes, want 1 after 2", p, seen.Load())
	}
	for _, f := range firesByID(w, n) {
		wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	}
	if left, p := storedIDs(t, st), packsLeft(t, st); len(left) != 0 || p != 0 {
		t.Fatalf("after every ACK: records %v, %d packs", left, p)
	}
}

// A pack write still uncertain when written again is deleted: the submit is answered as
// not written (OVERLOADED, retry later), and nothing of it is left in etcd to run.
func TestUncertainPackWriteIsUndone(t *testing.T) {
	st, srv, c, _, _ := startUncertainPacks(t, 0)
	r, ok := c.call(&protocol.SubmitBatch{ID: 2, Tasks: packBatch("x", 20)}).(*protocol.BatchResult)
	if !ok || len(r.Results) != 20 {
		t.Fatalf("SUBMIT_BATCH answered %+v", r)
	}
	for _, res := range r.Results {
		if res.Code != protocol.CodeOverloaded {
			t.Fatalf("item %+v after pack writes that stayed uncertain and were deleted; want OVERLOADED", res)
		}
	}
	if ids, p := storedIDs(t, st), packsLeft(t, st); len(ids) != 0 || p != 0 {
		t.Fatalf("left in etcd: records %v, %d packs; want none", ids, p)
	}
	if n := srv.Stats().Engine.Tasks; n != 0 {
		t.Fatalf("%d tasks in the engine, want 0", n)
	}
}

// A durable workflow's tasks are records of their own, never a pack, however many of
// them have no parents: a workflow the engine refuses after its records are written
// (here a cycle) deletes them, and leaves nothing to run.
func TestRefusedWorkflowOfManyRootsLeavesNothing(t *testing.T) {
	st, ts := startLeader(t)
	c := connect(t, ts.addr)
	var ws []protocol.Task
	var roots []string
	for i := range packFrom + 4 {
		id := fmt.Sprint("root", i)
		ws, roots = append(ws, durableTask(id, time.Hour)), append(roots, id)
	}
	ws = append(ws, durableChild("x", append(roots, "y")...), durableChild("y", "x"))
	for i, r := range c.batch(2, ws...) {
		if r.Code != protocol.CodeInvalidTask || r.Field != "depends_on" {
			t.Fatalf("cycle, result %d: %+v", i, r)
		}
	}
	if ids, p := storedIDs(t, st), packsLeft(t, st); len(ids) != 0 || p != 0 {
		t.Fatalf("after the refused workflow: records %v, %d packs; want none", ids, p)
	}
}
