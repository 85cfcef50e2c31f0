package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// shardRuns records which worker ran which shard of task "s", attempt by attempt.
type shardRuns struct {
	t       *testing.T
	mu      sync.Mutex
	runs    map[int][]int // shard -> the workers that ran its attempts, in order
	started int           // runs started
	all     chan struct{} // closed once 8 runs have started
}

// workers starts a Go worker of type "sh" on addr per entry of credits, with that many;
// fail, if set, says whether a run fails. The first 8 runs return only once all 8 have
// started, so that all are in flight together whatever the order they were fired in.
func (r *shardRuns) workers(addr string, credits []int, fail func(f *Fire) bool) {
	r.runs, r.all = map[int][]int{}, make(chan struct{})
	for i, n := range credits {
		w := newWorkerT(r.t, addr, WithConcurrency(n))
		if err := w.Handle("sh", func(ctx context.Context, f *Fire) error {
			if f.TaskID != "s" || f.Shards != 8 || f.Shard < 0 || f.Shard >= 8 {
				r.t.Errorf("worker %d: a fire of %q, shard %d of %d; want a shard of 8 of s", i, f.TaskID, f.Shard, f.Shards)
			}
			r.mu.Lock()
			r.runs[f.Shard] = append(r.runs[f.Shard], i)
			if r.started++; r.started == 8 {
				close(r.all)
			}
			r.mu.Unlock()
			select {
			case <-r.all:
			case <-ctx.Done():
				return ctx.Err()
			}
			if fail != nil && fail(f) {
				return errors.New("flaky")
			}
			return nil
		}); err != nil {
			r.t.Fatal(err)
		}
		runWorker(r.t, w) // subscribed before the task is submitted
	}
}

// sharded is task "s" of 8 shards of type "sh".
func sharded() task.Task {
	t := oneShot("s", "sh", 0)
	t.Shards = 8
	t.Retry = task.RetryPolicy{MaxAttempts: 3, InitialBackoff: 5 * time.Millisecond}
	return t
}

// A task of 8 shards over 4 Go workers (real tockd) completes with each shard run once,
// spread over all 4 workers, two each: the first worker's 16 credits would take all 8
// under the least-loaded strategy (the most free credits) if they were not spread.
func TestShardedTaskSpreadsOverWorkers(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	r := &shardRuns{t: t}
	r.workers(s.Addr, []int{16, 4, 4, 4}, nil)
	if _, err := c.Submit(bounded(t), sharded(), protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, "s", task.Succeeded)
	r.mu.Lock()
	defer r.mu.Unlock()
	per := map[int]int{}
	for i := range 8 {
		if len(r.runs[i]) != 1 {
			t.Errorf("shard %d ran %d times (%v), want once", i, len(r.runs[i]), r.runs[i])
			continue
		}
		per[r.runs[i][0]]++
	}
	for w := range 4 {
		if per[w] != 2 {
			t.Errorf("worker %d ran %d shards, want 2 (%v)", w, per[w], r.runs)
		}
	}
	t.Logf("shard -> worker: %v", r.runs)
}

// A shard whose first attempt fails is retried alone: it runs twice, every other shard
// once, and the task succeeds.
func TestShardRetryOverTheWire(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	r := &shardRuns{t: t}
	r.workers(s.Addr, []int{4, 4, 4, 4}, func(f *Fire) bool { return f.Shard == 5 && f.Attempt == 1 })
	if _, err := c.Submit(bounded(t), sharded(), protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, "s", task.Succeeded)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range 8 {
		want := 1
		if i == 5 {
			want = 2
		}
		if len(r.runs[i]) != want {
			t.Errorf("shard %d ran %d times (%v), want %d", i, len(r.runs[i]), r.runs[i], want)
		}
	}
}

// A broadcast reaches every subscribed worker: 3 Go workers of its type (real tockd),
// each runs it once, each as its own shard of 3 (the width is the type's workers: a
// fourth worker, of another type, counts for nothing), and the task succeeds once all 3
// have ACKed.
func TestBroadcastReachesEveryWorker(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	var mu sync.Mutex
	seen := map[int][]int{} // worker -> shard indexes it ran
	for i := range 3 {
		w := newWorkerT(t, s.Addr, WithConcurrency(4))
		if err := w.Handle("bc", func(ctx context.Context, f *Fire) error {
			if f.TaskID != "b" || f.Shards != 3 {
				t.Errorf("worker %d: a fire of %q, shard %d of %d; want one of 3 of b", i, f.TaskID, f.Shard, f.Shards)
			}
			mu.Lock()
			seen[i] = append(seen[i], f.Shard)
			mu.Unlock()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		runWorker(t, w)
	}
	other := newWorkerT(t, s.Addr, WithConcurrency(4)) // of another type: not in the broadcast
	if err := other.Handle("other", func(ctx context.Context, f *Fire) error {
		t.Errorf("the worker of another type ran %q", f.TaskID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	runWorker(t, other)
	b := oneShot("b", "bc", 0)
	b.Broadcast = true
	if _, err := c.Submit(bounded(t), b, protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, "b", task.Succeeded)
	mu.Lock()
	defer mu.Unlock()
	shards := map[int]bool{}
	for i := range 3 {
		if len(seen[i]) != 1 {
			t.Errorf("worker %d ran the broadcast %d times (%v), want once", i, len(seen[i]), seen)
			continue
		}
		shards[seen[i][0]] = true
	}
	if len(shards) != 3 {
		t.Errorf("shards run: %v, want 0, 1 and 2 once each", seen)
	}
}
