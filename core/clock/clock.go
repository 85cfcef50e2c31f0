// Package clock is the time source of the tock core: a monotonic nanosecond reading and
// timers that wake a sleeping goroutine, behind an interface so that tests can drive time
// by hand instead of sleeping.
//
// Invariants:
//   - Now never goes backwards: for two calls a then b on one Clock, a.Now() <= b.Now().
//   - A Timer's channel receives only after Now() has reached the deadline it was armed for
//     (Real: the Go runtime's guarantee; Fake: Advance delivers only due timers).
//   - A Timer channel has capacity 1: a delivery is never lost, at most coalesced.
package clock

import "time"

// Clock reads monotonic time and arms timers. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns nanoseconds on a monotonic scale whose zero is the Clock's creation (Real)
	// or whatever the test chose (Fake). It is never negative for Real. Cost: Real ~ one
	// vDSO clock read.
	Now() int64
	// NewTimer returns a stopped-or-armed timer that delivers on C() once Now() has reached
	// Now()+d at the time of the call. d <= 0 delivers as soon as possible.
	NewTimer(d time.Duration) Timer
}

// Timer is a resettable one-shot wake-up, the subset of *time.Timer the scheduler needs.
// A Timer is used by one goroutine at a time.
type Timer interface {
	// C is the delivery channel (capacity 1).
	C() <-chan time.Time
	// Reset re-arms the timer to deliver d from now, discarding any undelivered value
	// (Go 1.23+ timer semantics).
	Reset(d time.Duration)
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

// NewTimer arms a runtime timer.
func (r *Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop() bool            { return r.t.Stop() }
