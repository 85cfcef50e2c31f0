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
			e, err := New(WithRetention(-1))
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close(context.Background())
			var handled atomic.Int64
			e.Register("x", func(context.Context, *Run) error { handled.Add(1); return nil })
			var key *Concurrency
			if strings.Contains(limits, "key") {
				key = &Concurrency{Key: "k", Limit: MaxConcurrencyLimit}
			}
			if strings.Contains(limits, "rate") {
				if err := e.SetRateLimit("x", MaxRate, MaxBurst); err != nil {
					b.Fatal(err)
				}
			}
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
