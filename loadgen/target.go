package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tock-sched/tock/core/task"
)

// target is a system that a run submits its tasks to and records the runs of: the
// in-process engine (target_core.go), a tockd (target_server.go) or the peer beanstalkd
// (beanstalkd.go). run calls submit from its producers, settle once the runs are in,
// notes for the summary, and stop at the end.
type target interface {
	// submit submits one batch: tasks lo, lo+1, ... of the run, as submitter says.
	submit(ctx context.Context, lo int, ts []task.Task) ([]error, error)
	// settle is called once the wait for the runs has ended (timedOut: it gave up); it
	// returns how many tasks ran without the target confirming their end.
	settle(ctx context.Context, timedOut bool) (unconfirmed int64)
	// notes are the summary's remarks on how the target was driven (none: nil).
	notes() []string
	// stop releases what the target holds: connections, workers, a process it started.
	stop()
}

// hooks are what a target calls for each run of a task: handle with its payload as it
// runs, then ack, with the same payload, once the target has the run's success (its end).
type hooks struct {
	handle func(payload []byte)
	ack    func(payload []byte)
}

// newTarget starts c.target for a run tagged runTag (its tasks' payloads carry the tag;
// rec records their runs).
func newTarget(ctx context.Context, c config, clk clock, runTag uint64, rec *Recorder, h hooks) (target, error) {
	switch c.target {
	case "core":
		return newCoreTarget(h, c.dag.on())
	case "server":
		return newServerTarget(ctx, c, runTag, rec, h)
	case "beanstalkd":
		return newBeanstalkdTarget(ctx, c, clk, strconv.FormatUint(runTag, 36), h.handle, h.ack)
	}
	return nil, fmt.Errorf("unknown target %q", c.target)
}

// producerRange returns the tasks [lo, hi) producer p submits: of the n units (tasks,
// or with -dag workflows), those from p*n/P on.
func producerRange(c config, p int) (lo, hi int) {
	u := c.dag.unit()
	n := c.tasks / u
	return p * n / c.producers * u, (p + 1) * n / c.producers * u
}

// producerOf returns the producer that submits task lo (producerRange's inverse).
func producerOf(c config, lo int) int {
	u := c.dag.unit()
	n, g := c.tasks/u, lo/u
	p := g * c.producers / n
	for p+1 < c.producers && (p+1)*n/c.producers <= g {
		p++
	}
	for p > 0 && p*n/c.producers > g {
		p--
	}
	return p
}
