package tockd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/store"
)

// progressInterval is how often the leader records the next due time of recurring
// durable tasks whose occurrence ended (store.PutNextFenced): at most one write per task
// per interval, all in shared transactions. A failover loses at most this much
// progress: a task then repeats at most one occurrence (or applies its misfire policy).
const progressInterval = 100 * time.Millisecond

// progress records where recurring durable tasks stand, so that the next leader resumes
// their schedules (Engine.Resume) instead of starting them over, and applies each task's
// misfire policy to occurrences that fell due while no node led.
type progress struct {
	mu      sync.Mutex
	pending map[store.Key]int64 // the latest next due time per task, not yet written
	kick    chan struct{}       // capacity 1: pending grew
}

func newProgress() *progress {
	return &progress{pending: map[store.Key]int64{}, kick: make(chan struct{}, 1)}
}

// note records that ns/id's next occurrence is due at due.
func (p *progress) note(ns, id string, due time.Time) {
	p.mu.Lock()
	p.pending[store.Key{Namespace: ns, ID: id}] = due.UnixNano()
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
func (p *progress) run(ctx context.Context, s *Server) {
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
		p.flush(ctx, s)
	}
}

// flush writes the pending progress now, fenced by this node's term (a node that no
// longer leads writes none).
func (p *progress) flush(ctx context.Context, s *Server) {
	p.mu.Lock()
	items := make([]store.NextDue, 0, len(p.pending))
	for k, due := range p.pending {
		items = append(items, store.NextDue{Key: k, Due: due})
	}
	clear(p.pending)
	p.mu.Unlock()
	f := s.fence.Load()
	if len(items) == 0 || f == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	err := s.opts.Store.PutNextFenced(wctx, *f, items)
	s.fencedOut(*f, err)
	if err != nil && !errors.Is(err, store.ErrFenced) {
		s.log.Warn("tockd: progress of recurring durable tasks not recorded; a failover would repeat or misfire their occurrences",
			"count", len(items), "err", err)
	}
}

// onOccurrence notes a recurring durable task's next due time once an occurrence ended
// (it ran, died, or was skipped as a misfire). Called from the engine's event hook.
func (s *Server) onOccurrence(ev task.Event) {
	in, err := s.engine.Get(ev.Namespace, ev.ID)
	if err != nil || in.Task.Version != ev.Version || in.NextRun.IsZero() {
		return
	}
	s.progress.note(ev.Namespace, ev.ID, in.NextRun)
}
