package task

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSubmitCancel measures the engine's bookkeeping without firing: each op submits
// a task an hour out and cancels it (Retention < 0 drops it at once), so the tables stay at
// a steady size instead of measuring map growth. The end-to-end rate is
// BenchmarkEngineOneShot in bench/.
func BenchmarkSubmitCancel(b *testing.B) {
	e, err := New(WithRetention(-1))
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprint("t", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Submit(Task{ID: ids[i], Type: "x", Schedule: After(time.Hour)}); err != nil {
			b.Fatal(err)
		}
		if err := e.Cancel("", ids[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunLimits measures what a limit's check costs a run: each op is one task
// submitted due at once, run by a worker and dropped, in batches of 1,024 that are
// waited for. limits=none is the path every task takes; key, one concurrency key with
// a limit never reached (every run takes and gives back a slot under the key's lock);
// rate, a rate limit never reached (one token a run); key+rate, both. The ratio of
// key and rate to none is the price of the check.
func BenchmarkRunLimits(b *testing.B) {
	for _, limits := range []string{"none", "key", "rate", "key+rate"} {
		b.Run("limits="+limits, func(b *testing.B) {
			e, key := limitedEngine(b, limits)
			var handled atomic.Int64
			e.Register("x", func(context.Context, *Run) error { handled.Add(1); return nil })
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = fmt.Sprint("t", i)
			}
			const batch = 1024
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := e.Submit(Task{ID: ids[i], Type: "x", Schedule: After(0), Concurrency: key}); err != nil {
					b.Fatal(err)
				}
				if i%batch == batch-1 || i == b.N-1 {
					for handled.Load() != int64(i+1) {
						runtime.Gosched()
					}
				}
			}
		})
	}
}

// BenchmarkLimitCheck measures the check itself, as runOne makes it under the shard's
// lock, for a run that every limit lets through: limits=none is the test every run pays
// (two loads, beside the shard lock and the clock reading that runOne makes anyway);
// key takes a slot and gives it back (as the attempt's end does); rate takes a token;
// key+rate both. Set beside BenchmarkRunLimits/limits=none (a whole run), it
// is the share of a run's cost that limits take.
func BenchmarkLimitCheck(b *testing.B) {
	for _, limits := range []string{"none", "key", "rate", "key+rate"} {
		b.Run("limits="+limits, func(b *testing.B) {
			e, key := limitedEngine(b, limits)
			t := Task{ID: "t", Type: "x", Schedule: After(time.Hour), Concurrency: key}
			if _, err := e.Submit(t); err != nil {
				b.Fatal(err)
			}
			h := keyHash(DefaultNamespace, "t")
			sh := e.shardOf(h)
			rec := sh.index.find(sh.slots, h, DefaultNamespace, "t")
			item := runItem{sh: sh, rec: rec, runID: 1}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				sh.mu.Lock()
				item.passed = 0
				now := e.clock.Now() // the worker reads it for the attempt anyway
				if (rec.task.Concurrency != nil || e.rates.Load() != nil) && !e.gate(&item, now) {
					b.Fatal("a limit held the run back")
				}
				if c := rec.task.Concurrency; c != nil {
					e.releaseSlot(c.lim)
				}
				sh.mu.Unlock()
			}
		})
	}
}

// limitedEngine starts an engine for the limit benchmarks, closed when b ends: limits
// names those that apply to tasks of type "x" (a rate limit never reached) and the
// returned key (a limit never reached), nil without "key".
func limitedEngine(b *testing.B, limits string) (*Engine, *Concurrency) {
	e, err := New(WithRetention(-1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(context.Background()) })
	if strings.Contains(limits, "rate") {
		if err := e.SetRateLimit("x", MaxRate, MaxBurst); err != nil {
			b.Fatal(err)
		}
	}
	if !strings.Contains(limits, "key") {
		return e, nil
	}
	return e, &Concurrency{Key: "k", Limit: MaxConcurrencyLimit}
}
