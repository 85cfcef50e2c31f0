package bench

import (
	"runtime"
	"testing"
	"time"
)

// Memory: heap bytes retained per pending timer. Each iteration initialises a fresh
// implementation (its handle slices are allocated before the first reading), collects,
// reads HeapAlloc, schedules n timers at [1h, 2h), collects again with the timers alive
// and reads HeapAlloc again. B/timer is the median delta over n; ns/op times the n
// schedules only.
func Memory(b *testing.B, newTimers func() Timers, n int) {
	r := newRNG(1)
	var perTimer []float64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		tm := newTimers()
		if err := tm.Init(n, nil); err != nil {
			b.Fatal(err)
		}
		before := heapAlloc()
		b.StartTimer()
		for i := range n {
			if err := tm.Schedule(i, r.far()); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		after := heapAlloc()
		runtime.KeepAlive(tm)
		perTimer = append(perTimer, float64(after-before)/float64(n))
		tm.Close()
		b.StartTimer()
	}
	b.ReportMetric(median(perTimer), "B/timer")
}

// heapAlloc collects twice (the second finishes sweeping what the first freed) and
// returns the live heap.
func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// gcsPerOp is how many collections one ForcedGC iteration times.
const gcsPerOp = 3

// ForcedGC: with n timers pending at [1h, 2h), the median wall time of runtime.GC(),
// which marks everything reachable and blocks until sweeping is done. Timers that hold
// no pointers cost it nothing; the empty implementation is the baseline.
func ForcedGC(b *testing.B, newTimers func() Timers, n int) {
	tm, _ := populated(b, newTimers, n)
	runtime.GC()
	var gcs []float64
	b.ReportAllocs()
	for b.Loop() {
		for range gcsPerOp {
			start := time.Now()
			runtime.GC()
			gcs = append(gcs, float64(time.Since(start)))
		}
	}
	runtime.KeepAlive(tm)
	b.ReportMetric(median(gcs), "gc-ns")
}
