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
	_, err = d.st.Records().Load(ctx, func(r store.Record) error {
		if d.loadRecord(r, locked, next, epoch, &wf) {
			n++
		}
		return nil
	})
	if err != nil {
		wf.release()
		return fmt.Errorf("tockd: load durable tasks: %w", err)
	}
	n -= wf.enter()
	d.log.Info("tockd: durable tasks loaded from etcd", "count", n)
	return nil
}

// loadMirrored is loadDurable from a standby's mirror: no read of etcd.
func (d *durability) loadMirrored(records []store.Record, locked map[store.Key]bool, next map[store.Key]store.NextDue, epoch uint64) {
	d.forgetRefused()
	n := 0
	wf := workflowLoad{d: d}
	for _, r := range records {
		if d.loadRecord(r, locked, next, epoch, &wf) {
			n++
		}
	}
	n -= wf.enter()
	d.log.Info("tockd: durable tasks loaded from the standby mirror", "count", n)
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
				term: d.lead.fence.Load()}
			sk := store.Key{Namespace: t.Namespace, ID: t.ID}
			// A recurring task continues where its last leader was, if that progress is of
			// this version (a replacement's schedule is its own).
			var nextDue time.Time
			if nd, ok := next[sk]; ok && nd.Version == t.Version {
				nextDue = time.Unix(0, nd.Due)
			}
			if e.fp, err = printOf(w, r.Body); err == nil {
				_, err = d.claim(k, e)
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
