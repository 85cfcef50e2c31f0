package task

import (
	"context"
	"runtime"
	"testing"
)

// TestRunsAllocateNothingForLimits: a task submitted, run and dropped allocates nothing
// without limits (the record is reused), and a limit that lets it through at once adds
// none: a key in use shares the engine's Concurrency value.
func TestRunsAllocateNothingForLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		key    bool
		rate   bool
		allocs float64
	}{
		{"limits=none", false, false, 0},
		{"limits=key", true, false, 0},
		{"limits=rate", false, true, 0},
		{"limits=key+rate", true, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRealEngine(t, WithWorkers(1), WithRetention(-1))
			done := make(chan struct{}, 1)
			e.Register("x", func(context.Context, *Run) error { done <- struct{}{}; return nil })
			if tc.rate {
				if err := e.SetRateLimit("x", MaxRate, MaxBurst); err != nil {
					t.Fatal(err)
				}
			}
			task := Task{ID: "t", Type: "x", Schedule: After(0)}
			if tc.key {
				task.Concurrency = &Concurrency{Key: "k", Limit: 4}
				// Another record holds the key, so that the limiter outlives each run.
				if _, err := e.Submit(Task{ID: "holder", Type: "x", Schedule: After(1 << 40), Concurrency: task.Concurrency}); err != nil {
					t.Fatal(err)
				}
			}
			run := func() {
				if _, err := e.Submit(task); err != nil {
					t.Fatal(err)
				}
				<-done
				waitRemoved(e, "t")
			}
			run() // warm: the record pool, the queue
			if n := testing.AllocsPerRun(200, run); n > tc.allocs {
				t.Errorf("submit + run + drop: %v allocs; want at most %v", n, tc.allocs)
			}
		})
	}
}

// waitRemoved spins until the task's record is gone (dropped after its run, which is
// microseconds away), without allocating on the way there.
func waitRemoved(e *Engine, id string) {
	h := keyHash(DefaultNamespace, id)
	sh := e.shardOf(h)
	for {
		sh.mu.Lock()
		gone := sh.index.find(sh.slots, h, DefaultNamespace, id) == nil
		sh.mu.Unlock()
		if gone {
			return
		}
		runtime.Gosched()
	}
}
