package bench

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// populated makes a Timers with newTimers, initialises it with n slots and schedules
// every slot at a far delay; it returns it with the random source (seed 1) that drew
// the delays, for the workload to go on drawing from.
func populated(b *testing.B, newTimers func() Timers, n int) (Timers, rng) {
	b.Helper()
	tm, r := newTimers(), newRNG(1)
	if err := tm.Init(n, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tm.Close)
	for i := range n {
		if err := tm.Schedule(i, r.far()); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC() // start measuring from a clean heap, not the population's garbage
	return tm, r
}

// ScheduleCancel: n timers pending at [1h, 2h); an op cancels the timer of the next slot
// and schedules the slot again at a new random delay in [1h, 2h).
//
// Slots are visited in order (FIFO: the timer cancelled is the one scheduled longest ago,
// as with request deadlines), so the handle is read from a sequential slice, as it would
// be from a caller's hot request struct, while the timer itself is cold. Visiting slots
// at random instead adds a cache miss per op for the handle to both sides and, at 1e6,
// costs several times more on this machine for both.
func ScheduleCancel(b *testing.B, newTimers func() Timers, n int) {
	tm, r := populated(b, newTimers, n)
	slot := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if slot++; slot == n {
			slot = 0
		}
		if err := cancelAndReschedule(tm, slot, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// cancelAndReschedule is one op of the ScheduleCancel workloads.
func cancelAndReschedule(tm Timers, slot int, r *rng) error {
	if !tm.Cancel(slot) {
		return fmt.Errorf("slot %d: Cancel of a pending timer returned false", slot)
	}
	return tm.Schedule(slot, r.far())
}

// ScheduleCancelParallel is ScheduleCancel under RunParallel; each goroutine owns a
// disjoint range of slots and visits it in order, so the only contention is inside the
// implementation.
func ScheduleCancelParallel(b *testing.B, newTimers func() Timers, n int) {
	tm, _ := populated(b, newTimers, n)
	procs := runtime.GOMAXPROCS(0) // RunParallel starts this many goroutines
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := int(next.Add(1) - 1)
		if id >= procs {
			b.Errorf("goroutine %d of %d: more goroutines than slot ranges", id, procs)
			return
		}
		lo, hi := id*n/procs, (id+1)*n/procs
		r, slot := newRNG(uint64(id)+2), lo
		for pb.Next() {
			if slot++; slot == hi {
				slot = lo
			}
			if err := cancelAndReschedule(tm, slot, &r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// Reset: n timers pending; an op moves the next slot's timer (in order, as in
// ScheduleCancel). With sliding false the new delay is random in [1h, 2h), so about half
// the moves are to an earlier deadline; with sliding true every op resets to the same 1h
// timeout, so each deadline moves later, as an idle or session timeout pushed back on
// every request does.
func Reset(b *testing.B, newTimers func() Timers, n int, sliding bool) {
	tm, r := populated(b, newTimers, n)
	slot := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if slot++; slot == n {
			slot = 0
		}
		d := time.Hour
		if !sliding {
			d = r.far()
		}
		if !tm.Reset(slot, d) {
			b.Fatalf("slot %d: Reset of a pending timer returned false", slot)
		}
	}
}
