package timer

import (
	"context"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/internal/waitfor"
)

// TestIdleSchedulerSleeps holds a million far-future timers on the system clock and checks
// that, once the drivers have gone to sleep, nothing wakes them: no fixed tick, no scan.
// The check that matters is the wake-up counter: the earliest wheel cascade is minutes
// away, so the drivers must stay parked through the window. Process CPU time over the window is reported, and bounded
// loosely (a tenth of the window), since other goroutines of the test binary and the
// race detector may run.
func TestIdleSchedulerSleeps(t *testing.T) {
	const pending = 1_000_000
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	h, _ := s.Register(func(Event) { t.Error("a far-future timer fired") })
	for i := 0; i < pending; i++ {
		d := time.Hour + time.Duration(i)*time.Millisecond
		if _, err := s.After(d, h, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until every driver has taken its last signal and armed its sleep: sleepUntil
	// holds a deadline (not the busy marker) and no wake signal is pending.
	waitfor.Until(t, "drivers settled", func() bool { return allAsleep(s) })
	before := s.Stats().Wakeups
	cpuBefore := processCPU()
	const window = 500 * time.Millisecond
	time.Sleep(window) // the measurement window itself: idleness is observed over time
	cpu := processCPU() - cpuBefore
	// A driver seen as settled may still be between taking its last signal and counting
	// the wake-up, so one wake-up per shard is tolerated. Any fixed tick, even a coarse
	// 100 ms one, would show 5 per shard in this window; a 1 ms tick 500.
	if woke := s.Stats().Wakeups - before; woke > uint64(len(s.shards)) {
		t.Fatalf("drivers woke %d times in %v with nothing due for an hour", woke, window)
	}
	t.Logf("%d pending timers: %v of CPU in %v idle", s.Len(), cpu, window)
	if cpu > window/10 {
		t.Fatalf("idle scheduler used %v of CPU in %v", cpu, window)
	}
}

func allAsleep(s *Scheduler) bool {
	for _, sh := range s.shards {
		sh.mu.Lock()
		asleep := sh.sleepUntil != math.MinInt64 && len(sh.wake) == 0
		sh.mu.Unlock()
		if !asleep {
			return false
		}
	}
	return true
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
