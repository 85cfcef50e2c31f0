package tockd

import (
	"context"
	"fmt"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/store"
)

// Exclusive durable tasks: no two runs of one overlap, even across a failover.
//   - Before a run of an exclusive durable task is FIREd, the leader records a run lock
//     in etcd (store.PutLockFenced: <prefix>locks/<ns>/<id> = run ID, not bound to any
//     lease, written only while this node's term holds), and the FIRE waits for it; a
//     failed write fails the attempt, retryably, and a fenced one also ends the term
//     (leader.go: fencedOut), so a node deposed while it stalled starts no run.
//   - When the run ends (ACK, NACK, time to run passed, cancel), the lock is deleted,
//     only if it still names that run and the term holds (store.DeleteLockFenced), in
//     the background.
//   - A leader elected while a lock exists cannot know whether that run still executes
//     on some worker: it puts the task in its engine at once, but holds its first run
//     back one time to run (the task's timeout, or DefaultTTR) after taking over
//     (parkLocked, Engine.ResumeNotBefore). The old run's worker was told the same time
//     to run from the moment of its FIRE, which came before the takeover, so by then it
//     has stopped, if it honours its ttr (the Go Worker's context does). Meanwhile the
//     task is the engine's like any other: GET shows it PENDING (next_run the occurrence
//     it holds back; occurrences due during the wait get its misfire policy), CANCEL
//     ends it, and its lock, rewritten to name this term (parkMarker), goes with it.
//   - A lock goes with its task's record (store.DeleteBatchFenced deletes both, in one
//     transaction), and when a non-exclusive version replaces an exclusive one (whose
//     orphaned run's lock, or parked lock, no run end deletes: dropReplacedLock), so no
//     lock outlives its task.
//   - Within one leader the engine never runs two attempts of a task at once.

// lockRun records run runID of ns/id as dispatched, fenced by this node's term (a node
// that no longer leads, or whose term etcd has ended, writes nothing and steps down);
// bounded by storeOpTimeout.
func (s *Server) lockRun(ns, id string, runID uint64) error {
	f := s.fence.Load()
	if f == nil {
		return fmt.Errorf("tockd: exclusive task %s/%s: record the run lock: %w", ns, id, store.ErrFenced)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	if err := s.opts.Store.PutLockFenced(ctx, *f, ns, id, runID); err != nil {
		s.fencedOut(*f, err)
		return fmt.Errorf("tockd: exclusive task %s/%s: record the run lock: %w", ns, id, err)
	}
	return nil
}

// unlockRun deletes the run lock of an exclusive durable task whose run ended (an engine
// event), fenced by this node's term, in the background: nothing waits for it, and a
// lock left behind by a failure only delays that task's first run after a failover.
func (s *Server) unlockRun(ev task.Event) {
	switch ev.Kind {
	case task.EventSucceeded, task.EventRetrying, task.EventDead, task.EventCancelled:
	default:
		return // TimedOut is followed by Retrying or Dead
	}
	f := s.fence.Load()
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
		if err := s.opts.Store.DeleteLockFenced(ctx, *f, ev.Namespace, ev.ID, run); err != nil {
			s.fencedOut(*f, err)
			s.log.Warn("tockd: run lock of an exclusive task not deleted; its first run after a failover waits a time to run",
				"ns", ev.Namespace, "id", ev.ID, "run", run, "err", err)
		}
	}()
}

// lockRevision reads etcd's revision now, for dropReplacedLock (bounded by
// storeOpTimeout); 0 if the read failed: no lock is then deleted.
func (s *Server) lockRevision() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	rev, err := s.opts.Store.Revision(ctx)
	if err != nil {
		s.log.Warn("tockd: run lock of a replaced exclusive version not deleted; it stays until the task's record goes",
			"err", err)
		return 0
	}
	return rev
}

// dropReplacedLock deletes, in the background and fenced by f, the run lock of k if it
// was written at or below revision before: a non-exclusive version replaced an
// exclusive one, whose lock no run end deletes (the engine ignores a replaced run's
// result). A later exclusive version's run writes its lock after before, and keeps it.
func (s *Server) dropReplacedLock(f *store.Fence, k taskKey, before int64) {
	if before == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
		defer cancel()
		if err := s.opts.Store.DeleteLockBeforeFenced(ctx, *f, k.ns, k.id, before); err != nil {
			s.fencedOut(*f, err)
			s.log.Warn("tockd: run lock of a replaced exclusive version not deleted; it stays until the task's record goes",
				"ns", k.ns, "id", k.id, "err", err)
		}
	}()
}

// ttrOf is the time to run a FIRE of t announces.
func (s *Server) ttrOf(t task.Task) time.Duration {
	if t.Timeout > 0 {
		return t.Timeout
	}
	return s.opts.DefaultTTR
}

// parkLocked submits t (resumed at nextDue, if set), an exclusive task whose last run
// may still execute somewhere, to the engine at once, with its first run held back one
// time to run from now (Engine.ResumeNotBefore): every request finds it meanwhile (GET
// shows it PENDING, CANCEL ends it). Its run lock is first rewritten to name this term
// (parkMarker), so that a CANCEL during the wait deletes exactly that lock (unlockRun);
// if the rewrite fails, the old lock stays (a CANCEL then leaves it behind, logged).
func (s *Server) parkLocked(t task.Task, nextDue time.Time, epoch uint64) (task.Info, error) {
	wait := s.ttrOf(t)
	s.log.Info("tockd: exclusive task with a run in flight at the takeover: its first run waits one time to run",
		"ns", t.Namespace, "id", t.ID, "wait", wait)
	if err := s.lockRun(t.Namespace, t.ID, parkMarker(epoch)); err != nil {
		s.log.Warn("tockd: run lock of a waiting exclusive task not taken over; a CANCEL meanwhile would leave it in etcd", "err", err)
	}
	return s.engine.ResumeNotBefore(t, nextDue, time.Now().Add(wait))
}

// parkMarker is the run lock's value for tasks parked at the takeover of the term with
// this epoch: a term's epoch, not a run ID (a run ID equals it with a chance of 2^-64).
func parkMarker(epoch uint64) uint64 { return epoch }

// runLocks reads the run locks (for the load at election).
func (s *Server) runLocks(ctx context.Context) (map[store.Key]bool, error) {
	return s.opts.Store.Locks(ctx)
}
