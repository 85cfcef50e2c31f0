package tockd

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/store"
)

// Exclusive durable tasks: no two runs of one overlap, even across a failover.
//   - Before a run of an exclusive durable task is FIREd, the leader records a run lock
//     in etcd (store.Locks.PutFenced: <prefix>locks/<ns>/<id> = run ID, not bound to any
//     lease, written only while this node's term holds), and the FIRE waits for it; a
//     failed write fails the attempt, retryably, and a fenced one also ends the term
//     (leader.go: fencedOut), so a node deposed while it stalled starts no run.
//   - When the run ends (ACK, NACK, time to run passed, cancel), the lock is deleted,
//     only if it still names that run and the term holds (store.Locks.DeleteFenced), in
//     the background.
//   - A leader elected while a lock exists cannot know whether that run still executes
//     on some worker: it puts the task in its engine at once, but holds its first run
//     back one time to run (the task's timeout, or DefaultTTR) after taking over
//     (parkLocked, Engine.ContinueNotBefore). The old run's worker was told the same time
//     to run from the moment of its FIRE, which came before the takeover, so by then it
//     has stopped, if it honours its ttr (the Go Worker's context does). Meanwhile the
//     task is the engine's like any other: GET shows it PENDING (next_run the occurrence
//     it holds back; occurrences due during the wait get its misfire policy), CANCEL
//     ends it, and its lock, rewritten to name this term (parkMarker), goes with it.
//     A worker carrying the outcome of the run the old lock named (CARRY: same version
//     and attempt) ends the wait at once: that run has ended (unparkFor, carry.go).
//   - A lock goes with its task's record (store.DeleteBatchFenced deletes both, in one
//     transaction), and when a non-exclusive version replaces an exclusive one (whose
//     orphaned run's lock, or parked lock, no run end deletes: dropReplacedLock), so no
//     lock outlives its task.
//   - Within one leader the engine never runs two attempts of a task at once.
//
// Unlike every other request path, the engine handler waits for etcd here: a run of an
// exclusive durable task is FIREd only once its lock is written (lockRun, bounded by
// storeOpTimeout), on the engine's worker goroutine.

// runLocks is the replica's run locks of exclusive durable tasks: written before a run
// is FIREd, deleted when it ends, read at a takeover, and waited out (parked) by a new
// leader. Its writes are fenced by the term (leadership.fence) and a refusal ends the
// term (fencedOut). Locking: parked has its own mu; the rest is set by newReplica and
// replica.start and immutable after. unparkFor holds durability.term for reading, then
// takes the engine's locks: the documented order.
type runLocks struct {
	st     *store.Store
	opts   *Options
	log    *slog.Logger
	engine *task.Engine // set by replica.start
	router *router[*conn]
	lead   *leadership
	dur    *durability
	// progress notes the schedule of a recurring task resumed after its park.
	progress *progress
	parked   parkedRuns // exclusive tasks parked at this term's takeover, with the run each waits out
}

// lockRun records run runID of ns/id as dispatched, fenced by this node's term (a node
// that no longer leads, or whose term etcd has ended, writes nothing and steps down);
// bounded by storeOpTimeout.
func (rl *runLocks) lockRun(ns, id string, runID uint64) error {
	f := rl.lead.fence.Load()
	if f == nil {
		return fmt.Errorf("tockd: exclusive task %s/%s: record the run lock: %w", ns, id, store.ErrFenced)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	if err := rl.st.Locks().PutFenced(ctx, *f, ns, id, runID); err != nil {
		rl.lead.fencedOut(*f, err)
		return fmt.Errorf("tockd: exclusive task %s/%s: record the run lock: %w", ns, id, err)
	}
	return nil
}

// unlockRun deletes the run lock of an exclusive durable task whose run ended (an engine
// event), fenced by this node's term, in the background: nothing waits for it, and a
// lock left behind by a failure only delays that task's first run after a failover.
func (rl *runLocks) unlockRun(ev task.Event) {
	switch ev.Kind {
	case task.EventSucceeded, task.EventRetrying, task.EventDead, task.EventCancelled:
	default:
		return // TimedOut is followed by Retrying or Dead
	}
	f := rl.lead.fence.Load()
	if f == nil {
		return // not leading: the lock stays for the next leader to wait out
	}
	run := ev.RunID
	if run == 0 {
		if ev.Kind != task.EventCancelled {
			return
		}
		// Cancelled with no run of this term: if it was parked at the takeover, its lock
		// names the term (parkLocked); otherwise the compare deletes nothing.
		run = parkMarker(uint64(f.Rev))
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
		defer cancel()
		if err := rl.st.Locks().DeleteFenced(ctx, *f, ev.Namespace, ev.ID, run); err != nil {
			rl.lead.fencedOut(*f, err)
			rl.log.Warn("tockd: run lock of an exclusive task not deleted; its first run after a failover waits a time to run",
				"ns", ev.Namespace, "id", ev.ID, "run", run, "err", err)
		}
	}()
}

// lockRevision reads etcd's revision now, for dropReplacedLock (bounded by
// storeOpTimeout); 0 if the read failed: no lock is then deleted.
func (rl *runLocks) lockRevision() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	rev, err := rl.st.Revision(ctx)
	if err != nil {
		rl.log.Warn("tockd: run lock of a replaced exclusive version not deleted; it stays until the task's record goes",
			"err", err)
		return 0
	}
	return rev
}

// dropReplacedLock deletes, in the background and fenced by f, the run lock of k if it
// was written at or below revision before: a non-exclusive version replaced an
// exclusive one, whose lock no run end deletes (the engine ignores a replaced run's
// result). A later exclusive version's run writes its lock after before, and keeps it.
func (rl *runLocks) dropReplacedLock(f *store.Fence, k taskKey, before int64) {
	if before == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
		defer cancel()
		if err := rl.st.Locks().DeleteBeforeFenced(ctx, *f, k.ns, k.id, before); err != nil {
			rl.lead.fencedOut(*f, err)
			rl.log.Warn("tockd: run lock of a replaced exclusive version not deleted; it stays until the task's record goes",
				"ns", k.ns, "id", k.id, "err", err)
		}
	}()
}

// ttrOf is the time to run a FIRE of t announces.
func (rl *runLocks) ttrOf(t task.Task) time.Duration {
	if t.Timeout > 0 {
		return t.Timeout
	}
	return rl.opts.DefaultTTR
}

// parkLocked submits t (resumed at nextDue, if set), an exclusive task whose last run
// may still execute somewhere, to the engine at once, with its first run held back one
// time to run from now (Engine.ContinueNotBefore): every request finds it meanwhile (GET
// shows it PENDING, CANCEL ends it). Its run lock is first rewritten to name this term
// (parkMarker), so that a CANCEL during the wait deletes exactly that lock (unlockRun);
// if the rewrite fails, the old lock stays (a CANCEL then leaves it behind, logged).
//
// The run the old lock named is remembered (runLocks.parked), so that a worker that carries
// that run's outcome (carry.go) ends the park: the run has ended (unpark).
func (rl *runLocks) parkLocked(t task.Task, nextDue time.Time, epoch uint64) (task.Info, error) {
	wait := rl.ttrOf(t)
	rl.log.Info("tockd: exclusive task with a run in flight at the takeover: its first run waits one time to run",
		"ns", t.Namespace, "id", t.ID, "wait", wait)
	prev, err := rl.swapLock(t.Namespace, t.ID, parkMarker(epoch))
	if err != nil {
		rl.log.Warn("tockd: run lock of a waiting exclusive task not taken over; a CANCEL meanwhile would leave it in etcd", "err", err)
	}
	until := time.Now().Add(wait)
	in, err := rl.engine.ContinueNotBefore(t, nextDue, until)
	if err == nil && prev != 0 {
		rl.parked.put(epoch, taskKey{t.Namespace, t.ID}, parkedRun{version: t.Version, run: prev, until: until})
	}
	return in, err
}

// swapLock is lockRun that returns the run the lock named before (store.Locks.SwapFenced).
func (rl *runLocks) swapLock(ns, id string, runID uint64) (uint64, error) {
	f := rl.lead.fence.Load()
	if f == nil {
		return 0, fmt.Errorf("tockd: exclusive task %s/%s: record the run lock: %w", ns, id, store.ErrFenced)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	prev, err := rl.st.Locks().SwapFenced(ctx, *f, ns, id, runID)
	if err != nil {
		rl.lead.fencedOut(*f, err)
		return 0, fmt.Errorf("tockd: exclusive task %s/%s: record the run lock: %w", ns, id, err)
	}
	return prev, nil
}

// parkedRun is the run an exclusive task parked at a takeover waits out: the run ID its
// lock named, at the task version loaded, and when the park ends.
type parkedRun struct {
	version, run uint64
	until        time.Time
}

// parkedRuns is the parked tasks of one term (the epoch of the last takeover that
// parked one); an entry goes when a carried outcome ends its park. Guarded by mu.
type parkedRuns struct {
	mu    sync.Mutex
	epoch uint64
	runs  map[taskKey]parkedRun
}

// put records k's parked run for the term of epoch (forgetting an earlier term's).
func (p *parkedRuns) put(epoch uint64, k taskKey, r parkedRun) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch != epoch || p.runs == nil {
		p.epoch, p.runs = epoch, map[taskKey]parkedRun{}
	}
	p.runs[k] = r
}

// take removes and reports whether k is parked in the term of epoch waiting out run at
// version v, and when its park would have ended.
func (p *parkedRuns) take(epoch uint64, k taskKey, v, run uint64) (until time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.runs[k]
	if !ok || p.epoch != epoch || r.version != v || r.run != run {
		return time.Time{}, false
	}
	delete(p.runs, k)
	return r.until, true
}

// unparkFor ends the park of k at version in the term of epoch at once: a worker carried
// the outcome of the run it waited out, so that run has ended. The task is dropped and
// resumed at the same version with no hold, so that its held-back run reaches the
// handler now (where the carried outcome, filed pending, ends it: carry.go); its lock,
// naming this term, is deleted (the run the handler ends holds none of its own). A task
// cancelled, replaced or started meanwhile is left alone (the outcome's wait ends as
// before). Between the Drop and the Continue a request about the task finds nothing: a
// window of two engine calls.
func (rl *runLocks) unparkFor(k taskKey, version, epoch uint64) {
	d := rl.dur
	d.term.RLock() // no step-down drops the durable tasks between the Drop and the Continue
	defer d.term.RUnlock()
	if leading, e := rl.router.leadership(); !leading || e != epoch {
		return
	}
	in, err := rl.engine.Get(k.ns, k.id)
	if err != nil || in.Task.Version != version || in.State != task.Pending {
		return // cancelled, replaced or run meanwhile: the outcome's wait ends as before
	}
	if err := rl.engine.Drop(k.ns, k.id); err != nil {
		return
	}
	var nextDue time.Time
	if in.Task.Schedule.Recurring() {
		nextDue = in.NextRun
	}
	resumed, err := rl.engine.Continue(in.Task, nextDue)
	if err != nil {
		rl.log.Error("tockd: a parked exclusive task could not be resumed after its carried outcome; it is gone from this leader's engine (its record stays for the next leader)",
			"ns", k.ns, "id", k.id, "err", err)
		return
	}
	rl.progress.noteArmed(resumed)
	if f := rl.lead.fence.Load(); f != nil {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
			defer cancel()
			if err := rl.st.Locks().DeleteFenced(ctx, *f, k.ns, k.id, parkMarker(epoch)); err != nil {
				rl.lead.fencedOut(*f, err)
				rl.log.Warn("tockd: run lock of an unparked exclusive task not deleted", "ns", k.ns, "id", k.id, "err", err)
			}
		}()
	}
}

// parkMarker is the run lock's value for tasks parked at the takeover of the term with
// this epoch: a term's epoch, not a run ID (a run ID equals it with a chance of 2^-64).
func parkMarker(epoch uint64) uint64 { return epoch }

// runLocks reads the run locks (for the load at election).
func (rl *runLocks) runLocks(ctx context.Context) (map[store.Key]bool, error) {
	return rl.st.Locks().Held(ctx)
}
