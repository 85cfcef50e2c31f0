package client

import (
	"context"
	"fmt"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// BatchHandlerFunc runs many tasks of one type in one call: the runs of a FIRES frame
// (PROTOCOL.md) of its type, in the order they came, or a run alone (a FIRE). It sets
// results[i] to fires[i]'s outcome, as a HandlerFunc's return value: nil (the slot's
// zero) is ACKed, an error NACKed, retryably unless task.IsNonRetryable. A panic NACKs
// every run of the call, retryably. ctx ends at the earliest time to run of the runs
// (the server redelivers each run not reported by its own), or when the connection goes.
// Each run holds its credit until the call returns, so a call holds at most
// Options.Concurrency runs.
type BatchHandlerFunc func(ctx context.Context, fires []*Fire, results []error)

// handler is a task type's handler: one or batch, never both.
type handler struct {
	one   HandlerFunc
	batch BatchHandlerFunc
}

// HandleBatch registers h for taskType, replacing an earlier handler of either kind
// (Handle, HandleBatch). It must be called before Run. Costs: a call for the runs of a
// FIRES makes one context and one result slice, where a HandlerFunc's runs make a
// context each and go to a runner each.
func (w *Worker) HandleBatch(taskType string, h BatchHandlerFunc) error {
	return w.register(taskType, handler{batch: h}, h == nil)
}

// jobOf is the job of the run of a FIRE: the run alone, its Fire and the job's slice in
// one allocation. Reader only.
func (w *Worker) jobOf(pf *protocol.Fire) []*Fire {
	one := new(struct {
		f   Fire
		job [1]*Fire
	})
	fireOf(&one.f, pf)
	one.job[0] = &one.f
	return one.job[:]
}

// jobsOf starts (start) the jobs of the runs of a FIRES, in order: each run of a type
// with a HandlerFunc alone, each row of runs of a type with a batch handler together.
// It allocates their Fires and the jobs' slices once for all the runs. Reader only.
func (w *Worker) jobsOf(runs []protocol.Fire, start func(job []*Fire)) {
	fs := firesOf(runs)
	jobs := make([]*Fire, len(fs))
	for i := range fs {
		jobs[i] = &fs[i]
	}
	for i := 0; i < len(jobs); {
		n := 1
		if w.handlers[jobs[i].Type].batch != nil { // read-only since Run started (Worker.handlers)
			for i+n < len(jobs) && jobs[i+n].Type == jobs[i].Type {
				n++
			}
		}
		start(jobs[i : i+n : i+n])
		i += n
	}
}

// firesOf returns the runs of a FIRES as handlers see them, in one allocation for all:
// the slice lives as long as any of its runs is held (by a handler, the acker or the
// carry set), with the frame's buffer of IDs and payloads (protocol.Fires).
func firesOf(runs []protocol.Fire) []Fire {
	fs := make([]Fire, len(runs))
	for i := range runs {
		fireOf(&fs[i], &runs[i])
	}
	return fs
}

// callBatch runs h over job with a deadline of the earliest of their times to run,
// turning a panic into every run's error; results[i] is job[i]'s outcome.
func callBatch(ctx context.Context, h BatchHandlerFunc, job []*Fire) (results []error) {
	ttr := job[0].TTR
	for _, f := range job[1:] {
		ttr = min(ttr, f.TTR)
	}
	hctx := newFireCtx(ctx, time.Now().Add(ttr))
	defer hctx.release()
	results = make([]error, len(job))
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("client: batch handler for %q panicked: %v", job[0].Type, p)
			for i := range results {
				results[i] = err
			}
		}
	}()
	h(hctx, job, results)
	return results
}
