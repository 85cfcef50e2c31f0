package tockd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
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
}

// recordPrint identifies a record's content, so that a resubmit of the very task a
// durable entry holds is recognised as a retry (prepare): whole hashes the record's
// body; noAt hashes it with an "at" schedule's due time zeroed, which is all an "after"
// submit's records differ in from one attempt to the next (storedForm stamps the time).
// The hashes are maphash's, seeded per process: they are compared within it only.
type recordPrint struct{ whole, noAt uint64 }

var printSeed = maphash.MakeSeed()

// printOf is the print of the record whose body is body, sw decoded.
func printOf(sw protocol.Task, body []byte) (recordPrint, error) {
	p := recordPrint{whole: maphash.Bytes(printSeed, body)}
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

// durability tracks which engine tasks are durable and deletes the store records of
// those that finished for good. Nil when the server has no store.
type durability struct {
	st  *store.Store
	log interface {
		Warn(string, ...any)
		Error(string, ...any)
		Debug(string, ...any)
	}

	// term is held for reading across a durable submit's entry into the engine (with the
	// check that its term still is the server's) and for writing by dropDurable: a task
	// recorded in a term enters the engine only while that term's tasks are held, so
	// dropDurable drops it with them. Lock order: term, then the engine, then mu.
	term sync.RWMutex

	mu     sync.Mutex
	cond   *sync.Cond                   // signals queue growth, deletes finishing, and stop
	unlock func(task.Event)             // deletes an exclusive task's run lock (Server.unlockRun)
	fence  *atomic.Pointer[store.Fence] // the server's leadership term (Server.fence); nil inside: not leading
	// armed and forgetProgress keep a recurring task's progress (progress.go);
	// fencedOut ends the server's term when etcd refused a fenced write (leader.go).
	armed          func(task.Event)
	forgetProgress func(ns, id string)
	fencedOut      func(store.Fence, error)
	tasks          map[taskKey]durEntry
	queue          []taskKey          // records to delete, in event order
	queued         map[taskKey]uint64 // the keys in queue: the version whose record goes
	deleting       map[taskKey]bool   // a Delete in flight
	// waiters run once the key's record is deleted (or given up on): replies to the
	// ACK or CANCEL that ended a durable task wait for it, so that an acknowledged end
	// is never undone by a failover reloading the record.
	waiters map[taskKey][]func(error)
	stopped bool
	done    chan struct{} // closed when the deleter exits
	// ctx ends the deleter's store calls when stop's context ends first.
	ctx    context.Context
	cancel context.CancelFunc
}

func newDurability(st *store.Store, s *Server) *durability {
	d := &durability{st: st, log: s.log, tasks: map[taskKey]durEntry{}, queued: map[taskKey]uint64{},
		deleting: map[taskKey]bool{}, waiters: map[taskKey][]func(error){}, done: make(chan struct{})}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.cond = sync.NewCond(&d.mu)
	d.unlock = s.unlockRun
	d.fencedOut = s.fencedOut
	d.fence = &s.fence
	d.armed = s.onArmed
	d.forgetProgress = s.progress.forget
	return d
}

// isDurable reports whether the engine's task ns/id (at version v) is a durable one.
func (d *durability) isDurable(ns, id string, v uint64) bool {
	if d == nil {
		return false
	}
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
		d.unlock(ev)
	}
	if e.recurring && ev.Kind != task.EventCancelled {
		d.mu.Unlock()
		if ev.Kind != task.EventRetrying {
			d.armed(ev) // an occurrence ended: its successor is armed
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
	d.queued[k] = e.version // an older version queued was replaced by this one's record
	d.cond.Broadcast()
	d.mu.Unlock()
	if e.recurring { // cancelled: its progress goes with its record
		d.forgetProgress(ev.Namespace, ev.ID)
	}
}

// afterDelete arranges for fn to run once ns/id's record is deleted, if its deletion is
// queued or in flight, or if the task is a one-shot durable one still held whose end is
// imminent (ending is true: an ACK or CANCEL of it was accepted, and the engine may apply
// it a moment later). It reports whether fn will run; false means there is nothing to
// wait for, and the caller goes on at once. fn runs on the deleter goroutine: it must
// not block.
func (d *durability) afterDelete(k taskKey, ending bool, fn func(deleteErr error)) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, busy := d.deleting[k]
	_, queued := d.queued[k]
	e, held := d.tasks[k]
	if !queued && !busy && !(ending && held && !e.recurring) {
		return false
	}
	d.waiters[k] = append(d.waiters[k], fn)
	return true
}

// run is the deleter goroutine: it deletes the queued records in batches (one etcd
// transaction per store.Options.MaxTxnOps keys: a group commit, so deletes keep up with
// acknowledgements) until stop, and then the ones still queued; after each batch it runs
// the batch's waiters. Each delete names the version that ended, so a task resubmitted
// at a later version meanwhile keeps its new record.
func (d *durability) run() {
	defer close(d.done)
	d.mu.Lock()
	for {
		for len(d.queue) == 0 && !d.stopped {
			d.cond.Wait()
		}
		if len(d.queue) == 0 {
			d.mu.Unlock()
			return
		}
		batch := d.queue
		d.queue = nil
		keys := make([]store.Versioned, 0, len(batch))
		for _, k := range batch {
			keys = append(keys, store.Versioned{Key: store.Key{Namespace: k.ns, ID: k.id}, Version: d.queued[k]})
			delete(d.queued, k)
			d.deleting[k] = true
		}
		d.mu.Unlock()
		err := d.deleteRecords(keys)
		d.mu.Lock()
		var done []func(error)
		for _, k := range keys {
			tk := taskKey{k.Namespace, k.ID}
			delete(d.deleting, tk)
			if _, again := d.queued[tk]; again {
				continue // a later version ended meanwhile: its waiters wait for its delete
			}
			done = append(done, d.waiters[tk]...)
			delete(d.waiters, tk)
		}
		d.cond.Broadcast() // flush waits for the queue to empty
		d.mu.Unlock()
		for _, fn := range done {
			fn(err)
		}
		d.mu.Lock()
	}
}

// deleteRecords deletes keys while this node leads (the write is fenced by its term),
// retrying a failed batch with backoff up to deleteAttempts times. It returns the
// failure it gave up on (logged at Error: those tasks come back at the next load), at
// once for store.ErrFenced: a node that no longer leads must not delete records the next
// leader may already have loaded.
func (d *durability) deleteRecords(keys []store.Versioned) error {
	pause := 50 * time.Millisecond
	for i := 1; ; i++ {
		err := store.ErrFenced
		if f := d.fence.Load(); f != nil {
			ctx, cancel := context.WithTimeout(d.ctx, storeOpTimeout)
			err = d.st.DeleteBatchFenced(ctx, *f, keys)
			cancel()
			d.fencedOut(*f, err)
		}
		switch {
		case err == nil:
			d.log.Debug("tockd: durable records deleted", "count", len(keys))
			return nil
		case errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrClosed) || i == deleteAttempts || d.ctx.Err() != nil:
			d.log.Error("tockd: durable records of finished tasks NOT deleted; they will be loaded again by the next leader",
				"count", len(keys), "first", keys[0].Namespace+"/"+keys[0].ID, "attempts", i, "err", err)
			return err
		}
		d.log.Warn("tockd: durable record deletes failed; retrying", "count", len(keys), "attempt", i, "err", err)
		select {
		case <-time.After(pause):
		case <-d.ctx.Done():
		}
		pause *= 2
	}
}

// pending is the number of records queued or being deleted.
func (d *durability) pending() int {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue) + len(d.deleting)
}

// flush waits until every queued delete has been tried (or ctx ends): Shutdown calls it
// before resigning, while its deletes are still within its term.
func (d *durability) flush(ctx context.Context) {
	if d == nil {
		return
	}
	stop := context.AfterFunc(ctx, func() {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	})
	defer stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	for (len(d.queue) > 0 || len(d.deleting) > 0) && ctx.Err() == nil {
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
	var left []func(error)
	for k, fns := range d.waiters {
		left = append(left, fns...)
		delete(d.waiters, k)
	}
	d.mu.Unlock()
	for _, fn := range left {
		fn(errShutdownPending)
	}
}

// errShutdownPending answers waiters whose record was not deleted before shutdown.
var errShutdownPending = errors.New("tockd: shutting down before the record was deleted")

// claim registers ns/id at version v as a durable submit in progress. It refuses
// (EXISTS) a version at or below a durable task already held. A delete of an earlier
// version's record, queued or in flight, cannot remove the new record: it names its own
// version. It reports whether the entry it replaces is exclusive (its run, or its park
// at a takeover, may hold a run lock).
func (d *durability) claim(k taskKey, e durEntry) (replacesExclusive bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, ok := d.tasks[k]
	if ok && e.version <= old.version {
		return false, &protocol.Error{Code: protocol.CodeExists,
			Message: fmt.Sprintf("durable task %s/%s exists at version %d (submitted %d)", k.ns, k.id, old.version, e.version)}
	}
	d.tasks[k] = e
	return ok && old.exclusive, nil
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
// time it stands for, so that a restart does not start the delay over.
func storedForm(w *protocol.Task, now time.Time) protocol.Task {
	r := *w
	if r.Schedule.Kind == task.KindAfter {
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

// loadDurable submits every stored record to the engine, as the leader of epoch, reading
// them (and the run locks) from etcd. A record that cannot be decoded or that the engine
// refuses is logged and left in the store. An exclusive task with a run lock (its last
// run may still execute) is submitted with its first run held back one time to run
// (exclusive.go).
func (s *Server) loadDurable(ctx context.Context, epoch uint64) error {
	locked, err := s.runLocks(ctx)
	if err != nil {
		return err
	}
	next, err := s.opts.Store.NextAt(ctx, 0)
	if err != nil {
		return err
	}
	n := 0
	_, err = s.opts.Store.Load(ctx, func(r store.Record) error {
		if s.loadRecord(r, locked, next, epoch) {
			n++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("tockd: load durable tasks: %w", err)
	}
	s.log.Info("tockd: durable tasks loaded from etcd", "count", n)
	return nil
}

// loadMirrored is loadDurable from a standby's mirror: no read of etcd.
func (s *Server) loadMirrored(records []store.Record, locked map[store.Key]bool, next map[store.Key]store.NextDue, epoch uint64) {
	n := 0
	for _, r := range records {
		if s.loadRecord(r, locked, next, epoch) {
			n++
		}
	}
	s.log.Info("tockd: durable tasks loaded from the standby mirror", "count", n)
}

// loadRecord submits one record to the engine (see loadDurable); false if it was not.
func (s *Server) loadRecord(r store.Record, locked map[store.Key]bool, next map[store.Key]store.NextDue, epoch uint64) bool {
	w, err := decodeTask(r.Body)
	if err == nil {
		var t task.Task
		if t, err = protocol.ToTask(&w); err == nil {
			k := taskKey{t.Namespace, t.ID}
			e := durEntry{version: t.Version, recurring: recurring(t.Schedule.Kind), exclusive: t.Exclusive}
			sk := store.Key{Namespace: t.Namespace, ID: t.ID}
			// A recurring task continues where its last leader was, if that progress is of
			// this version (a replacement's schedule is its own).
			var nextDue time.Time
			if nd, ok := next[sk]; ok && nd.Version == t.Version {
				nextDue = time.Unix(0, nd.Due)
			}
			if e.fp, err = printOf(w, r.Body); err == nil {
				_, err = s.dur.claim(k, e)
			}
			if err == nil {
				var in task.Info
				if t.Exclusive && locked[sk] {
					in, err = s.parkLocked(t, nextDue, epoch)
				} else {
					in, err = s.engine.Continue(t, nextDue)
				}
				if err != nil {
					s.dur.release(k, e)
				} else {
					s.noteArmed(in)
				}
			}
		}
	}
	if err != nil {
		s.log.Error("tockd: durable record not loaded", "ns", r.Namespace, "id", r.ID, "err", err)
		return false
	}
	return true
}

func recurring(k task.Kind) bool { return k == task.KindEvery || k == task.KindCron }

// prepared is one task of a submit after conversion and the durable checks.
type prepared struct {
	w     *protocol.Task
	t     task.Task
	key   taskKey
	entry durEntry
	rec   store.Record // durable: the record to write
	term  *store.Fence // durable: Server.fence when claimed, the term it is recorded in
	held  *task.Info   // durable: a retry of the task the engine holds, as it holds it
	// unlocks: durable, not exclusive, and it replaces an exclusive version whose run
	// lock (of a run the replacement orphans, or of its park at a takeover) no run end
	// deletes: submitPrepared deletes it (dropReplacedLock).
	unlocks bool
	// firstDue: a durable recurring task's first occurrence, as of when its record was
	// built: recorded with it as its progress (store.Record.NextDue), and where the engine
	// starts its schedule, so that a leader taking over at any moment after the write
	// continues the same lattice.
	firstDue time.Time
	err      error // conversion or refusal; the task is not submitted
}

// prepare converts w and, for a durable task, checks it can be recorded and claims it.
func (s *Server) prepare(w *protocol.Task) prepared {
	p := prepared{w: w}
	if p.err = s.checkPayload(w); p.err != nil {
		return p
	}
	p.t, p.err = protocol.ToTask(w)
	if p.err != nil {
		return p
	}
	p.key = taskKey{p.t.Namespace, p.t.ID}
	if w.Durability != protocol.Durable {
		if s.dur != nil && s.dur.held(p.key) {
			p.err = &protocol.Error{Code: protocol.CodeInvalidTask, Field: "durability",
				Message: fmt.Sprintf("task %s/%s is durable: replace it with a durable submit", p.key.ns, p.key.id)}
		}
		return p
	}
	if s.dur == nil {
		// INVALID_TASK is the code that refuses one task for a reason the client can fix,
		// names the field, and does not invite a retry of the same submit; PROTOCOL.md has
		// no "not supported" code (see the package doc).
		p.err = &protocol.Error{Code: protocol.CodeInvalidTask, Field: "durability",
			Message: "durable tasks are not supported by this server (no etcd store): submit it as ephemeral"}
		return p
	}
	var fp recordPrint
	now := time.Now()
	if p.rec, fp, p.err = p.record(now); p.err != nil {
		p.err = fmt.Errorf("encode the durable record: %w", p.err)
		return p
	}
	if recurring(p.t.Schedule.Kind) {
		if p.firstDue, p.err = p.t.Schedule.First(now); p.err != nil {
			return p
		}
		p.rec.NextDue = p.firstDue.UnixNano()
	}
	// The engine would refuse a version at or below one it holds (an ephemeral task, or
	// a finished one it retains): refuse before writing a record. A resubmit of the
	// durable task it holds, as recorded (an earlier answer was lost, or UNCERTAIN and
	// the record was loaded by this leader), is answered with the task as it is.
	if in, err := s.engine.Get(p.t.Namespace, p.t.ID); err == nil && p.t.Version <= in.Task.Version {
		if p.t.Version == in.Task.Version && s.dur.holds(p.key, p.t.Version, fp, w.Schedule.Kind == task.KindAfter) {
			p.held = &in
			return p
		}
		p.err = fmt.Errorf("%w: %s/%s at version %d (submitted %d)", task.ErrExists, p.t.Namespace, p.t.ID, in.Task.Version, p.t.Version)
		return p
	}
	// The term first: a claim made after it ended is refused at the write (commit.go).
	if p.term = s.fence.Load(); p.term == nil {
		p.err = storeError(store.ErrFenced)
		return p
	}
	p.entry = durEntry{version: p.t.Version, recurring: recurring(p.t.Schedule.Kind), exclusive: p.t.Exclusive, fp: fp}
	replacesExclusive, err := s.dur.claim(p.key, p.entry)
	p.err = err
	p.unlocks = err == nil && replacesExclusive && !p.t.Exclusive
	return p
}

// record builds p's store record (p is durable) and its print.
func (p *prepared) record(now time.Time) (store.Record, recordPrint, error) {
	sw := storedForm(p.w, now)
	sw.Namespace = p.t.Namespace
	body, err := encodeTask(&sw)
	if err != nil {
		return store.Record{}, recordPrint{}, err
	}
	fp, err := printOf(sw, body)
	return store.Record{Namespace: p.t.Namespace, ID: p.t.ID, Version: p.t.Version, Body: body}, fp, err
}

// writeRecords writes the records of the durable, claimed tasks of ps, in a transaction
// shared with concurrent requests (commit.go); a task whose write failed gets its error
// and its claim released.
func (s *Server) writeRecords(ps []prepared) {
	var idx []int
	var recs []store.Record
	var term *store.Fence
	for i := range ps {
		p := &ps[i]
		if p.err != nil || p.held != nil || p.w.Durability != protocol.Durable {
			continue
		}
		if term == nil {
			term = p.term
		}
		if p.term != term { // the term changed while the request was prepared
			p.err = storeError(store.ErrFenced)
			s.releaseClaim(p)
			continue
		}
		idx = append(idx, i)
		recs = append(recs, p.rec)
	}
	if len(recs) == 0 {
		return
	}
	// Grouped with other requests' records (commit.go) and fenced by this node's term:
	// a node deposed meanwhile writes nothing the next leader would not see.
	errs := s.committer.put(s, term, recs)
	for j, i := range idx {
		if errs[j] != nil && !ps[i].retried(recs[j], errs[j]) {
			ps[i].err = storeError(errs[j])
			s.releaseClaim(&ps[i])
		}
	}
}

// releaseClaim undoes p's claim (its write or submit failed) if p's term still holds:
// once it has ended, dropDurable has dropped the claim, and an entry of the same key
// and version is a later term's (loaded from a record that did land), not p's to undo.
func (s *Server) releaseClaim(p *prepared) {
	s.dur.term.RLock() // a step-down's dropDurable waits, so the term cannot end meanwhile
	defer s.dur.term.RUnlock()
	if s.fence.Load() == p.term {
		s.dur.release(p.key, p.entry)
	}
}

// retried reports whether err, the refusal of p's record rec, is a retry of p's own
// earlier write: the stored record has p's version and differs from rec at most in the
// "at" an "after" delay was stamped into (storedForm), by an earlier attempt (one
// answered UNCERTAIN whose write did land). Then p takes the stored form, so that the
// engine runs the task when its record says.
func (p *prepared) retried(rec store.Record, err error) bool {
	var ee *store.ExistsError
	if !errors.As(err, &ee) || ee.Stored.Version != rec.Version || p.w.Schedule.Kind != task.KindAfter {
		return false
	}
	stored, derr := decodeTask(ee.Stored.Body)
	if derr != nil || stored.Schedule.Kind != task.KindAt {
		return false
	}
	mine, derr := decodeTask(rec.Body)
	if derr != nil || stored.Schedule.At > mine.Schedule.At {
		return false
	}
	mine.Schedule.At = stored.Schedule.At
	if body, eerr := encodeTask(&mine); eerr != nil || !bytes.Equal(body, ee.Stored.Body) {
		return false
	}
	t, terr := protocol.ToTask(&stored)
	if terr != nil {
		return false
	}
	p.t = t
	return true
}

// submitPrepared submits p (its record, if durable, is written) to the engine. If the
// engine refuses a durable task, its record is deleted again: that version's only (a
// later version may have replaced it meanwhile, and won in the engine), and fenced by
// its term.
//
// A durable task whose term has ended (the node stepped down after the record was
// written) does not enter the engine: its record, written in that term, is loaded by
// the next leader (this node again, perhaps), which runs it. It is answered as accepted
// (PENDING, due at its first occurrence as of now), since it will run.
func (s *Server) submitPrepared(p *prepared) (task.Info, error) {
	if p.err != nil {
		return task.Info{}, p.err
	}
	if p.held != nil {
		return *p.held, nil
	}
	if p.w.Durability != protocol.Durable {
		return s.engine.Submit(p.t)
	}
	d := s.dur
	// A lock written after this revision is a later version's run's (it starts only once
	// this version is in the engine): the replaced version's lock is at or below it.
	// Read before the term lock, which a step-down waits for.
	var before int64
	if p.unlocks {
		before = s.lockRevision()
	}
	d.term.RLock() // dropDurable waits: the task enters the engine before it drops them
	if s.fence.Load() != p.term {
		d.term.RUnlock()
		next := p.firstDue // recorded as its progress: where the next leader resumes it
		if next.IsZero() {
			next, _ = p.t.Schedule.First(time.Now()) // ToTask checked the schedule
		}
		return task.Info{Task: p.t, State: task.Pending, NextRun: next}, nil
	}
	in, err := s.engine.Continue(p.t, p.firstDue) // zero for a one-shot task: Submit
	d.term.RUnlock()
	if err == nil {
		s.noteArmed(in)
		if p.unlocks {
			s.dropReplacedLock(p.term, p.key, before)
		}
	}
	if err != nil {
		s.releaseClaim(p)
		derr := store.ErrFenced
		if f := p.term; s.fence.Load() == f {
			ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
			derr = s.opts.Store.DeleteBatchFenced(ctx, *f, []store.Versioned{
				{Key: store.Key{Namespace: p.key.ns, ID: p.key.id}, Version: p.t.Version}})
			cancel()
			s.fencedOut(*f, derr)
		}
		if derr != nil {
			s.log.Error("tockd: record of a durable submit the engine refused NOT deleted",
				"ns", p.key.ns, "id", p.key.id, "version", p.t.Version, "err", derr)
			// The record stays, and the next leader may run the task: not a plain refusal.
			return in, &protocol.Error{Code: protocol.CodeUncertain, Message: fmt.Sprintf(
				"refused by this node's engine (%v), but its record could not be deleted (%v): the next leader may run it; resubmitting the same task is safe", err, derr)}
		}
	}
	return in, err
}

// durabilityOf is the class to report for the engine's task in.
func (s *Server) durabilityOf(in task.Info) protocol.Durability {
	if s.dur.isDurable(in.Task.Namespace, in.Task.ID, in.Task.Version) {
		return protocol.Durable
	}
	return protocol.Ephemeral
}
