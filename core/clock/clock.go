// Package clock is the time source of the tock core: a monotonic nanosecond reading and
// timers that wake a sleeping goroutine, behind an interface so that tests can drive time
// by hand instead of sleeping.
//
// Invariants:
//   - Now never goes backwards: for two calls a then b on one Clock, a.Now() <= b.Now().
//   - A Timer's channel receives only after Now() has reached the absolute deadline it was
//     armed for (Real: the Go runtime's guarantee; Fake: Advance delivers only due timers).
//   - A Timer channel has capacity 1: a delivery is never lost, at most coalesced.
package clock

import "time"

// Clock reads monotonic time and arms timers. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns nanoseconds on a monotonic scale whose zero is the Clock's creation (Real)
	// or whatever the test chose (Fake). It is never negative. Cost: Real ~ one vDSO
	// clock read.
	Now() int64
	// NewTimer returns a disarmed timer.
	NewTimer() Timer
}

// Timer is a re-armable one-shot wake-up, used by one goroutine at a time. Deadlines are
// absolute readings of its Clock, so arming can never be made late by a stale reading:
// a deadline that has already passed delivers at once.
type Timer interface {
	// C is the delivery channel (capacity 1).
	C() <-chan time.Time
	// ResetAt arms the timer to deliver once the clock reads at least when, discarding any
	// value not yet received (Go 1.23+ timer semantics).
	ResetAt(when int64)
	// Stop disarms the timer; it reports whether the timer was armed.
	Stop() bool
}

// Real is the system monotonic clock. Its zero is the moment Real was created.
type Real struct{ epoch time.Time }

// NewReal returns a Real clock whose Now() counts from this call.
func NewReal() *Real { return &Real{epoch: time.Now()} }

// Now returns the nanoseconds elapsed since the clock was created (monotonic).
func (r *Real) Now() int64 { return int64(time.Since(r.epoch)) }

// Time converts a reading of this clock back to wall-clock time.
func (r *Real) Time(ns int64) time.Time { return r.epoch.Add(time.Duration(ns)) }

// NewTimer returns a disarmed runtime timer.
func (r *Real) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &realTimer{clock: r, t: t}
}

type realTimer struct {
	clock *Real
	t     *time.Timer
}

func (r *realTimer) C() <-chan time.Time { return r.t.C }

// ResetAt converts the deadline to a delay at the last moment; the runtime timer then
// fires no earlier than the deadline.
func (r *realTimer) ResetAt(when int64) { r.t.Reset(time.Duration(when - r.clock.Now())) }

func (r *realTimer) Stop() bool { return r.t.Stop() }
