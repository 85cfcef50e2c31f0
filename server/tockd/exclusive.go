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
//     on some worker: it submits the task only one time to run (the task's timeout, or
//     DefaultTTR) after taking over. The old run's worker was told the same time to run
//     from the moment of its FIRE, which came before the takeover, so by then it has
//     stopped, if it honours its ttr (the Go Worker's context does).
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
	if ev.RunID == 0 {
		return
	}
	switch ev.Kind {
	case task.EventSucceeded, task.EventRetrying, task.EventDead, task.EventCancelled:
	default:
		return // TimedOut is followed by Retrying or Dead
	}
	f := s.fence.Load()
	if f == nil {
		return // not leading: the lock stays for the next leader to wait out
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
		defer cancel()
		if err := s.opts.Store.DeleteLockFenced(ctx, *f, ev.Namespace, ev.ID, ev.RunID); err != nil {
			s.fencedOut(*f, err)
			s.log.Warn("tockd: run lock of an exclusive task not deleted; its first run after a failover waits a time to run",
				"ns", ev.Namespace, "id", ev.ID, "run", ev.RunID, "err", err)
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

// submitAfterLockedRun submits t (resumed at nextDue, if set), an exclusive task whose
// last run may still execute somewhere, one time to run from now, if this node still
// leads at epoch then.
func (s *Server) submitAfterLockedRun(t task.Task, nextDue time.Time, k taskKey, e durEntry, epoch uint64) {
	wait := s.ttrOf(t)
	s.log.Info("tockd: exclusive task with a run in flight at the takeover: waiting one time to run",
		"ns", t.Namespace, "id", t.ID, "wait", wait)
	time.AfterFunc(wait, func() {
		if leading, now := s.leadership(); !leading || now != epoch {
			return // stepped down meanwhile: the next leader loads it
		}
		in, err := s.engine.Resume(t, nextDue)
		if err != nil {
			s.dur.release(k, e)
			s.log.Error("tockd: exclusive task not submitted after waiting out its last run", "ns", t.Namespace, "id", t.ID, "err", err)
			return
		}
		s.noteArmed(in)
	})
}

// runLocks reads the run locks (for the load at election).
func (s *Server) runLocks(ctx context.Context) (map[store.Key]bool, error) {
	return s.opts.Store.Locks(ctx)
}
