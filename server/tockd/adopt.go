package tockd

import (
	"fmt"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// Runs still running, handed in (ADOPT, PROTOCOL.md "Handing in runs still running"). A
// worker whose connection went while a handler ran keeps that handler running and, on
// its next connection (after its CARRY frames, before SUBSCRIBE), names the run; the
// leader takes it over instead of FIREing it again, under the rule that matches a carried
// outcome (carry.go), and the run is then in flight on the new connection as if FIREd
// on it: its worker's ACK or NACK (naming the run ID and epoch ACKED gave it) ends it,
// and the connection's loss makes it an orphan, as any run in flight.
//
// A run handed in is found where a carried outcome is:
//   - an orphan of this term (router.orphans: same run and epoch): it is in flight again,
//     under its own run ID, its time to run still the one its FIRE started;
//   - held (hold.held: queued unFIREd at a takeover): its timeout starts now, it leaves
//     its waiting queue (marked in router.adoptedWaiting, which drainLocked skips) and is
//     in flight under the new run ID;
//   - pending: the engine has not handed the run to the handler yet; the entry waits in
//     hold.pending (carried.running), and the handler, getting the run, takes it over
//     after recording an exclusive task's run lock (adoptPending) instead of routing it.
//     A parked exclusive task whose lock names the run handed in is unparked, as for a
//     carried outcome: the run taken over is the lock's holder.
//
// An ADOPT spends no credit (the worker counts the runs it hands in against those it
// subscribes with). Refusals are counted with the carried outcomes' (CarryRefusal);
// Stats.Adopted counts the runs taken over. Everything is guarded by router.mu, as in
// carry.go; the engine calls made under it (StartTimeout, Get) follow the lock order.

// adopt answers ADOPT: each run is taken over (ACKED's adopted) or refused (failed,
// UNKNOWN_RUN); the reply waits for the entries pending until their runs reach the
// handler (or carryMaxWait).
func (rr *remoteRuns) adopt(c *conn, m *protocol.Adopt) (protocol.Message, bool) {
	d := rr.router
	b := &ackBatch{c: c, id: m.ID}
	b.outstanding.Store(1) // this goroutine's share, dropped below
	var waiting []*carried
	var refused [NumCarryRefusals]int
	taken := 0
	if refusal := rr.lockHandIn(c, m.ID); refusal != nil {
		return refusal, false
	}
	d.table.state(c) // dropped with c (router.remove), which ends what it holds
	seen := make(map[uint64]bool, len(m.Runs))
	for _, o := range m.Runs {
		co := &carried{o: o, b: b, running: true}
		b.outstanding.Add(1)
		k := taskKey{nsOrDefault(o.Namespace), o.TaskID}
		why, reason := "", CarryTwice
		if seen[o.RunID] {
			why = fmt.Sprintf("run %d is named twice in this ADOPT", o.RunID)
		} else if seen[o.RunID] = true; d.orphans.take(o.RunID, k, o.Epoch, d.epoch) {
			d.adoptLocked(c, o.RunID, k, 0)
			rr.adopted.Add(1)
			b.adopt(o.RunID, o.RunID, d.epoch)
			b.settle()
			taken++
			continue
		} else if hr, ok := d.hold.held[k]; ok {
			f := hr.f
			if !hr.known {
				in, err := rr.engine.Get(k.ns, k.id)
				hr.recurring = err == nil && in.Task.Schedule.Recurring()
			}
			switch {
			case !co.matches(f, hr.recurring):
				why, reason = fmt.Sprintf("task %s/%s waits at version %d attempt %d due %d, not the run handed in", k.ns, k.id, f.Version, f.Attempt, f.Due), CarryChanged
			case !d.adoptWaitingLocked(c, f):
				delete(d.hold.held, k)
				why, reason = fmt.Sprintf("the held run of %s/%s ended meanwhile", k.ns, k.id), CarryEnded
			default:
				delete(d.hold.held, k)
				rr.adopted.Add(1)
				b.adopt(o.RunID, f.RunID, d.epoch)
				b.settle()
				taken++
				continue
			}
		} else if reason, why = rr.pendingLocked(co, k); why == "" {
			waiting = append(waiting, co)
			continue
		}
		d.hold.refuseOutcome(b, o.RunID, reason, "run handed in refused: "+why)
		b.settle()
		refused[reason]++
	}
	holding := d.hold.on
	epoch := d.epoch
	d.mu.Unlock()
	rr.log.Info("tockd: runs handed in still running", "runs", len(m.Runs), "adopted", taken, "pending", len(waiting),
		"holding", holding, "by_reason", refusalCounts(refused))
	rr.awaitPending(waiting, epoch)
	if b.outstanding.Add(-1) > 0 {
		return nil, false // the last entry settled sends the reply
	}
	return b.reply(), false
}

// adoptLocked puts run runID of task k in flight on w, a run handed in: as a FIRE would
// (charge), but spending no credit. shards is the run's shard total (0 or 1: not a
// shard). Requires r.mu.
func (r *router[W]) adoptLocked(w W, runID uint64, k taskKey, shards uint16) {
	r.table.inflightOn(r.table.state(w), runID, k, shards > 1)
}

// adoptWaitingLocked takes over f, a run waiting in its queue, for w (ADOPT): its
// timeout starts, it is in flight on w, and drainLocked drops it from its queue when its
// turn comes, unFIREd. false: the engine no longer holds it. Requires r.mu.
func (r *router[W]) adoptWaitingLocked(w W, f *protocol.Fire) bool {
	if r.eng.StartTimeout(f.RunID) != nil {
		return false
	}
	if r.adoptedWaiting == nil {
		r.adoptedWaiting = map[uint64]bool{}
	}
	r.adoptedWaiting[f.RunID] = true
	r.adoptLocked(w, f.RunID, taskKey{f.Namespace, f.TaskID}, f.Shard.Of)
	return true
}

// adoptPending takes over f, the run a pending ADOPT entry co waited for, which has just
// reached the handler (its timeout running, an exclusive task's run lock recorded): it is
// in flight on co's connection, and the handler defers its outcome to that worker. It
// returns false, the entry refused, when this node stopped leading or the connection is
// gone meanwhile: the run is then routed as any other (but for a park's, above).
func (rr *remoteRuns) adoptPending(f *protocol.Fire, co *carried) bool {
	d := rr.router
	k := taskKey{f.Namespace, f.TaskID}
	d.mu.Lock()
	c := co.b.c
	ok := d.leading && d.table.workers[c] != nil
	if ok {
		f.Epoch = d.epoch
		d.adoptLocked(c, f.RunID, k, f.Shard.Of)
		co.b.adopt(co.o.RunID, f.RunID, d.epoch)
	}
	// An exclusive task's run whose park this entry ended while the run it names still
	// runs, its connection gone meanwhile: it waits as an orphan of that connection
	// until the park would have ended (at least ReconnectGrace), not FIREd at once
	// beside the run still running.
	orphaned := !ok && d.leading && !co.parkedUntil.IsZero()
	if orphaned {
		epoch := d.epoch
		d.orphans[f.RunID] = orphan{key: k, epoch: epoch,
			timer: time.AfterFunc(max(d.reconnectGrace, time.Until(co.parkedUntil)), func() { d.expireOrphan(f.RunID, epoch) })}
	}
	d.mu.Unlock()
	if !ok {
		d.hold.refuseCarried([]*carried{co}, CarryEnded, fmt.Sprintf("run %d: the connection that handed it in closed, or this node stopped leading", co.o.RunID))
		return orphaned
	}
	rr.adopted.Add(1)
	co.b.settle()
	return true
}

// adopt lists run runID of an ADOPT as taken over, under run ID as at epoch.
func (b *ackBatch) adopt(runID, as, epoch uint64) {
	b.mu.Lock()
	b.adopted = append(b.adopted, protocol.Adoption{RunID: runID, As: as, Epoch: epoch})
	b.mu.Unlock()
}

// awaitPending refuses the entries of waiting (CARRY outcomes or ADOPT runs filed in
// hold.pending by pendingLocked) still pending after carryMaxWait, and ends the park of
// an exclusive task whose lock names the run of one (at the term of epoch): its held-back
// run comes due now and meets the entry there.
func (rr *remoteRuns) awaitPending(waiting []*carried, epoch uint64) {
	if len(waiting) == 0 {
		return
	}
	d := rr.router
	time.AfterFunc(carryMaxWait, func() {
		var late []*carried
		d.mu.Lock()
		for _, co := range waiting {
			k := taskKey{nsOrDefault(co.o.Namespace), co.o.TaskID}
			if d.hold.pending[k] == co {
				delete(d.hold.pending, k)
				d.hold.nPending.Add(-1)
				late = append(late, co)
			}
		}
		d.mu.Unlock()
		d.hold.refuseCarried(late, CarryExpired, fmt.Sprintf("its run did not come due within %v", carryMaxWait))
	})
	if rr.replica == nil {
		return // no run locks, so nothing parked
	}
	for _, co := range waiting {
		k := taskKey{nsOrDefault(co.o.Namespace), co.o.TaskID}
		locks := rr.replica.locks
		until, ok := locks.parked.take(epoch, k, co.o.Version, co.o.RunID)
		if !ok {
			continue
		}
		if co.running {
			// The run the lock names still runs: the run the park held back is its
			// continuation, whatever occurrence and attempt the park left it at
			// (takeCarried), and must not start elsewhere before the park's end.
			d.mu.Lock()
			co.parkedUntil = until
			d.mu.Unlock()
		}
		locks.unparkFor(k, co.o.Version, epoch)
	}
}
