package tockd

import (
	"context"

	"github.com/tock-sched/tock/core/task"
)

// replica is what a node does with a Store (server/store, etcd): durable tasks and
// everything that keeps them safe across a failover. It exists only with
// Options.Store (Server.replica is nil without one, and callers test that once), and is
// made of parts with one job each, which reach one another directly:
//   - lead (leader.go): the election, the term and its fence, the step-down, and the
//     leader a follower names in NOT_LEADER; the standby mirror while following
//     (standby.go);
//   - dur (durable.go, submit.go, durload.go): which engine tasks are durable, their
//     records' writes at a submit, load at a takeover and deletes once they end;
//   - committer (commit.go): the shared transactions of concurrent requests' records;
//   - locks (exclusive.go): exclusive tasks' run locks, and the park that waits one out;
//   - progress (progress.go): recurring durable tasks' next due times;
//   - registry (registry.go): the worker registry a takeover's carry grace waits on.
//
// Invariants:
//   - Every write to etcd is fenced by the current term (lead.fence), and one refused as
//     fenced ends that term at once (lead.fencedOut).
//   - Lock order: durability.term, then the engine's locks, then any part's mu or
//     router.mu; no part's mu is held across a store call.
//
// Lifetime: newReplica in New, before the engine (whose event hook is dur.onEvent);
// start once the engine exists; lead.start at the first Serve; drain and stop in
// Shutdown.
type replica struct {
	lead      *leadership
	dur       *durability
	committer *committer
	locks     *runLocks
	progress  *progress
	registry  *registry

	stopBackground context.CancelFunc // ends progress's and the registry's goroutines
	backgroundDone chan struct{}      // closed when both have returned
}

// newReplica makes the parts over opts.Store and wires them to one another and to the
// router; the engine comes later (start).
func newReplica(opts *Options, router *router[*conn]) *replica {
	st, log := opts.Store, opts.Logger
	r := &replica{
		lead:     &leadership{st: st, opts: opts, log: log, router: router, pollEvery: leaderPollInterval},
		dur:      newDurability(st, log),
		progress: newProgress(st, log),
		registry: newRegistry(st, opts, router),
	}
	r.committer = &committer{st: st, lead: r.lead}
	r.locks = &runLocks{st: st, opts: opts, log: log, router: router, lead: r.lead, dur: r.dur, progress: r.progress}
	r.lead.dur, r.lead.registry = r.dur, r.registry
	r.dur.lead, r.dur.locks, r.dur.progress, r.dur.committer = r.lead, r.locks, r.progress, r.committer
	r.progress.lead = r.lead
	return r
}

// start hands the parts the engine and starts the background goroutines: the deleter,
// the progress writer and the registry's. Called once, by New, before any request.
func (r *replica) start(engine *task.Engine) {
	r.dur.engine, r.locks.engine, r.progress.engine = engine, engine, engine
	go r.dur.run()
	ctx, stop := context.WithCancel(context.Background())
	r.stopBackground, r.backgroundDone = stop, make(chan struct{})
	go func() {
		defer close(r.backgroundDone)
		done := make(chan struct{})
		go func() { defer close(done); r.registry.reportWorkers(ctx) }()
		r.progress.run(ctx)
		<-done
	}()
}

// drain is Shutdown's first step with a replica that campaigned: the deletes of tasks
// that finished here go first, while this node's term (their fence) lasts, then the
// pending progress; then it resigns, so that another node can lead while this one
// drains. Each waits until ctx ends at most.
func (r *replica) drain(ctx context.Context) {
	if r.lead.stop == nil {
		return // never served: never campaigned
	}
	r.dur.flush(ctx)
	r.progress.flush(ctx)
	r.lead.resignAndWait(ctx)
}

// stop is Shutdown's last step, after the engine is closed (no event comes later):
// queued deletes are finished, or logged when ctx ends first, and the background
// goroutines end.
func (r *replica) stop(ctx context.Context) {
	r.dur.stop(ctx)
	r.stopBackground()
	<-r.backgroundDone
}
