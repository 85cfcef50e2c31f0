package tockd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// A submit's way into the engine (requests), and for a durable task through its record
// (durability): prepare converts and claims, writeRecords writes the claimed records
// together, submitPrepared hands each task to the engine.

// prepared is one task of a submit after conversion and the durable checks.
type prepared struct {
	w     *protocol.Task
	t     task.Task
	key   taskKey
	entry durEntry
	rec   store.Record // durable: the record to write
	term  *store.Fence // durable: the fence when claimed (leadership.fence), the term it is recorded in
	held  *task.Info   // durable: a retry of the task the engine holds, as it holds it
	// unlocks: durable, not exclusive, and it replaces an exclusive version whose run
	// lock (of a run the replacement orphans, or of its park at a takeover) no run end
	// deletes: submitPrepared deletes it (dropReplacedLock).
	unlocks bool
	// replaced: durable, and its claim replaced an entry of a lower version, whose
	// record's key this one's overwrites; or, were that a pack entry (replacedPack), whose
	// done bit goes once this record is written. It is never packed itself.
	replaced     bool
	replacedPack store.PackRef
	// firstDue: a durable recurring task's first occurrence, as of when its record was
	// built: recorded with it as its progress (store.Record.NextDue), and where the engine
	// starts its schedule, so that a leader taking over at any moment after the write
	// continues the same lattice.
	firstDue time.Time
	start    time.Time // when a traced task's submit began, with spans on: its tock.submit span's start
	err      error     // conversion or refusal; the task is not submitted
}

// prepare converts w into *p, a zero prepared, and, for a durable task, checks it can be
// recorded and claims it. It fills *p in place: a prepared is 480 bytes with pointers,
// and one returned by value was copied, with write barriers while the collector runs, for
// every task of a SUBMIT_BATCH.
func (q *requests) prepare(p *prepared, w *protocol.Task) {
	p.w = w
	if w.Traceparent != "" && q.spans.on() {
		p.start = time.Now()
	}
	if p.err = q.checkPayload(w); p.err != nil {
		return
	}
	p.t, p.err = protocol.ToTask(w)
	if p.err != nil {
		return
	}
	p.key = taskKey{p.t.Namespace, p.t.ID}
	if w.Durability != protocol.Durable {
		if q.replica != nil && q.replica.dur.held(p.key) {
			p.err = &protocol.Error{Code: protocol.CodeInvalidTask, Field: "durability",
				Message: fmt.Sprintf("task %s/%s is durable: replace it with a durable submit", p.key.ns, p.key.id)}
		}
		return
	}
	if q.replica == nil {
		// INVALID_TASK is the code that refuses one task for a reason the client can fix,
		// names the field, and does not invite a retry of the same submit; PROTOCOL.md has
		// no "not supported" code (see the package doc).
		p.err = &protocol.Error{Code: protocol.CodeInvalidTask, Field: "durability",
			Message: "durable tasks are not supported by this server (no etcd store): submit it as ephemeral"}
		return
	}
	if w.Exclusive && len(w.Parents()) > 0 {
		// A takeover loads workflow members together (workflowLoad.enter), holding none back
		// for a run lock as it holds an exclusive task (parkLocked).
		p.err = &protocol.Error{Code: protocol.CodeInvalidTask, Field: "exclusive",
			Message: "a durable exclusive task cannot have parents (depends_on) yet"}
		return
	}
	q.replica.dur.prepare(p)
}

// preparedPool recycles SUBMIT_BATCH's slices of prepared (480 bytes with pointers a
// task: a fresh slice a request was a third of the bytes tockd allocated under load, and
// the collector's work with them). Nothing keeps a pointer into one past the request
// (writeRecords waits for the store, submitPrepared for the engine), and putPrepared
// clears it, so that a pooled slice holds no task's memory and prepare gets zero values.
var preparedPool = sync.Pool{New: func() any { return new([]prepared) }}

// getPrepared returns a pooled slice of n zero prepared.
func getPrepared(n int) *[]prepared {
	s := preparedPool.Get().(*[]prepared)
	if cap(*s) < n {
		*s = make([]prepared, n)
	}
	*s = (*s)[:n]
	return s
}

// putPrepared clears s and gives it back to the pool.
func putPrepared(s *[]prepared) {
	clear(*s)
	preparedPool.Put(s)
}

// prepareOne is prepare for one task, in a slice as writeRecords takes it.
func (q *requests) prepareOne(w *protocol.Task) []prepared {
	ps := make([]prepared, 1)
	q.prepare(&ps[0], w)
	return ps
}

// prepare checks that p, a durable task, can be recorded, and claims it (or finds it a
// retry of the durable task the engine holds: p.held).
func (d *durability) prepare(p *prepared) {
	w := p.w
	var fp recordPrint
	now := time.Now()
	if p.rec, fp, p.err = p.record(now); p.err != nil {
		p.err = fmt.Errorf("encode the durable record: %w", p.err)
		return
	}
	if recurring(p.t.Schedule.Kind) {
		if p.firstDue, p.err = p.t.Schedule.First(now); p.err != nil {
			return
		}
		p.rec.NextDue = p.firstDue.UnixNano()
	}
	// The engine would refuse a version at or below one it holds (an ephemeral task, or
	// a finished one it retains): refuse before writing a record. A resubmit of the
	// durable task it holds, as recorded (an earlier answer was lost, or UNCERTAIN and
	// the record was loaded by this leader), is answered with the task as it is.
	if in, err := d.engine.Get(p.t.Namespace, p.t.ID); err == nil && p.t.Version <= in.Task.Version {
		if p.t.Version == in.Task.Version && d.holds(p.key, p.t.Version, fp, w.Schedule.Kind == task.KindAfter) {
			p.held = &in
			return
		}
		p.err = fmt.Errorf("%w: %s/%s at version %d (submitted %d)", task.ErrExists, p.t.Namespace, p.t.ID, in.Task.Version, p.t.Version)
		return
	}
	// The term first: a claim made after it ended is refused at the write (commit.go).
	if p.term = d.lead.fence.Load(); p.term == nil {
		p.err = storeError(store.ErrFenced)
		return
	}
	p.entry = durEntry{version: p.t.Version, recurring: recurring(p.t.Schedule.Kind), exclusive: p.t.Exclusive, fp: fp, term: p.term}
	old, replaced, err := d.claim(p.key, p.entry)
	p.err = err
	p.unlocks = err == nil && replaced && old.exclusive && !p.t.Exclusive
	if p.replaced = replaced; replaced {
		p.replacedPack = old.pack
	}
}

// packable reports whether p's record may go in a pack: a one-shot task of its own (no
// progress, run lock or parents), replacing no entry (whose key its record overwrites).
func (p *prepared) packable() bool {
	return p.rec.NextDue == 0 && !p.t.Exclusive && p.t.DependsOn == nil && !p.replaced
}

// packFrom is the fewest packable records a request writes as a pack: below it, a pack
// saves too few keys to be worth a key of its own per commit.
const packFrom = 16

// record builds p's store record (p is durable) and its print.
func (p *prepared) record(now time.Time) (store.Record, recordPrint, error) {
	sw := storedForm(p.w, now)
	sw.Namespace = p.t.Namespace
	body, err := encodeTask(&sw)
	if err != nil {
		return store.Record{}, recordPrint{}, err
	}
	fp, err := printOf(sw, body, p.w.Schedule.Kind == task.KindAfter) // an "after" retry compares noAt
	return store.Record{Namespace: p.t.Namespace, ID: p.t.ID, Version: p.t.Version, Body: body}, fp, err
}

// writeRecords writes the records of the durable, claimed tasks of ps, in a transaction
// shared with concurrent requests (commit.go); a task whose write failed gets its error
// and its claim released. Without a replica there are none (prepare refused them).
func (q *requests) writeRecords(ps []prepared) {
	if q.replica != nil {
		q.replica.dur.writeRecords(ps, true)
	}
}

// writeRecords is requests.writeRecords with a replica; mayPack false writes every
// record on its own (a workflow: its undo deletes records by key, and its load takes its
// members together).
func (d *durability) writeRecords(ps []prepared, mayPack bool) {
	var idx, packIdx []int
	var recs, packRecs []store.Record
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
			d.releaseClaim(p)
			continue
		}
		if mayPack && p.packable() {
			packIdx = append(packIdx, i)
			packRecs = append(packRecs, p.rec)
		} else {
			idx = append(idx, i)
			recs = append(recs, p.rec)
		}
	}
	if len(packRecs) < packFrom {
		idx, recs = append(idx, packIdx...), append(recs, packRecs...)
		packIdx, packRecs = nil, nil
	}
	if len(packRecs) > 0 {
		d.writePack(term, ps, packIdx, packRecs)
	}
	if len(recs) == 0 {
		return
	}
	// Grouped with other requests' records (commit.go) and fenced by this node's term:
	// a node deposed meanwhile writes nothing the next leader would not see.
	errs := d.committer.put(term, recs)
	for j, i := range idx {
		if errs[j] != nil && !ps[i].retried(recs[j], errs[j]) {
			ps[i].err = storeError(errs[j])
			d.releaseClaim(&ps[i])
		} else if ps[i].replacedPack.ID != "" {
			d.endPack(ps[i].replacedPack) // the later version's record is written
		}
	}
}

// writePack writes recs, the records of ps[idx[j]], as one pack fenced by term (it
// must still be the server's; putPack), and notes each written one's pack entry in its
// durable entry (setPack) before it enters the engine; a task whose write failed gets
// its error and its claim released.
func (d *durability) writePack(term *store.Fence, ps []prepared, idx []int, recs []store.Record) {
	refs, errs := d.putPack(term, recs)
	parts := map[string]int{}
	for j, r := range refs {
		if errs[j] == nil {
			parts[r.ID]++
		}
	}
	for j, i := range idx {
		if errs[j] != nil {
			ps[i].err = storeError(errs[j])
			d.releaseClaim(&ps[i])
			continue
		}
		ps[i].entry = d.setPack(ps[i].key, ps[i].entry, refs[j], parts[refs[j].ID])
	}
}

// putPack writes recs as one pack fenced by term, and settles an unknown outcome before
// it answers: a pack is named by the term's revision and a number of this process's
// (unique to its writer, as PutPackFenced wants), so the client's retry of an UNCERTAIN
// answer would write a second pack, and the first one, if it landed, would keep its
// entries live after the tasks end through the second: run again by the next leader
// after their ACKs. So a part whose write may have committed is written again at once,
// the same pack under the same ID (an identical one found is success); if that too has
// no answer, the parts still unknown are deleted (a fenced mark with every entry done),
// and those records are answered as not written (OVERLOADED). Only when the delete fails
// as well is the answer UNCERTAIN. (A first write that reached etcd but lands after the
// delete is not guarded: etcd applies a member's requests in the order it proposed
// them, and the delete is proposed after the write's retry was answered.)
func (d *durability) putPack(term *store.Fence, recs []store.Record) ([]store.PackRef, []error) {
	f := d.lead.fence.Load()
	if f != term {
		errs := make([]error, len(recs))
		for j := range errs {
			errs[j] = store.ErrFenced
		}
		return nil, errs
	}
	d.committer.commits.Add(1)
	id := fmt.Sprintf("%x-%x", f.Rev, d.packSeq.Add(1))
	refs, errs, err := d.tryPack(*f, id, recs)
	if errors.Is(err, store.ErrUncertain) {
		refs, errs, err = d.tryPack(*f, id, recs) // the same parts: the split is deterministic
	}
	if !errors.Is(err, store.ErrUncertain) {
		return refs, errs
	}
	parts := map[string]int{}
	for j, r := range refs {
		if errors.Is(errs[j], store.ErrUncertain) {
			parts[r.ID]++
		}
	}
	marks := make([]store.PackDone, 0, len(parts))
	for pid, n := range parts {
		m := store.NewPackDone(pid, n)
		for i := range n {
			m.Set(i)
		}
		marks = append(marks, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	derr := d.st.Records().MarkDoneFenced(ctx, *f, marks)
	cancel()
	d.lead.fencedOut(*f, derr)
	if derr != nil {
		d.log.Warn("tockd: a pack write of unknown outcome could not be deleted: answered UNCERTAIN",
			"pack", id, "err", err, "delete", derr)
		return refs, errs
	}
	undone := fmt.Errorf("store: pack %s: its write had no answer twice and was deleted: nothing recorded (%v)", id, err)
	for j := range errs {
		if errors.Is(errs[j], store.ErrUncertain) {
			errs[j] = undone
		}
	}
	return refs, errs
}

// tryPack is one PutPackFenced of pack id, fenced by f (and the test hook afterPack).
func (d *durability) tryPack(f store.Fence, id string, recs []store.Record) ([]store.PackRef, []error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	refs, errs, err := d.st.Records().PutPackFenced(ctx, f, id, recs)
	cancel()
	d.lead.fencedOut(f, err)
	if d.afterPack != nil {
		errs, err = d.afterPack(errs, err)
	}
	return refs, errs, err
}

// releaseClaim undoes p's claim (its write or submit failed) if p's term still holds:
// once it has ended, dropDurable has dropped the claim, and an entry of the same key
// and version is a later term's (loaded from a record that did land), not p's to undo.
func (d *durability) releaseClaim(p *prepared) {
	d.term.RLock() // a step-down's dropDurable waits, so the term cannot end meanwhile
	defer d.term.RUnlock()
	if d.lead.fence.Load() == p.term {
		d.release(p.key, p.entry)
	}
}

// retried reports whether err, the refusal of p's record rec, is a retry of p's own
// earlier write: the stored record has p's version and differs from rec at most in the
// "at" an "after" delay was stamped into (storedForm), by an earlier attempt (one
// answered UNCERTAIN whose write did land), and in its trace context. Then p takes the
// stored form, so that the engine runs the task when its record says.
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
	mine.Traceparent, mine.Tracestate = stored.Traceparent, stored.Tracestate // not the task's content (recordPrint)
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
func (q *requests) submitPrepared(p *prepared) (task.Info, error) {
	in, err := q.submitTo(p)
	q.spans.submitted(&p.t, p.start, err)
	return in, err
}

// submitTo is submitPrepared but for its span.
func (q *requests) submitTo(p *prepared) (task.Info, error) {
	if p.err != nil {
		return task.Info{}, p.err
	}
	if p.held != nil {
		return *p.held, nil
	}
	if p.w.Durability != protocol.Durable {
		// p.t.Payload is p.w's, which the decoder made for this task alone (a decoded
		// message shares no memory with its frame, protocol's doc), and nothing reads or
		// writes p.w.Payload after this: the engine keeps it, not a second copy.
		return q.engine.SubmitOwned(p.t)
	}
	return q.replica.dur.submit(p) // prepare refused a durable task without a replica
}

// submit is submitPrepared for a durable task whose record is written.
func (d *durability) submit(p *prepared) (task.Info, error) {
	// A lock written after this revision is a later version's run's (it starts only once
	// this version is in the engine): the replaced version's lock is at or below it.
	// Read before the term lock, which a step-down waits for.
	var before int64
	if p.unlocks {
		before = d.locks.lockRevision()
	}
	d.term.RLock() // dropDurable waits: the task enters the engine before it drops them
	if d.lead.fence.Load() != p.term {
		d.term.RUnlock()
		next := p.firstDue // recorded as its progress: where the next leader resumes it
		if next.IsZero() {
			next, _ = p.t.Schedule.First(time.Now()) // ToTask checked the schedule
		}
		return task.Info{Task: p.t, State: task.Pending, NextRun: next}, nil
	}
	in, err := d.engine.Continue(p.t, p.firstDue) // zero for a one-shot task: Submit
	d.term.RUnlock()
	if err == nil {
		d.progress.noteArmed(in)
		if p.unlocks {
			d.locks.dropReplacedLock(p.term, p.key, before)
		}
	}
	if err != nil {
		d.releaseClaim(p)
		derr := store.ErrFenced
		if f := p.term; d.lead.fence.Load() == f {
			ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
			if ref := p.entry.pack; ref.ID != "" {
				derr = d.markNow(ctx, *f, ref)
			} else {
				derr = d.st.Records().DeleteBatchFenced(ctx, *f, []store.Versioned{
					{Key: store.Key{Namespace: p.key.ns, ID: p.key.id}, Version: p.t.Version}})
			}
			cancel()
			d.lead.fencedOut(*f, derr)
		}
		if derr != nil {
			d.log.Error("tockd: record of a durable submit the engine refused NOT deleted",
				"ns", p.key.ns, "id", p.key.id, "version", p.t.Version, "err", derr)
			// The record stays, and the next leader may run the task: not a plain refusal.
			return in, &protocol.Error{Code: protocol.CodeUncertain, Message: fmt.Sprintf(
				"refused by this node's engine (%v), but its record could not be deleted (%v): the next leader may run it; resubmitting the same task is safe", err, derr)}
		}
	}
	return in, err
}

// durabilityOf is the class to report for the engine's task in.
func (q *requests) durabilityOf(in task.Info) protocol.Durability {
	if q.replica != nil && q.replica.dur.isDurable(in.Task.Namespace, in.Task.ID, in.Task.Version) {
		return protocol.Durable
	}
	return protocol.Ephemeral
}
