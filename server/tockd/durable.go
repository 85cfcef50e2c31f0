package tockd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// storeOpTimeout bounds one store call made for a request (a Put, a PutBatch) or by the
// deleter (a Delete), and the Load at start.
const storeOpTimeout = 10 * time.Second

// deleteAttempts is how often the deleter tries one record's Delete before it logs the
// failure at Error and gives up on it.
const deleteAttempts = 5

type taskKey struct{ ns, id string }

// durEntry is one durable task the engine holds (or is about to).
type durEntry struct {
	version   uint64
	recurring bool // Every or Cron: only CANCELLED ends it
	exclusive bool // its runs hold a run lock in etcd (exclusive.go)
	fp        recordPrint
	// term is the leadership term the entry was claimed or loaded in (leadership.fence
	// then; nil if that term had ended already): its end's delete is fenced by it.
	term *store.Fence
	// pack is the pack entry holding its record (packs.go), or zero for a record of its
	// own: its end sets a done bit instead of deleting a key.
	pack store.PackRef
}

// queuedDelete is a record to delete: the version that ended, and the term in which it
// ended (its entry's), the only one whose fence may delete it.
type queuedDelete struct {
	version uint64
	term    *store.Fence
	pack    store.PackRef // the record is this pack entry (zero: a record of its own)
}

// endWaiter is a wait for a record's delete: to, told of the end of run runID accepted
// in term (the fence when the wait began), is answered with the outcome of a delete
// fenced by that term, or errOtherTerm.
type endWaiter struct {
	term  *store.Fence
	to    endListener
	runID uint64
}

// endListener is told whether the end of run runID (an ACK, NACK or CANCEL accepted) was
// recorded: deleteErr is nil once the task's record is deleted under the term that
// accepted the end, else why not (the run may be delivered again). ended runs on the
// deleter goroutine, or at once inside afterDelete, and must not block. An interface,
// not a func: an ACKS names its *ackBatch and each run's ID, so that waiting costs no
// allocation per run (a closure over the run ID would be one).
type endListener interface {
	ended(runID uint64, deleteErr error)
}

// endFunc is a function as an endListener, for ends that are not on the per-run path
// (a single ACK, a CANCEL) and for tests; the run ID is not passed on.
type endFunc func(deleteErr error)

func (f endFunc) ended(_ uint64, deleteErr error) { f(deleteErr) }

// errOtherTerm answers a wait whose term is not the one its record's delete was fenced
// by: the term that accepted the end is over (a later term of this node deletes the
// record, or its next leader runs the task), so the end is not confirmed.
var errOtherTerm = fmt.Errorf("%w: the term that accepted the end is over", store.ErrFenced)

// recordPrint identifies a record's content, so that a resubmit of the very task a
// durable entry holds is recognised as a retry (prepare): whole hashes the record's
// body; noAt hashes it with an "at" schedule's due time zeroed, which is all an "after"
// submit's records differ in from one attempt to the next (storedForm stamps the time).
// Both leave the trace context out: it says where a submit came from, not what the task
// is, and a retry may be sent under another span. noAt costs a second encoding, so it is
// made only where an "after" retry may compare it (holds): for a record of an "after"
// submit, and for a record loaded at a takeover (whose submit's kind is not known); it
// is 0 for an "at" submit's record, whose retries, "at" too, compare whole.
// The hashes are maphash's, seeded per process: they are compared within it only.
type recordPrint struct{ whole, noAt uint64 }

var printSeed = maphash.MakeSeed()

// printOf is the print of the record whose body is body, sw decoded; noAt says whether
// to make the noAt hash (see recordPrint).
func printOf(sw protocol.Task, body []byte, noAt bool) (recordPrint, error) {
	if sw.Traceparent != "" || sw.Tracestate != "" {
		sw.Traceparent, sw.Tracestate = "", ""
		var err error
		if body, err = encodeTask(&sw); err != nil {
			return recordPrint{}, err
		}
	}
	p := recordPrint{whole: maphash.Bytes(printSeed, body)}
	if !noAt {
		return p, nil
	}
	p.noAt = p.whole
	if sw.Schedule.Kind == task.KindAt {
		sw.Schedule.At = 0
		b, err := encodeTask(&sw)
		if err != nil {
			return recordPrint{}, err
		}
		p.noAt = maphash.Bytes(printSeed, b)
	}
	return p, nil
}

// durability is the replica's durable records: which engine tasks are durable (and at
// which version, with which record), their records' writes at a submit (submit.go) and
// reads at a takeover (durload.go), and the deletes of the records of tasks that
// finished for good, in the background (the deleter).
//
// Invariants:
//   - ∀ (k, e) ∈ tasks: the engine holds k at version e.version, or is about to (a
//     claimed submit in flight), and a record of k at e.version is in etcd, or being
//     written; a submit of k at a version ≤ e.version is refused EXISTS.
//   - A task recorded in a term enters the engine only while that term lasts (term
//     held for reading, and the fence checked), so dropDurable, holding term for
//     writing, drops it with the term's other tasks.
//   - ∀ k ∈ queue: queued[k] is the version whose record goes and the term it ended in;
//     a key is in queue at most once, and a key being deleted is in deleting; waiters[k]
//     run once k's deletion (or the giving up on it) is decided.
//   - An end is confirmed only by a delete fenced by the term that accepted it: a
//     delete runs only while its term is the server's (leadership.fence, the same
//     pointer) and under that term's fence, and a waiter gets the outcome of a delete
//     of its own term, or errOtherTerm. A node that leads again after a step-down never
//     deletes, under its new term, a record its old term's end queued: the new term
//     loaded that record, and runs the task.
//
// Locking: term, then the engine's locks, then mu (a step-down's dropDurable holds term
// while it drops tasks from the engine; the engine's event hook takes mu). mu guards the
// fields below it and is never held across a store call; cond waits on it.
type durability struct {
	st     *store.Store
	log    *slog.Logger
	engine *task.Engine // set by replica.start, before any event or request
	// The replica's parts it reaches: the term's fence and its end (fencedOut), an
	// exclusive task's run lock, a recurring task's progress, the shared writes.
	lead      *leadership
	locks     *runLocks
	progress  *progress
	committer *committer

	// term is held for reading across a durable submit's entry into the engine (with the
	// check that its term still is the server's) and for writing by dropDurable: a task
	// recorded in a term enters the engine only while that term's tasks are held, so
	// dropDurable drops it with them. Lock order: term, then the engine, then mu.
	term sync.RWMutex

	mu       sync.Mutex
	cond     *sync.Cond // signals queue growth, deletes finishing, and stop
	tasks    map[taskKey]durEntry
	queue    []taskKey                // records to delete, in event order
	queued   map[taskKey]queuedDelete // the keys in queue: the version whose record goes, and its term
	deleting map[taskKey]bool         // a Delete in flight
	// waiters run once the key's record is deleted (or given up on): replies to the
	// ACK or CANCEL that ended a durable task wait for it, so that an acknowledged end
	// is never undone by a failover reloading the record.
	waiters map[taskKey][]endWaiter
	// refused is the outcome of each key whose last delete was decided, and refused or
	// given up on: an ACK or CANCEL that ended the task asks for its delete only after
	// the engine applied the end, by which time the deleter may have tried it; the
	// answer must still be the refusal, not OK. An entry goes when its key is claimed
	// again or deleted, and all go when a later term loads (forgetRefused), so it holds
	// at most the ends of one term whose deletes were refused (a term ending, etcd
	// failing). A request that asked later still, after a whole election between its
	// engine call and its afterDelete, would be answered OK unconfirmed: not guarded.
	refused map[taskKey]error
	// packs are the packs of this term's tasks (packs.go): each one's done bitmap as
	// this node holds it, which only grows, so that every done mark written is a superset
	// of the ones before (store's invariant); dirty lists those with bits set that no
	// mark has written yet, for the deleter. A pack goes once its final mark (every
	// entry done) is written, and all go when the term's tasks are dropped.
	packs   map[string]*packState
	dirty   []string
	stopped bool
	// beforeDelete, if set (by tests, under mu), runs on the deleter goroutine before
	// each batch's delete, outside mu.
	beforeDelete func(keys []store.Versioned)
	// afterPack, if set (by tests, before Serve), replaces each pack write's outcome once
	// the write is done: a pack that landed can be made to look as if it timed out.
	afterPack func(errs []error, err error) ([]error, error)
	// beforeWait, if set (by tests), runs at the start of each afterDelete, on the
	// caller's goroutine, outside mu.
	beforeWait atomic.Pointer[func(k taskKey)]
	done       chan struct{} // closed when the deleter exits
	// ctx ends the deleter's store calls when stop's context ends first.
	ctx    context.Context
	cancel context.CancelFunc
	// packSeq numbers the packs this process writes (their IDs: the term's revision and
	// this number).
	packSeq atomic.Uint64
}

// packState is one pack of the term: its done bitmap and whether bits were set since
// the last mark taken for writing. Guarded by durability.mu.
type packState struct {
	done  store.PackDone
	term  *store.Fence // the term that wrote or loaded it: only its fence marks it
	dirty bool         // in durability.dirty
}

func newDurability(st *store.Store, log *slog.Logger) *durability {
	d := &durability{st: st, log: log, tasks: map[taskKey]durEntry{}, queued: map[taskKey]queuedDelete{},
		deleting: map[taskKey]bool{}, waiters: map[taskKey][]endWaiter{}, refused: map[taskKey]error{}, packs: map[string]*packState{},
		done: make(chan struct{})}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.cond = sync.NewCond(&d.mu)
	return d
}

// isDurable reports whether the engine's task ns/id (at version v) is a durable one.
func (d *durability) isDurable(ns, id string, v uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.tasks[taskKey{ns, id}]
	return ok && e.version == v
}

// onEvent is the engine's OnEvent hook: it runs on engine goroutines, so it only queues
// (and has an exclusive task's run lock deleted, and a recurring task's progress noted,
// in the background).
func (d *durability) onEvent(ev task.Event) {
	switch ev.Kind {
	case task.EventSucceeded, task.EventDead, task.EventCancelled, task.EventRetrying, task.EventMisfired:
	default:
		return
	}
	k := taskKey{ev.Namespace, ev.ID}
	d.mu.Lock()
	e, ok := d.tasks[k]
	if !ok || e.version != ev.Version {
		d.mu.Unlock()
		return // not durable, or replaced by a newer version
	}
	if e.exclusive && ev.Kind != task.EventMisfired {
		d.locks.unlockRun(ev)
	}
	if e.recurring && ev.Kind != task.EventCancelled {
		d.mu.Unlock()
		if ev.Kind != task.EventRetrying {
			d.progress.onArmed(ev) // an occurrence ended: its successor is armed
		}
		return
	}
	if ev.Kind == task.EventRetrying || ev.Kind == task.EventMisfired {
		d.mu.Unlock()
		return // a one-shot task's retry: it goes on
	}
	delete(d.tasks, k)
	if _, ok := d.queued[k]; !ok {
		d.queue = append(d.queue, k)
	}
	d.queued[k] = queuedDelete{e.version, e.term, e.pack} // an older version queued was replaced by this one's record
	d.cond.Broadcast()
	d.mu.Unlock()
	if e.recurring { // cancelled: its progress goes with its record
		d.progress.forget(ev.Namespace, ev.ID)
	}
}

// afterDelete arranges for to.ended(runID, …) to run once ns/id's record is deleted, if its deletion is
// queued or in flight, or if the task is a one-shot durable one still held whose end is
// imminent (ending is true: an ACK or CANCEL of it was accepted, and the engine may apply
// it a moment later). fn runs on the deleter goroutine, so it must not block; or at once,
// before afterDelete returns, with the refusal, if the delete was refused before this
// call (refused: the deleter can decide between the engine's end and this call), or
// with errOtherTerm if the term is over (the request was taken while the node led, and a
// step-down began before this call: its entry may be dropped already, the end applied as
// if ephemeral, and the record left for the next term). It reports whether fn will run
// (or has run); false means there is nothing to wait for (not durable, or its record is
// deleted), and the caller goes on at once.
func (d *durability) afterDelete(k taskKey, ending bool, to endListener, runID uint64) bool {
	if hook := d.beforeWait.Load(); hook != nil {
		(*hook)(k)
	}
	d.mu.Lock()
	_, busy := d.deleting[k]
	_, queued := d.queued[k]
	e, held := d.tasks[k]
	if !queued && !busy && !(ending && held && !e.recurring) {
		err, wasRefused := d.refused[k]
		if !wasRefused && d.lead.fence.Load() == nil {
			err, wasRefused = errOtherTerm, true
		}
		d.mu.Unlock()
		if wasRefused {
			to.ended(runID, err)
		}
		return wasRefused
	}
	// The term that accepts the end is the server's now: only a delete fenced by it
	// confirms the end to fn.
	d.waiters[k] = append(d.waiters[k], endWaiter{d.lead.fence.Load(), to, runID})
	d.mu.Unlock()
	return true
}

// run is the deleter goroutine: it deletes the queued records in batches (one etcd
// transaction per store.Options.MaxTxnOps keys: a group commit, so deletes keep up with
// acknowledgements) until stop, and then the ones still queued; after each batch it runs
// the batch's waiters. Each delete names the version that ended, so a task resubmitted
// at a later version meanwhile keeps its new record, and is fenced by the term the task
// ended in: a batch is the queue's first keys of one term.
func (d *durability) run() {
	defer close(d.done)
	d.mu.Lock()
	for {
		for len(d.queue) == 0 && len(d.dirty) == 0 && !d.stopped {
			d.cond.Wait()
		}
		if len(d.queue) == 0 && len(d.dirty) == 0 {
			d.mu.Unlock()
			return
		}
		var term *store.Fence
		if len(d.queue) > 0 {
			term = d.queued[d.queue[0]].term
		} else if ps := d.packs[d.dirty[0]]; ps != nil {
			term = ps.term
		} else { // not held (cannot be: packs and dirty are dropped together)
			d.dirty = d.dirty[1:]
			continue
		}
		n := 0
		for n < len(d.queue) && d.queued[d.queue[n]].term == term {
			n++
		}
		batch := d.queue[:n]
		d.queue = d.queue[n:]
		keys := make([]store.Versioned, 0, len(batch))
		var own []store.Versioned
		for _, k := range batch {
			q := d.queued[k]
			v := store.Versioned{Key: store.Key{Namespace: k.ns, ID: k.id}, Version: q.version}
			keys = append(keys, v)
			if q.pack.ID == "" {
				own = append(own, v)
			} else {
				d.setDone(q.pack)
			}
			delete(d.queued, k)
			d.deleting[k] = true
		}
		marks := d.takeMarks(term)
		hook := d.beforeDelete
		d.mu.Unlock()
		if hook != nil && len(keys) > 0 {
			hook(keys)
		}
		err := d.deleteRecords(term, own, marks)
		d.mu.Lock()
		if err == nil {
			d.marked(marks)
		}
		done := d.decided(term, keys, err)
		d.cond.Broadcast() // flush waits for the queue to empty
		d.mu.Unlock()
		for _, a := range done {
			a.to.ended(a.runID, a.err)
		}
		d.mu.Lock()
	}
}

// endAnswer is a waiter and the outcome it is answered with.
type endAnswer struct {
	endWaiter
	err error
}

// decided ends the deletion of keys, whose delete fenced by term had the outcome err,
// and returns the answers of their waiters: err to those of term, errOtherTerm to those
// of another, but for the waiters of a later end of the key queued meanwhile (in the
// same term as theirs), who wait for that one's delete. Requires mu.
func (d *durability) decided(term *store.Fence, keys []store.Versioned, err error) []endAnswer {
	var done []endAnswer
	for _, k := range keys {
		tk := taskKey{k.Namespace, k.ID}
		delete(d.deleting, tk)
		later, again := d.queued[tk]
		var keep []endWaiter
		for _, w := range d.waiters[tk] {
			switch {
			case again && w.term == later.term:
				keep = append(keep, w)
			case w.term == term && term != nil:
				done = append(done, endAnswer{w, err})
			default:
				done = append(done, endAnswer{w, errOtherTerm})
			}
		}
		if len(keep) > 0 {
			d.waiters[tk] = keep
		} else {
			delete(d.waiters, tk)
		}
		_, claimed := d.tasks[tk] // a later version, held: its own end decides
		switch {
		case again || claimed:
		case err != nil:
			d.refused[tk] = err
		default:
			delete(d.refused, tk)
		}
	}
	return done
}

// forgetRefused forgets the refused deletes of earlier terms (refused): a takeover's
// load calls it first, and loads again every record whose delete was refused here.
func (d *durability) forgetRefused() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.refused)
}

// setDone sets ref's done bit in its pack's bitmap, for the next mark the deleter takes.
// A pack this node does not hold (its term's packs were dropped) is left: the term is
// over, and the record is the next term's. Requires mu.
func (d *durability) setDone(ref store.PackRef) {
	ps := d.packs[ref.ID]
	if ps == nil || ref.Index >= ps.done.Len || ps.done.IsSet(ref.Index) {
		return
	}
	ps.done.Set(ref.Index)
	if !ps.dirty {
		ps.dirty = true
		d.dirty = append(d.dirty, ref.ID)
	}
}

// endPack sets ref's done bit (setDone) and wakes the deleter, which writes it: an end
// that no task's end carries (a pack entry replaced by a later version's record, one
// passed over at a load).
func (d *durability) endPack(ref store.PackRef) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setDone(ref)
	d.cond.Broadcast()
}

// takeMarks takes the dirty packs of term: a copy of each one's bitmap now, to write;
// the dirty ones of other terms stay (their own batch takes them). Requires mu.
func (d *durability) takeMarks(term *store.Fence) []store.PackDone {
	var marks []store.PackDone
	keep := d.dirty[:0]
	for _, id := range d.dirty {
		ps := d.packs[id]
		if ps == nil {
			continue
		}
		if ps.term != term {
			keep = append(keep, id)
			continue
		}
		ps.dirty = false
		marks = append(marks, store.PackDone{ID: id, Len: ps.done.Len, Done: bytes.Clone(ps.done.Done)})
	}
	clear(d.dirty[len(keep):])
	d.dirty = keep
	return marks
}

// marked forgets the packs whose final mark (every entry done) was written: nothing of
// them is left in etcd. Requires mu.
func (d *durability) marked(marks []store.PackDone) {
	for _, m := range marks {
		if ps := d.packs[m.ID]; ps != nil && m.Full() {
			delete(d.packs, m.ID)
		}
	}
}

// deleteRecords deletes keys and writes the pack marks fenced by term, the term in
// which their tasks ended, while it is this node's (leadership.fence), retrying a
// failed batch with backoff up to deleteAttempts times. It returns the failure it gave up on (logged at Error: those
// tasks come back at the next load), at once for store.ErrFenced: a node that no longer
// leads, or that leads in a later term, must not delete records the next leader (this
// node, perhaps) may already have loaded.
func (d *durability) deleteRecords(term *store.Fence, keys []store.Versioned, marks []store.PackDone) error {
	pause := 50 * time.Millisecond
	for i := 1; ; i++ {
		err := errOtherTerm
		if f := d.lead.fence.Load(); f != nil && f == term {
			ctx, cancel := context.WithTimeout(d.ctx, storeOpTimeout)
			err = nil
			if len(keys) > 0 {
				err = d.st.Records().DeleteBatchFenced(ctx, *f, keys)
			}
			if err == nil && len(marks) > 0 {
				err = d.st.Records().MarkDoneFenced(ctx, *f, marks)
			}
			cancel()
			d.lead.fencedOut(*f, err)
		}
		switch {
		case err == nil:
			d.log.Debug("tockd: durable records deleted", "count", len(keys), "packs", len(marks))
			return nil
		case errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrClosed) || i == deleteAttempts || d.ctx.Err() != nil:
			d.log.Error("tockd: durable records of finished tasks NOT deleted; they will be loaded again by the next leader",
				"count", len(keys), "packs", len(marks), "first", firstOf(keys, marks), "attempts", i, "err", err)
			return err
		}
		d.log.Warn("tockd: durable record deletes failed; retrying", "count", len(keys), "packs", len(marks), "attempt", i, "err", err)
		select {
		case <-time.After(pause):
		case <-d.ctx.Done():
		}
		pause *= 2
	}
}

// firstOf names the first of a deleter batch's records (or packs), for a log line.
func firstOf(keys []store.Versioned, marks []store.PackDone) string {
	if len(keys) > 0 {
		return keys[0].Namespace + "/" + keys[0].ID
	}
	if len(marks) > 0 {
		return "pack " + marks[0].ID
	}
	return ""
}

// pending is the number of records queued or being deleted.
func (d *durability) pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue) + len(d.deleting)
}

// flush waits until every queued delete has been tried (or ctx ends): Shutdown calls it
// before resigning, while its deletes are still within its term.
func (d *durability) flush(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	})
	defer stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	for (len(d.queue) > 0 || len(d.deleting) > 0 || len(d.dirty) > 0) && ctx.Err() == nil {
		d.cond.Wait()
	}
}

// stop ends the deleter after the queued deletes (each bounded by its attempts) or when
// ctx ends, whichever is first; the deletes left then are logged.
func (d *durability) stop(ctx context.Context) {
	d.mu.Lock()
	d.stopped = true
	d.cond.Broadcast()
	d.mu.Unlock()
	defer d.cancel()
	select {
	case <-d.done:
	case <-ctx.Done():
		d.cancel()
		d.mu.Lock()
		left := d.queue
		d.queue = nil
		d.mu.Unlock()
		for _, k := range left {
			d.log.Error("tockd: shutdown: durable record of a finished task NOT deleted; it will be reloaded at the next start",
				"ns", k.ns, "id", k.id)
		}
		<-d.done // the Delete in flight ends within its timeout
	}
	// Waiters left (their keys never got deleted, or their task never ended) run now:
	// their connections are closed, so they only release what they hold.
	d.mu.Lock()
	var left []endWaiter
	for k, ws := range d.waiters {
		left = append(left, ws...)
		delete(d.waiters, k)
	}
	d.mu.Unlock()
	for _, w := range left {
		w.to.ended(w.runID, errShutdownPending)
	}
}

// errShutdownPending answers waiters whose record was not deleted before shutdown.
var errShutdownPending = errors.New("tockd: shutting down before the record was deleted")

// claim registers ns/id at version v as a durable submit in progress. It refuses
// (EXISTS) a version at or below a durable task already held. A delete of an earlier
// version's record, queued or in flight, cannot remove the new record: it names its own
// version. It reports whether the entry it replaces is exclusive (its run, or its park
// at a takeover, may hold a run lock).
func (d *durability) claim(k taskKey, e durEntry) (old durEntry, replaced bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, ok := d.tasks[k]
	if ok && e.version <= old.version {
		return old, false, &protocol.Error{Code: protocol.CodeExists,
			Message: fmt.Sprintf("durable task %s/%s exists at version %d (submitted %d)", k.ns, k.id, old.version, e.version)}
	}
	d.tasks[k] = e
	delete(d.refused, k) // its ends from now on are queued anew
	return old, ok, nil
}

// setPack records that the claimed entry e of k was written as pack entry ref (and
// returns e so): the claim is made before the write decides where it goes. The entry's
// pack is added to the term's packs with n entries, none done, when first named.
func (d *durability) setPack(k taskKey, e durEntry, ref store.PackRef, n int) durEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.packs[ref.ID]; !ok && d.lead.fence.Load() == e.term { // a later term loads it
		d.packs[ref.ID] = &packState{done: store.NewPackDone(ref.ID, n), term: e.term}
	}
	claimed := e
	e.pack = ref
	if cur, ok := d.tasks[k]; ok && cur == claimed {
		d.tasks[k] = e
	}
	return e
}

// markNow sets ref's done bit and writes its pack's mark at once, fenced by f: the end
// of a pack entry whose task never entered the engine, which its caller must know
// recorded (the deleter writes the mark again: harmless).
func (d *durability) markNow(ctx context.Context, f store.Fence, ref store.PackRef) error {
	d.mu.Lock()
	d.setDone(ref)
	ps := d.packs[ref.ID]
	var mark store.PackDone
	if ps != nil {
		mark = store.PackDone{ID: ref.ID, Len: ps.done.Len, Done: bytes.Clone(ps.done.Done)}
	}
	d.cond.Broadcast()
	d.mu.Unlock()
	if ps == nil {
		return errOtherTerm
	}
	return d.st.Records().MarkDoneFenced(ctx, f, []store.PackDone{mark})
}

// release undoes a claim whose submit failed (unless a later claim replaced it).
func (d *durability) release(k taskKey, e durEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.tasks[k]; ok && cur == e {
		delete(d.tasks, k)
	}
}

// holds reports whether the durable entry of k is at version v with a record whose
// print is fp (its noAt hash if afterKind: the submit is an "after" task, whose
// record's due time was stamped at its own attempt).
func (d *durability) holds(k taskKey, v uint64, fp recordPrint, afterKind bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.tasks[k]
	if !ok || e.version != v {
		return false
	}
	if afterKind {
		return e.fp.noAt == fp.noAt
	}
	return e.fp.whole == fp.whole
}

// held reports whether ns/id is a durable task the engine holds.
func (d *durability) held(k taskKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.tasks[k]
	return ok
}

// encodeTask serializes a wire task as the body of a SUBMIT frame (the codec's own
// encoding, so that decodeTask reads it back with the codec's checks).
func encodeTask(w *protocol.Task) ([]byte, error) {
	b, err := protocol.AppendFrame(nil, &protocol.Submit{Task: *w}, protocol.MaxFrameLimit)
	if err != nil {
		return nil, err
	}
	return b[4:], nil // after the length prefix
}

func decodeTask(body []byte) (protocol.Task, error) {
	m, err := protocol.Decode(body)
	if err != nil {
		return protocol.Task{}, err
	}
	sub, ok := m.(*protocol.Submit)
	if !ok {
		return protocol.Task{}, fmt.Errorf("record holds a %v message, want SUBMIT", m.Type())
	}
	return sub.Task, nil
}

// storedForm is the wire task as recorded: an "after" delay becomes the absolute "at"
// time it stands for, so that a restart does not start the delay over; but for a task
// with parents, whose delay counts from its release (workflow.go), which a next leader
// makes anew.
func storedForm(w *protocol.Task, now time.Time) protocol.Task {
	r := *w
	if r.Schedule.Kind == task.KindAfter && len(r.Parents()) == 0 {
		at, ok := protocol.UnixNano(now.Add(time.Duration(r.Schedule.Delay)))
		if ok {
			r.Schedule = protocol.Schedule{Kind: task.KindAt, At: at}
		}
	}
	return r
}

// storeError maps a store error to the reply: ErrExists is EXISTS; ErrInvalid and
// ErrTooLarge are INVALID_TASK (the client can fix them); ErrFenced is NOT_LEADER
// (nothing was written); ErrUncertain (a timeout, a connection lost mid-write) is
// UNCERTAIN: the write may have committed, and a retry of the same submit is accepted
// once either way (writeRecords); anything else (etcd refused or could not be reached
// before writing) is OVERLOADED: nothing was written, and a retry later is right.
func storeError(err error) *protocol.Error {
	e := &protocol.Error{Message: err.Error()}
	switch {
	case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrDuplicate):
		e.Code = protocol.CodeExists
	case errors.Is(err, store.ErrInvalid):
		e.Code, e.Field = protocol.CodeInvalidTask, "ns"
	case errors.Is(err, store.ErrTooLarge):
		e.Code, e.Field = protocol.CodeInvalidTask, "payload"
	case errors.Is(err, store.ErrFenced):
		e.Code, e.Message = protocol.CodeNotLeader, "this node stopped leading during the write; nothing was recorded: retry at the leader"
	case errors.Is(err, store.ErrUncertain):
		e.Code, e.Message = protocol.CodeUncertain, "the durable store's write may or may not have committed (repeating the request is safe): "+err.Error()
	default:
		e.Code, e.Message = protocol.CodeOverloaded, "durable store unavailable, retry later: "+err.Error()
	}
	return e
}
