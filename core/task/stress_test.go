package task

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentSubmitCancelReplace drives the engine from several goroutines at once:
// submits of one-shot tasks (some failing a few times first), cancels, and replacements
// with a higher version, while the fake clock moves. At the end every task's final
// version must have reached exactly one terminal outcome, consistent with what the
// engine reported:
//   - SUCCEEDED tasks ran their final version successfully exactly once;
//   - DEAD tasks are in the dead-letter queue;
//   - CANCELLED tasks were cancelled by a Cancel that returned nil;
//   - a replaced version's runs never count for its replacement.
func TestConcurrentSubmitCancelReplace(t *testing.T) {
	h := newHarness(t, WithWorkers(4), WithRetention(time.Hour))
	const (
		goroutines = 4
		tasksPerG  = 150
	)
	final := make(map[string]uint64) // id -> last version submitted; read after the run
	var finalMu sync.Mutex
	var successes sync.Map // "id@version" -> *atomic.Int32: successful runs of that version
	var failures sync.Map  // "id@version" -> remaining failures
	h.e.Register("work", func(ctx context.Context, r *Run) error {
		k := fmt.Sprintf("%s@%d", r.Task.ID, r.Task.Version)
		if v, ok := failures.Load(k); ok {
			if n := v.(*atomic.Int32).Add(-1); n >= 0 {
				return errors.New("transient")
			}
		}
		c, _ := successes.LoadOrStore(k, &atomic.Int32{})
		c.(*atomic.Int32).Add(1)
		return nil
	})
	cancelled := make(map[string]bool)
	var cancelledMu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for i := 0; i < tasksPerG; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				versions := 1 + rng.IntN(3)
				for v := 1; v <= versions; v++ {
					fails := int32(rng.IntN(4)) // 3 failures exhaust MaxAttempts: DEAD
					c := &atomic.Int32{}
					c.Store(fails)
					failures.Store(fmt.Sprintf("%s@%d", id, v), c)
					finalMu.Lock()
					final[id] = uint64(v)
					finalMu.Unlock()
					_, err := h.e.Submit(Task{ID: id, Type: "work", Version: uint64(v),
						Schedule: After(time.Duration(rng.IntN(2000)) * time.Millisecond),
						Retry:    RetryPolicy{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond}})
					if err != nil {
						t.Errorf("submit %s v%d: %v", id, v, err)
						return
					}
				}
				if rng.IntN(5) == 0 {
					if err := h.e.Cancel("", id); err == nil {
						cancelledMu.Lock()
						cancelled[id] = true
						cancelledMu.Unlock()
					}
				}
				if rng.IntN(10) == 0 {
					h.fake.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Let everything finish: move the clock in steps (retries are scheduled from each
	// attempt's end) until no task is left pending, failed, due or running.
	// One snapshot of every task's state (List reads the shards one after another, so a
	// task can move between two lists while they are read): finished means every task is
	// in a terminal state in two consecutive snapshots.
	unfinished := func() int {
		page, _, err := h.e.List(0, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, in := range page {
			if !in.State.Terminal() {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(eventWait)
	for idle := 0; idle < 2; {
		h.fake.Advance(500 * time.Millisecond)
		if n := unfinished(); n == 0 {
			idle++
		} else {
			idle = 0
			if time.Now().After(deadline) {
				t.Fatalf("%d tasks still unfinished", n)
			}
		}
		time.Sleep(time.Millisecond) // let workers drain between clock steps
	}
	for id, v := range final {
		in, err := h.e.Get("", id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if in.Task.Version != v {
			t.Fatalf("%s: engine holds version %d, last submitted %d", id, in.Task.Version, v)
		}
		var runs int32
		if c, ok := successes.Load(fmt.Sprintf("%s@%d", id, v)); ok {
			runs = c.(*atomic.Int32).Load()
		}
		switch in.State {
		case Succeeded:
			if runs != 1 {
				t.Fatalf("%s: SUCCEEDED with %d successful runs of its final version", id, runs)
			}
		case Dead:
			if _, ok := h.e.dlq.Get(DefaultNamespace, id); !ok || runs != 0 {
				t.Fatalf("%s: DEAD, in DLQ %v, successful runs %d", id, ok, runs)
			}
		case Cancelled:
			if !cancelled[id] || runs > 1 {
				t.Fatalf("%s: CANCELLED, cancel seen %v, runs %d", id, cancelled[id], runs)
			}
		default:
			t.Fatalf("%s: ended %v", id, in.State)
		}
	}
}
