package bench

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// Fire schedules n timers with deadlines spread evenly over window from T0 (window 0:
// all at T0) and waits until every callback has run; each iteration is one burst.
// Deadlines are absolute, computed from one base, and T0 is far enough ahead that
// scheduling ends before it (the benchmark fails otherwise).
//
// ns/op is the whole burst, scheduling and the wait for T0 included, so that b.N is 1 at
// the default benchtime; the measurements are the metrics. fires/s = n / (last fire −
// T0); lateness p50/p99/p99.9/max in ns (each callback's clock reading minus its
// deadline); early, the callbacks that ran before their deadline (must be 0). With
// several iterations each is the median over bursts, early the sum. One unmeasured burst
// runs first (see below). Nothing waits for
// T0 on a timer of its own: the runtime's timers are the peer under test, and a sleeper
// queued behind a million of them would wake late.
func Fire(b *testing.B, newTimers func() Timers, n int, window time.Duration) {
	tm := newTimers()
	rec := newRecorder(n)
	rec.now = tm.Now
	if err := tm.Init(n, rec.fire); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tm.Close)
	// lead: time to schedule n timers (well under 1 µs each for both) plus slack.
	lead := 200*time.Millisecond + time.Duration(n)*time.Microsecond
	if testing.Short() {
		lead = 20*time.Millisecond + time.Duration(n)*time.Microsecond
	}
	// burst schedules and fires one burst; the timer runs only while it schedules, waits
	// and fires.
	burst := func() burstStats {
		b.StopTimer()
		rec.reset()
		runtime.GC()
		b.StartTimer()
		t0 := tm.Now() + int64(lead)
		for i := range n {
			if err := tm.At(i, t0+int64(window)*int64(i)/int64(n)); err != nil {
				b.Fatal(err)
			}
		}
		if over := tm.Now() - t0; over >= 0 {
			if testing.Short() {
				// The smoke run (make test) only proves the code runs; on a machine
				// stalled this long no figure would mean anything, and none is kept.
				b.Skipf("scheduling %d timers ran %v past T0 on a stalled machine", n, time.Duration(over))
			}
			b.Fatalf("scheduling %d timers ran %v past T0; raise the lead", n, time.Duration(over))
		}
		select {
		case <-rec.done:
		case <-time.After(time.Duration(t0-tm.Now()) + window + time.Minute):
			b.Fatalf("a minute after the last deadline only %d of %d timers fired", rec.n.Load(), n)
		}
		b.StopTimer()
		defer b.StartTimer()
		return rec.summary(t0)
	}
	// One unmeasured burst first: the first burst in a process spends most of its time
	// faulting in fresh memory (a goroutine stack per AfterFunc fire, pool workers for
	// tock), which a long-running service has long since done.
	burst()
	var bursts []burstStats
	b.ReportAllocs()
	for b.Loop() {
		bursts = append(bursts, burst())
	}
	reportBursts(b, bursts)
}

func reportBursts(b *testing.B, bursts []burstStats) {
	med := func(f func(burstStats) float64) float64 {
		v := make([]float64, len(bursts))
		for i, s := range bursts {
			v[i] = f(s)
		}
		return median(v)
	}
	early := 0
	for _, s := range bursts {
		early += s.early
	}
	b.ReportMetric(med(func(s burstStats) float64 { return s.firesPerSec }), "fires/s")
	b.ReportMetric(med(func(s burstStats) float64 { return s.p50 }), "p50-ns")
	b.ReportMetric(med(func(s burstStats) float64 { return s.p99 }), "p99-ns")
	b.ReportMetric(med(func(s burstStats) float64 { return s.p999 }), "p99.9-ns")
	b.ReportMetric(med(func(s burstStats) float64 { return s.maxLate }), "max-ns")
	b.ReportMetric(float64(early), "early")
}

// median of v; v is reordered.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}
