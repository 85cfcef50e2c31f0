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
	n := 0
	wf := workflowLoad{d: d}
	var stale staleRecords
	_, err = d.st.Records().LoadAll(ctx, func(r store.Record) error {
		if d.loadRecord(r, locked, next, epoch, &wf) {
			n++
		}
		return nil
	}, d.loadHooks(&stale))
	if err != nil {
		wf.release()
		return fmt.Errorf("tockd: load durable tasks: %w", err)
	}
	n -= wf.enter()
	d.log.Info("tockd: durable tasks loaded from etcd", "count", n)
	d.endStale(ctx, &stale)
	return nil
}

// staleRecords are what a load passed over (store.LoadHooks.Stale): records of their
// own that a higher version in a pack replaced, to delete; the pack entries go to their
// packs' bitmaps at once.
type staleRecords struct{ own []store.Versioned }

// loadHooks are a takeover's load hooks: every pack read joins the term's packs (its
// done bitmap as stored), a stale pack entry gets its done bit, a stale record of its own
// goes to stale.own. A pack that is done once its stale entries are (none of it loads)
// is marked by the deleter, which deletes it.
func (d *durability) loadHooks(stale *staleRecords) store.LoadHooks {
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
			stale.own = append(stale.own, store.Versioned{Key: store.Key{Namespace: r.Namespace, ID: r.ID}, Version: r.Version})
		},
	}
}

// endStale deletes the stale records of their own, fenced by the term, once the load is
// done; a failure is logged (the next load passes them over again).
func (d *durability) endStale(ctx context.Context, stale *staleRecords) {
	f := d.lead.fence.Load()
	if len(stale.own) == 0 || f == nil {
		return
	}
	err := d.st.Records().DeleteBatchFenced(ctx, *f, stale.own)
	d.lead.fencedOut(*f, err)
	if err != nil {
		d.log.Warn("tockd: records replaced by a later version in a pack NOT deleted; the next load passes them over again",
			"count", len(stale.own), "err", err)
	}
}

// loadMirrored is loadDurable from a standby's mirror (its records of their own and its
// packs): no read of etcd but the deletes of stale records.
func (d *durability) loadMirrored(ctx context.Context, records []store.Record, packs *store.PackSet, locked map[store.Key]bool, next map[store.Key]store.NextDue, epoch uint64) {
	d.forgetRefused()
	n := 0
	wf := workflowLoad{d: d}
	var stale staleRecords
	_ = packs.Merge(records, func(r store.Record) error {
		if d.loadRecord(r, locked, next, epoch, &wf) {
			n++
		}
		return nil
	}, d.loadHooks(&stale))
	n -= wf.enter()
	d.log.Info("tockd: durable tasks loaded from the standby mirror", "count", n)
	d.endStale(ctx, &stale)
}

// loadRecord submits one record to the engine (see loadDurable), in the place of a
// finished copy of its task the engine still holds (forgetFinished); false if it was not.
// A workflow member's (a task with parents) is claimed and kept in wf instead, for
// workflowLoad.enter, once every other record is in.
func (d *durability) loadRecord(r store.Record, locked map[store.Key]bool, next map[store.Key]store.NextDue, epoch uint64, wf *workflowLoad) bool {
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
			if nd, ok := next[sk]; ok && nd.Version == t.Version {
				nextDue = time.Unix(0, nd.Due)
			}
			if e.fp, err = printOf(w, r.Body, true); err == nil {
				_, _, err = d.claim(k, e)
			}
			if err == nil && t.DependsOn != nil {
				d.forgetFinished(k)
				wf.add(t, k, e)
				return true
			}
			if err == nil {
				d.forgetFinished(k)
				var in task.Info
				if t.Exclusive && locked[sk] {
					in, err = d.locks.parkLocked(t, nextDue, epoch)
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
		return false
	}
	return true
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
func (d *durability) forgetFinished(k taskKey) {
	if in, err := d.engine.Get(k.ns, k.id); err == nil && in.State.Terminal() {
		_ = d.engine.Drop(k.ns, k.id) // gone meanwhile (its retention ended): nothing to drop
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
