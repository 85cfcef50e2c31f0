package bench

import (
	"runtime"
	"testing"
	"time"
)

// Idle: n timers pending at [1h, 2h) and nothing due. After settling, each iteration
// sleeps through one window and measures the whole process's CPU time (user + system,
// getrusage) over that wall time: cpu-ns/s. Implementations that count their driver's
// wake-ups also report wakeups/s.
func Idle(b *testing.B, newTimers func() Timers, n int, window time.Duration) {
	if _, ok := cpuTime(); !ok {
		b.Skip("no process CPU clock on this platform")
	}
	tm, _ := populated(b, newTimers, n)
	time.Sleep(window / 10) // let drivers and the runtime go to sleep
	wc, counts := tm.(wakeupCounter)
	var cpu, wall time.Duration
	var wakes uint64
	b.ReportAllocs()
	for b.Loop() {
		c0, _ := cpuTime()
		t0 := time.Now()
		var w0 uint64
		if counts {
			w0 = wc.Wakeups()
		}
		time.Sleep(window)
		if counts {
			wakes += wc.Wakeups() - w0
		}
		c1, _ := cpuTime()
		cpu += c1 - c0
		wall += time.Since(t0)
	}
	b.ReportMetric(float64(cpu)/wall.Seconds(), "cpu-ns/s")
	if counts {
		b.ReportMetric(float64(wakes)/wall.Seconds(), "wakeups/s")
	}
	runtime.KeepAlive(tm)
}
