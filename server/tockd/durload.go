package tockd

import (
	"context"
	"fmt"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// A takeover's load of the durable tasks into the engine, and a step-down's drop of
// them (durability; the standby mirror's records are loaded the same way).

// durLoad is one takeover's load of the durable records into the engine (loadDurable,
// or loadMirrored from a standby's mirror): what was read before it (the run locks and
// the recurring tasks' progress), the workflow members kept for last (wf), the stale
// records passed over (stale), and how many records it loaded.
//
// Invariants:
//   - A record loaded is claimed in d.tasks at its version and under the loading term
//     (d.lead.fence when it is read), or it is not in the engine: a claim whose task the
//     engine refused is released. A workflow member is claimed, and enters the engine
//     only with the rest of its workflow (finish: workflowLoad.enter).
//   - n counts the records in the engine once finish is done (a workflow wf.enter
//     refused is taken off it).
//
// Locking: a durLoad belongs to the goroutine of the load (leadership's), which the
// store's load calls back (record, hooks) one record at a time; it is never shared.
// The claims and packs it touches are d's, under d.mu (claim, release, the Pack hook).
// Its engine calls are made with no lock held.
type durLoad struct {
	d      *durability
	locked map[store.Key]bool          // the run locks held (exclusive.go): such a task is parked
	next   map[store.Key]store.NextDue // the recurring tasks' progress, by key
	epoch  uint64                      // the term loading
	wf     workflowLoad
	stale  staleRecords
	n      int // records loaded
}

// newDurLoad starts a load of d's records as the leader of epoch, with the run locks
// and progress read.
func newDurLoad(d *durability, locked map[store.Key]bool, next map[store.Key]store.NextDue, epoch uint64) *durLoad {
	return &durLoad{d: d, locked: locked, next: next, epoch: epoch, wf: workflowLoad{d: d}}
}

// loadDurable submits every stored record to the engine, as the leader of epoch, reading
// them (and the run locks) from etcd. A record that cannot be decoded or that the engine
// refuses is logged and left in the store. An exclusive task with a run lock (its last
// run may still execute) is submitted with its first run held back one time to run
// (exclusive.go).
func (d *durability) loadDurable(ctx context.Context, epoch uint64) error {
	d.forgetRefused()
	locked, err := d.locks.runLocks(ctx)
	if err != nil {
		return err
	}
	next, err := d.st.Progress().At(ctx, 0)
	if err != nil {
		return err
	}
	l := newDurLoad(d, locked, next, epoch)
	_, err = d.st.Records().LoadAll(ctx, l.record, l.hooks())
	if err != nil {
		l.wf.release()
		return fmt.Errorf("tockd: load durable tasks: %w", err)
	}
	l.finish(ctx, "tockd: durable tasks loaded from etcd")
	return nil
}

// loadMirrored is loadDurable from a standby's mirror (its records of their own and its
// packs): no read of etcd but the deletes of stale records.
func (d *durability) loadMirrored(ctx context.Context, records []store.Record, packs *store.PackSet, locked map[store.Key]bool, next map[store.Key]store.NextDue, epoch uint64) {
	d.forgetRefused()
	l := newDurLoad(d, locked, next, epoch)
	_ = packs.Merge(records, l.record, l.hooks())
	l.finish(ctx, "tockd: durable tasks loaded from the standby mirror")
}

// finish enters the workflows kept for last, logs msg with the count loaded, and
// deletes the stale records (endStale).
func (l *durLoad) finish(ctx context.Context, msg string) {
	l.n -= l.wf.enter()
	l.d.log.Info(msg, "count", l.n)
	l.endStale(ctx)
}

// staleRecords are what a load passed over (store.LoadHooks.Stale): records of their
// own that a higher version in a pack replaced, to delete; the pack entries go to their
// packs' bitmaps at once.
type staleRecords struct{ own []store.Versioned }

// hooks are a takeover's load hooks: every pack read joins the term's packs (its done
// bitmap as stored), a stale pack entry gets its done bit, a stale record of its own
// goes to l.stale. A pack that is done once its stale entries are (none of it loads) is
// marked by the deleter, which deletes it.
func (l *durLoad) hooks() store.LoadHooks {
	d := l.d
	term := d.lead.fence.Load()
	return store.LoadHooks{
		Pack: func(pd store.PackDone) {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.packs[pd.ID] = &packState{done: pd, term: term}
			if pd.Full() { // its final mark was not written: the deleter writes it
				d.packs[pd.ID].dirty = true
				d.dirty = append(d.dirty, pd.ID)
			}
		},
		Stale: func(r store.Record) {
			if r.Pack.ID != "" {
				d.endPack(r.Pack)
				return
			}
			l.stale.own = append(l.stale.own, store.Versioned{Key: store.Key{Namespace: r.Namespace, ID: r.ID}, Version: r.Version})
		},
	}
}

// endStale deletes the stale records of their own, fenced by the term, once the load is
// done; a failure is logged (the next load passes them over again).
func (l *durLoad) endStale(ctx context.Context) {
	d := l.d
	f := d.lead.fence.Load()
	if len(l.stale.own) == 0 || f == nil {
		return
	}
	err := d.st.Records().DeleteBatchFenced(ctx, *f, l.stale.own)
	d.lead.fencedOut(*f, err)
	if err != nil {
		d.log.Warn("tockd: records replaced by a later version in a pack NOT deleted; the next load passes them over again",
			"count", len(l.stale.own), "err", err)
	}
}

// record submits one record to the engine (see loadDurable), in the place of a
// finished copy of its task the engine still holds (forgetFinished), and counts it in
// l.n if it was. A workflow member's (a task with parents) is claimed and kept in l.wf
// instead, for workflowLoad.enter, once every other record is in. It never fails: a
// record not loaded is logged (the store's load goes on).
func (l *durLoad) record(r store.Record) error {
	d := l.d
	w, err := decodeTask(r.Body)
	if err == nil {
		var t task.Task
		if t, err = protocol.ToTask(&w); err == nil {
			k := taskKey{t.Namespace, t.ID}
			// The term loading it (stored before the load): its end is deleted under it.
			e := durEntry{version: t.Version, recurring: recurring(t.Schedule.Kind), exclusive: t.Exclusive,
				term: d.lead.fence.Load(), pack: r.Pack}
			sk := store.Key{Namespace: t.Namespace, ID: t.ID}
			// A recurring task continues where its last leader was, if that progress is of
			// this version (a replacement's schedule is its own).
			var nextDue time.Time
			if nd, ok := l.next[sk]; ok && nd.Version == t.Version {
				nextDue = time.Unix(0, nd.Due)
			}
			if e.fp, err = printOf(w, r.Body, true); err == nil {
				_, _, err = d.claim(k, e)
			}
			if err == nil && t.DependsOn != nil {
				l.forgetFinished(k)
				l.wf.add(t, k, e)
				l.n++
				return nil
			}
			if err == nil {
				l.forgetFinished(k)
				var in task.Info
				if t.Exclusive && l.locked[sk] {
					in, err = d.locks.parkLocked(t, nextDue, l.epoch)
				} else {
					in, err = d.engine.Continue(t, nextDue)
				}
				if err != nil {
					d.release(k, e)
				} else {
					d.progress.noteArmed(in)
				}
			}
		}
	}
	if err != nil {
		d.log.Error("tockd: durable record not loaded", "ns", r.Namespace, "id", r.ID, "err", err)
		return nil
	}
	l.n++
	return nil
}

// forgetFinished drops the engine's copy of k if it has finished (SUCCEEDED, DEAD or
// CANCELLED, kept for Options.Retention), so that the record being loaded takes its
// place: the engine would refuse the record's task at or below the copy's version
// (ErrExists), leaving the record stranded in etcd with no task to end it. The record
// wins because its presence says the copy's end was never confirmed: a confirmed end is
// a delete fenced by the term that accepted it (durability.run), and after it the record
// is gone; or the record is a later submit, accepted by another leader. Running the task
// again loses nothing (at-least-once: the worker was answered STALE_EPOCH or INTERNAL,
// not OK), where deleting the record on the copy's word would make an unconfirmed end
// final, and drop a later submit. A live copy is left alone (the engine refuses the
// record as before). Only a takeover's load calls it, before the term dispatches and
// while requests are refused (NOT_LEADER), so nothing revives the copy between the
// look and the drop. Cost: an engine Get, O(1).
func (l *durLoad) forgetFinished(k taskKey) {
	eng := l.d.engine
	if in, err := eng.Get(k.ns, k.id); err == nil && in.State.Terminal() {
		_ = eng.Drop(k.ns, k.id) // gone meanwhile (its retention ended): nothing to drop
	}
}

func recurring(k task.Kind) bool { return k == task.KindEvery || k == task.KindCron }

// dropDurable removes every durable task from the engine without ending it: its record
// stays in etcd for the next leader. No record is deleted (the tasks are no longer
// durable entries here when the engine forgets them). The waits for the end of a task
// dropped so (an ACK taken just before, whose end the engine never applies now) are
// answered errOtherTerm: the next leader runs the task again.
func (d *durability) dropDurable() {
	d.term.Lock() // no durable submit is entering the engine (durability.term)
	defer d.term.Unlock()
	d.mu.Lock()
	keys := make([]taskKey, 0, len(d.tasks))
	d.dropAllEdges()
	d.cond.Broadcast()
	clear(d.packs) // the next term loads them from etcd
	d.dirty = nil
	var cut []endWaiter
	for k := range d.tasks {
		keys = append(keys, k)
		delete(d.tasks, k)
		if _, queued := d.queued[k]; !queued && !d.deleting[k] {
			cut = append(cut, d.waiters[k]...)
			delete(d.waiters, k)
		}
	}
	d.mu.Unlock()
	for _, w := range cut {
		w.to.ended(w.runID, errOtherTerm)
	}
	for _, k := range keys {
		_ = d.engine.Drop(k.ns, k.id) // absent already: nothing to drop
	}
	if len(keys) > 0 {
		d.log.Info("tockd: durable tasks handed back to etcd", "count", len(keys))
	}
}
