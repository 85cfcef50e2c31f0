package tockd

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/store"
)

// progressInterval is how often the leader records the next due time of recurring
// durable tasks whose next occurrence was armed (store.Progress.PutFenced): at most one write
// per task per interval, all in shared transactions. A failover loses at most this much
// progress: a task armed within it then repeats at most one occurrence (or applies its
// misfire policy), or, if it was just submitted, starts its schedule over.
const progressInterval = 100 * time.Millisecond

// progress records where recurring durable tasks stand, so that the next leader resumes
// their schedules (Engine.Continue) instead of starting them over, and applies each task's
// misfire policy to occurrences that fell due while no node led. An entry is the armed
// occurrence's due time and the task version it belongs to: the next leader ignores one
// of another version than the record it loads, so a replacement never inherits its
// predecessor's schedule (and a recurring replacement's own entry overwrites it).
//
// Locking: flushing, then mu; mu guards pending and is never held across a store call.
// Its references are set by newReplica and replica.start and immutable after.
type progress struct {
	st     *store.Store
	log    *slog.Logger
	engine *task.Engine // set by replica.start
	lead   *leadership  // the term that fences its writes

	// flushing is held for a whole flush, so that Shutdown's flush returns only once a
	// background flush in flight has written what it took (before the node resigns).
	flushing sync.Mutex
	mu       sync.Mutex
	pending  map[store.Key]store.NextDue // the latest armed due time per task, not yet written; guarded by mu
	kick     chan struct{}               // capacity 1: pending grew
}

func newProgress(st *store.Store, log *slog.Logger) *progress {
	return &progress{st: st, log: log, pending: map[store.Key]store.NextDue{}, kick: make(chan struct{}, 1)}
}

// note records that version v of ns/id has its next occurrence armed at due. An entry
// of a later version already pending is kept (a late event of a replaced version).
func (p *progress) note(ns, id string, v uint64, due time.Time) {
	k := store.Key{Namespace: ns, ID: id}
	p.mu.Lock()
	if old, ok := p.pending[k]; !ok || old.Version <= v {
		p.pending[k] = store.NextDue{Key: k, Version: v, Due: due.UnixNano()}
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// forget drops ns/id's unwritten progress (the task ended: its record goes).
func (p *progress) forget(ns, id string) {
	p.mu.Lock()
	delete(p.pending, store.Key{Namespace: ns, ID: id})
	p.mu.Unlock()
}

// run writes pending progress every progressInterval until ctx ends.
func (p *progress) run(ctx context.Context) {
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C: // at most one write per interval
		}
		p.flush(ctx)
	}
}

// flush writes the pending progress now, fenced by this node's term (a node that no
// longer leads writes none; one whose term etcd ended steps down: fencedOut), after any
// flush in flight.
func (p *progress) flush(ctx context.Context) {
	p.flushing.Lock()
	defer p.flushing.Unlock()
	p.mu.Lock()
	items := make([]store.NextDue, 0, len(p.pending))
	for _, nd := range p.pending {
		items = append(items, nd)
	}
	clear(p.pending)
	p.mu.Unlock()
	f := p.lead.fence.Load()
	if len(items) == 0 || f == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	err := p.st.Progress().PutFenced(wctx, *f, items)
	p.lead.fencedOut(*f, err)
	if err != nil && !errors.Is(err, store.ErrFenced) {
		p.log.Warn("tockd: progress of recurring durable tasks not recorded; a failover would repeat or misfire their occurrences",
			"count", len(items), "err", err)
	}
}

// noteArmed notes the first occurrence of a recurring durable task the engine just
// accepted (in: Submit's or Continue's answer, as accepted), so that a failover before its
// first occurrence ends keeps its schedule too. A one-shot task has no progress.
func (p *progress) noteArmed(in task.Info) {
	if recurring(in.Task.Schedule.Kind) && !in.NextRun.IsZero() {
		p.note(in.Task.Namespace, in.Task.ID, in.Task.Version, in.NextRun)
	}
}

// onArmed notes a recurring durable task's next due time once an occurrence ended (it
// ran, died, or was skipped as a misfire): its successor is armed. Called from the
// engine's event hook.
func (p *progress) onArmed(ev task.Event) {
	in, err := p.engine.Get(ev.Namespace, ev.ID)
	if err != nil || in.Task.Version != ev.Version || in.NextRun.IsZero() {
		return // replaced, gone, or already due again: a later event notes it
	}
	p.note(ev.Namespace, ev.ID, ev.Version, in.NextRun)
}
