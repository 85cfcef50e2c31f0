package tockd

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// A node that loses its leadership and later wins it again: what its earlier term left
// behind (queued deletes, finished copies in the engine, waits for a delete) must not
// act in the later term.

// holdDeletes makes d's deleter stop before each batch's delete: the batch is sent on
// the channel returned, and the deleter goes on once release is called (then it holds
// nothing more). The test's end releases it, before the server stops.
func holdDeletes(t *testing.T, d *durability) (held <-chan []store.Versioned, release func()) {
	t.Helper()
	batches := make(chan []store.Versioned, 16)
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	d.mu.Lock()
	d.beforeDelete = func(keys []store.Versioned) {
		select {
		case <-released:
			return
		default:
		}
		batches <- keys
		<-released
	}
	d.mu.Unlock()
	t.Cleanup(release) // registered after the server's stop: runs before it
	return batches, release
}

// heldBatch waits for the deleter to hold a batch naming id.
func heldBatch(t *testing.T, held <-chan []store.Versioned, id string) {
	t.Helper()
	select {
	case keys := <-held:
		for _, k := range keys {
			if k.ID == id {
				return
			}
		}
		t.Fatalf("the deleter holds %v, want %s among them", keys, id)
	case <-time.After(waitBound):
		t.Fatalf("no delete of %s reached the deleter within %v", id, waitBound)
	}
}

// ackedWithDeleteHeld starts a lone leader with a worker of type "w", runs the durable
// task x there and ACKs its FIRE (f; the answer, which waits for the delete, is not
// read), and holds the deleter on x's delete until release.
func ackedWithDeleteHeld(t *testing.T) (st *store.Store, ds *testServer, f *protocol.Fire, release func()) {
	t.Helper()
	st, ds, c, w := startDurableWithWorker(t, 1)
	held, release := holdDeletes(t, ds.srv.replica.dur)
	submit(t, c, 2, durableWorkTask("x"))
	f = w.fire()
	w.send(&protocol.Ack{ID: 100, RunID: f.RunID, Epoch: f.Epoch})
	heldBatch(t, held, "x")
	return st, ds, f, release
}

// wantEndRefused requires the wait for x's end (answered) to get ErrFenced, which
// answers its ACK STALE_EPOCH, not OK, within waitBound, and x's record to be stored
// still; what names the end in a failure.
func wantEndRefused(t *testing.T, st *store.Store, answered <-chan error, what string) {
	t.Helper()
	select {
	case err := <-answered:
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("%s is answered %v: it confirms an end its term did not record; want ErrFenced (STALE_EPOCH)", what, err)
		}
	case <-time.After(waitBound):
		t.Fatalf("%s is not answered within %v", what, waitBound)
	}
	if !storedIDs(t, st)["default/x"] {
		t.Fatalf("%s: x's record was deleted after its term ended", what)
	}
}

// reelect ends the lone node's term in etcd (its election key goes, as a Resign does)
// and waits until it leads again, in a later term.
func reelect(t *testing.T, st *store.Store, ds *testServer) {
	t.Helper()
	before := ds.srv.Stats()
	deleteLeaderKey(t, st.Client())
	var now Stats
	if !waitUntil(func() bool {
		now = ds.srv.Stats()
		return now.IsLeader && now.Epoch > before.Epoch
	}) {
		t.Fatalf("not leading again within %v: leading %v at epoch %d (was %d)", waitBound, now.IsLeader, now.Epoch, before.Epoch)
	}
}

// A delete queued in one term (for an ACK accepted in it) and held by the deleter until
// the same node leads again is refused (ErrFenced), not run under the later term's
// fence: it must not confirm the earlier term's ACK, nor delete the record the later
// term has loaded.
func TestHeldDeleteOfAnEndedTermIsRefusedAtReelection(t *testing.T) {
	st, ds, _, release := ackedWithDeleteHeld(t)
	d := ds.srv.replica.dur
	// The wait of an end accepted in this term, as the ACK's own (whose connection the
	// step-down closes, answer unread).
	ended := make(chan error, 1)
	if !d.afterDelete(taskKey{"default", "x"}, false, endFunc(func(err error) { ended <- err }), 0) {
		t.Fatal("no delete of x in flight while the deleter holds it")
	}

	reelect(t, st, ds)
	release()
	wantEndRefused(t, st, ended, "the held delete of an ended term, released once the node led again")
}

// A task whose ACK was accepted in one term but whose delete was not confirmed (held,
// then refused: the term ended) leaves its record in etcd and a finished copy in the
// engine. When the same node leads again, the record wins over the copy: the task is
// loaded and runs again (its earlier ACK was never confirmed, so running it again is
// the at-least-once the worker was told of), and its new run's ACK deletes the record.
// It must never sit stranded, its record in etcd and no task to end it.
func TestFinishedCopyGivesWayToItsRecordAtReelection(t *testing.T) {
	st, ds, f, release := ackedWithDeleteHeld(t)
	reelect(t, st, ds)
	release()

	var in task.Info
	var gerr error
	if !waitUntil(func() bool {
		in, gerr = ds.engine.Get("default", "x")
		return gerr == nil && !in.State.Terminal() && ds.srv.requests.durabilityOf(in) == protocol.Durable
	}) {
		t.Fatalf("stranded: x's record stored %v, and the engine holds %v (%v), durable %v; want it loaded and due again",
			storedIDs(t, st)["default/x"], in.State, gerr, ds.srv.requests.durabilityOf(in) == protocol.Durable)
	}
	nw := connectWorker(t, ds.addr, 1, "w")
	again := nw.fire()
	if again.TaskID != "x" || again.Epoch <= f.Epoch || again.Durability != protocol.Durable {
		t.Fatalf("the new term FIREd %+v, want x again, durable, at an epoch after %d", again, f.Epoch)
	}
	wantOK(t, nw.req(&protocol.Ack{RunID: again.RunID, Epoch: again.Epoch}))
	if storedIDs(t, st)["default/x"] {
		t.Fatal("the ACK of the new term's run was answered OK while x's record was still stored")
	}
}

// An end whose delete is decided, and refused, before the request that ended the task
// waits for it (the deleter ran between the engine's Complete and the ACK's
// afterDelete: a reader descheduled on a loaded machine) is not answered OK: the ACK
// learns the refusal, and the record stays for the next leader. (TestDurableAcksBatch
// failed so, now and then, under load.)
func TestEndRefusedBeforeItsWaitIsNotConfirmed(t *testing.T) {
	st, ds, c, w := startDurableWithWorker(t, 1)
	d := ds.srv.replica.dur
	submit(t, c, 2, durableWorkTask("x"))
	f := w.fire()
	decided := func(k taskKey) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		_, held := d.tasks[k]
		_, queued := d.queued[k]
		return !held && !queued && !d.deleting[k] // ended, and its delete tried
	}
	wait := func(k taskKey) {
		if !waitUntil(func() bool { return decided(k) }) {
			t.Errorf("the delete of %v was not decided within %v", k, waitBound)
		}
	}
	d.beforeWait.Store(&wait)
	ds.srv.replica.lead.fence.Store(nil) // the term ends: the delete is refused
	r := w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch})
	d.beforeWait.Store(nil)
	wantError(t, r, protocol.CodeStaleEpoch, "")
	if !storedIDs(t, st)["default/x"] {
		t.Fatal("x's record was deleted after the term ended")
	}
}

// An ACK that the node took while it led, and whose engine call comes once a step-down
// has dropped the durable entries but not yet the task from the engine (the run ends
// there as if ephemeral: no delete is queued), is not answered OK: the record stays,
// the next term (this node's, in TestReelectionChurn, which found this) runs the task
// again, so its ACK must say the run may be delivered again.
func TestAckInAStepDownIsNotConfirmed(t *testing.T) {
	st, ds, c, w := startDurableWithWorker(t, 1)
	submit(t, c, 2, durableWorkTask("x"))
	f := w.fire()
	k := taskKey{"default", "x"}
	// The step-down, up to where the ACK comes: the term's fence cleared, the durable
	// entries dropped, the engine's task not yet.
	d := ds.srv.replica.dur
	ds.srv.replica.lead.fence.Store(nil)
	d.mu.Lock()
	delete(d.tasks, k)
	d.mu.Unlock()
	answered := make(chan error, 1)
	refusal, pending := ds.srv.runs.endRun(f.RunID, k, true, nil, endFunc(func(err error) { answered <- err }))
	if refusal != nil {
		t.Fatalf("the ACK was refused %v, want it taken and its answer to wait", refusal)
	}
	if !pending {
		t.Fatal("the ACK would be answered OK at once: the durable task's end is not recorded, and the next term runs it again")
	}
	wantEndRefused(t, st, answered, "the ACK taken in the step-down")
}

// The wait of an ACK taken just before a step-down, for the end of a task the engine had
// not applied yet (an ACK before its handler returned), is answered at the step-down,
// which drops the task so that the end never comes: the run may be delivered again.
func TestWaitForADroppedTaskIsAnsweredAtTheStepDown(t *testing.T) {
	_, ds := startLeader(t)
	submit(t, connect(t, ds.addr), 2, durableTask("x", time.Hour))
	answered := make(chan error, 1)
	if !ds.srv.replica.dur.afterDelete(taskKey{"default", "x"}, true, endFunc(func(err error) { answered <- err }), 0) {
		t.Fatal("no wait for the imminent end of a held durable task")
	}
	_, epoch := ds.srv.leadership()
	ds.srv.replica.lead.stepDown(epoch)
	select {
	case err := <-answered:
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("the wait is answered %v, want ErrFenced (STALE_EPOCH)", err)
		}
	default:
		t.Fatal("the step-down dropped the task, and its end's wait is still unanswered")
	}
}

// Re-election churn: the shape of the history checker (server/internal/clustertest/
// history) on one in-process node, whose every fault is a re-election of itself.
const (
	churnTasks   = 200 // durable one-shot tasks run through the churn
	churnCredits = 20  // the worker's credits: how many runs are in flight at once
	churnEvery   = 20  // ACKs sent between two faults
	churnFaults  = 8   // re-elections of the node
)

// TestReelectionChurn ends the lone node's term in etcd (its election key deleted, as a
// Resign does) right after a churnEvery-th ACK its worker sends (once a term), so that ACKs,
// their deletes and the answers to them are in flight at each step-down, and the same
// node is elected again each time. The worker reconnects each time its connection is
// closed (a new connection only after the old one's last byte, so what it reads is in
// the order the node sent it). The history must show: no FIRE of a task after an ACK
// of it was answered OK, and, once the faults are done, every task run and no record
// left in etcd (none stranded).
func TestReelectionChurn(t *testing.T) {
	st, ds := startLeader(t)
	c := connect(t, ds.addr)
	batch := make([]protocol.Task, churnTasks)
	for i := range batch {
		batch[i] = durableWorkTask(fmt.Sprint("c", i))
		batch[i].Retry.MaxAttempts = 100 // a run failed by a step-down is retried, never dead
	}
	res := c.call(&protocol.SubmitBatch{ID: 2, Tasks: batch}).(*protocol.BatchResult).Results
	for i, r := range res {
		if r.Code != 0 {
			t.Fatalf("submit of %s: %+v", batch[i].ID, r)
		}
	}

	confirmed := map[string]bool{} // tasks whose ACK was answered OK
	ran := map[string]bool{}       // tasks FIREd at least once
	fires, acks, faults, conns := 0, 0, 0, 0
	progressed := time.Now() // the last FIRE or ACK answer: heartbeats are no progress
	// settled: every task ran, the faults are done and no record is left: an ACK whose
	// answer a step-down cut off (its record deleted all the same) is not confirmed,
	// and its task rightly never runs again.
	settled := func() bool {
		return len(ran) == churnTasks && faults == churnFaults && len(storedIDs(t, st)) == 0
	}
	for done := false; !done; {
		w := subscribeWhenLeading(t, ds, churnCredits)
		conns++
		asked := map[uint64]string{} // ACKS request ID: the task acknowledged
		faulted := false             // this connection's term was ended: its close comes
		for !done {
			if time.Since(progressed) > waitBound {
				left := storedIDs(t, st)
				t.Fatalf("stranded: no FIRE nor ACK answer for %v, %d records left in etcd (%d of %d tasks ran, %d confirmed; %d FIREs, %d re-elections)",
					waitBound, len(left), len(ran), churnTasks, len(confirmed), fires, faults)
			}
			var m protocol.Message
			var err error
			if len(w.fires) > 0 { // read while SUBSCRIBE's answer was awaited
				m, w.fires = w.fires[0], w.fires[1:]
			} else if m, err = w.NextAny(); err != nil {
				break // closed by a step-down (or silent past waitBound: the check above)
			}
			switch m := m.(type) {
			case *protocol.Fire:
				fires++
				progressed, ran[m.TaskID] = time.Now(), true
				if confirmed[m.TaskID] {
					t.Fatalf("FIRE of %s (run %#x, epoch %d) after an ACK of it was answered OK", m.TaskID, m.RunID, m.Epoch)
				}
				acks++
				id := uint64(1000 + acks)
				asked[id] = m.TaskID
				sendIgnoringErrors(w, &protocol.Acks{ID: id, RunIDs: []uint64{m.RunID}, Epoch: m.Epoch, Credits: 1})
				if acks%churnEvery == 0 && faults < churnFaults && !faulted {
					faults, faulted = faults+1, true
					deleteLeaderKey(t, st.Client())
				}
			case *protocol.Acked:
				progressed = time.Now()
				if len(m.Failed) == 0 && asked[m.ID] != "" {
					confirmed[asked[m.ID]] = true
				}
				delete(asked, m.ID)
			case *protocol.Pong: // a heartbeat: the node is idle
				done = settled()
			}
		}
		w.nc.Close()
	}
	t.Logf("%d tasks over %d re-elections of the node: %d confirmed (the rest's answers cut off by a step-down), %d FIREs, %d ACKs, %d worker connections",
		churnTasks, faults, len(confirmed), fires, acks, conns)
}

// subscribeWhenLeading connects a worker of type "w" with credits to ds once it leads,
// trying again while it answers SUBSCRIBE with NOT_LEADER or closes (a term that ended
// on its own, on a loaded machine).
func subscribeWhenLeading(t *testing.T, ds *testServer, credits uint64) *wkr {
	t.Helper()
	var w *wkr
	if !waitUntil(func() bool {
		if !ds.srv.Stats().IsLeader {
			return false
		}
		w = dialWorker(t, ds.addr, "churn")
		sendIgnoringErrors(w, &protocol.Subscribe{ID: 2, Types: []string{"w"}, Credits: credits})
		for {
			m, err := w.next()
			if err != nil {
				return false
			}
			if f, ok := m.(*protocol.Fire); ok {
				w.fires = append(w.fires, f)
				continue
			}
			if m.Type() == protocol.TypeOK {
				return true
			}
			w.nc.Close()
			return false
		}
	}) {
		t.Fatalf("no worker subscribed to the node within %v", waitBound)
	}
	return w
}

// sendIgnoringErrors writes m on w's socket and ignores a failed write: the node may
// have closed the connection at a step-down, which the next read reports.
func sendIgnoringErrors(w *wkr, m protocol.Message) {
	b, err := protocol.AppendFrame(nil, m, protocol.MaxFrameLimit)
	if err != nil {
		w.t.Fatalf("encode %v: %v", m.Type(), err)
	}
	_ = w.nc.SetWriteDeadline(time.Now().Add(waitBound))
	_, _ = w.nc.Write(b)
}
