package main

import (
	"context"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// coreTarget is the in-process task engine.
type coreTarget struct {
	e     *task.Engine
	batch bool // submit each batch whole (SubmitBatch: workflows), not task by task
}

// newCoreTarget starts an in-process task engine whose loadgen handler calls h.handle
// and h.ack; with batch, each submit is one Engine.SubmitBatch.
func newCoreTarget(h hooks, batch bool) (*coreTarget, error) {
	// Finished tasks are dropped at once (Retention < 0), as in the engine benchmark:
	// loadgen never reads one back, and a service running a million tasks a second
	// would not keep a million finished records queryable either.
	e, err := task.New(task.WithRetention(-1))
	if err != nil {
		return nil, err
	}
	err = e.Register(taskType, func(_ context.Context, r *task.Run) error {
		h.handle(r.Task.Payload)
		h.ack(r.Task.Payload) // the engine records the success as this returns
		return nil
	})
	if err != nil {
		_ = e.Close(context.Background())
		return nil, err
	}
	return &coreTarget{e: e, batch: batch}, nil
}

// submit submits ts task by task, or as one SubmitBatch (accepted or refused whole).
func (t *coreTarget) submit(_ context.Context, _ int, ts []task.Task) ([]error, error) {
	if t.batch {
		if _, err := t.e.SubmitBatch(ts); err != nil {
			return nil, err
		}
		return make([]error, len(ts)), nil
	}
	errs := make([]error, len(ts))
	for k := range ts {
		_, errs[k] = t.e.Submit(ts[k])
	}
	return errs, nil
}

// settle has nothing to wait for: the engine's runs are its successes.
func (t *coreTarget) settle(context.Context, bool) int64 { return 0 }

func (t *coreTarget) notes() []string { return nil }

func (t *coreTarget) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = t.e.Close(ctx)
}
