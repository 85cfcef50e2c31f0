package timer

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/clock"
	"github.com/tock-sched/tock/core/internal/waitfor"
)

// TestConcurrentModel drives schedule / cancel / reset from several goroutines while
// another moves the clock, and checks the outcome against a reference model kept by each
// goroutine for its own timers:
//   - every timer runs exactly once unless Cancel returned true for it, then never;
//   - Cancel returns true exactly when it prevented the run;
//   - no timer runs before its deadline (the clock reading at collection and inside the
//     callback are both >= the deadline), and it runs with the deadline the model expects
//     (the last one set by a successful Reset).
//
// Half the timers belong to a Precise handler (heap), half to a wheel handler, and the
// batches are small, so that both structures and partial collection are exercised.
func TestConcurrentModel(t *testing.T) {
	const (
		workers      = 4
		opsPerWorker = 3000
		maxDelay     = int64(40 * time.Millisecond)
	)
	fake := clock.NewFake(start)
	s, err := New(WithClock(fake), WithShards(4), WithMaxBatch(8), WithInflightBatches(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())

	total := workers * opsPerWorker // upper bound on timers created
	fires := make([]atomic.Int32, total)
	firedDue := make([]atomic.Int64, total)
	var early atomic.Int64
	var firedTotal atomic.Int64
	record := func(ev Event) {
		if ev.Now < ev.Due || fake.Now() < ev.Due {
			early.Add(1)
		}
		fires[ev.Arg].Add(1)
		firedDue[ev.Arg].Store(ev.Due)
		firedTotal.Add(1)
	}
	wheelH, _ := s.Register(record)
	preciseH, _ := s.Register(record, Precise())

	// The model's deadline is a range: Reset reads the clock itself, and the clock moves
	// concurrently, so the exact deadline lies between the readings before and after the
	// call, plus the delay. At pins it exactly (lo == hi).
	type model struct {
		tm        Timer
		lo, hi    int64
		cancelled bool
	}
	models := make([][]*model, workers) // models[w][i] is the timer with arg w*opsPerWorker+i
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			var mine []*model
			var live []int // indices into mine of timers this goroutine has not cancelled
			for op := 0; op < opsPerWorker; op++ {
				switch r := rng.IntN(12); {
				case r >= 10: // move the clock too, so runs race with cancels and resets
					fake.Advance(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
					if r == 11 {
						runtime.Gosched()
					}
				case r < 5 || len(live) == 0:
					arg := uint64(w*opsPerWorker + len(mine))
					h := wheelH
					if rng.IntN(2) == 0 {
						h = preciseH
					}
					when := fake.Now() + rng.Int64N(maxDelay)
					tm, err := s.At(when, h, arg)
					if err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, &model{tm: tm, lo: when, hi: when})
					live = append(live, len(mine)-1)
				case r < 8:
					k := rng.IntN(len(live))
					m := mine[live[k]]
					m.cancelled = s.Cancel(m.tm)
					live[k] = live[len(live)-1]
					live = live[:len(live)-1]
					if s.Cancel(m.tm) {
						t.Errorf("second Cancel of timer %+v returned true", m.tm)
					}
				default:
					m := mine[live[rng.IntN(len(live))]]
					d := rng.Int64N(maxDelay)
					before := fake.Now()
					if s.Reset(m.tm, time.Duration(d)) {
						m.lo, m.hi = before+d, fake.Now()+d
					}
				}
			}
			models[w] = mine
		}()
	}
	var advancing sync.WaitGroup
	stopClock := make(chan struct{})
	advancing.Add(1)
	go func() {
		defer advancing.Done()
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-stopClock:
				return
			default:
			}
			fake.Advance(time.Duration(rng.Int64N(int64(3 * time.Millisecond))))
			time.Sleep(50 * time.Microsecond) // pace only: correctness never depends on it
		}
	}()
	wg.Wait()
	close(stopClock)
	advancing.Wait()
	if t.Failed() {
		return
	}

	t.Logf("%d runs happened while the ops were still going on", firedTotal.Load())
	want := int64(0)
	for _, mine := range models {
		for _, m := range mine {
			if !m.cancelled {
				want++
			}
		}
	}
	fake.Advance(time.Hour)
	waitfor.Until(t, "every live timer fired", func() bool {
		fake.Advance(time.Millisecond) // wake drivers parked on a stale reading
		return firedTotal.Load() >= want
	})
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if early.Load() != 0 {
		t.Fatalf("%d runs before their deadline", early.Load())
	}
	for w, mine := range models {
		for i, m := range mine {
			arg := w*opsPerWorker + i
			got := fires[arg].Load()
			switch {
			case m.cancelled && got != 0:
				t.Fatalf("timer %d: Cancel returned true but it ran %d times", arg, got)
			case !m.cancelled && got != 1:
				t.Fatalf("timer %d: not cancelled (or Cancel returned false) but ran %d times", arg, got)
			case !m.cancelled:
				if due := firedDue[arg].Load(); due < m.lo || due > m.hi {
					t.Fatalf("timer %d ran with deadline %d, model says [%d, %d]", arg, due, m.lo, m.hi)
				}
			}
		}
	}
	if st := s.Stats(); int64(st.Fired) != want || st.Pending != 0 {
		t.Fatalf("stats %+v, want %d fired and none pending", st, want)
	}
}
