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

// WallClock is a Clock whose readings also map to wall-clock time, for whoever computes
// deadlines from calendars (cron, time zones). Real and Fake are both WallClocks.
type WallClock interface {
	Clock
	// Time returns the wall-clock time of reading ns.
	Time(ns int64) time.Time
}

// Timer is a re-armable one-shot wake-up, used by one goroutine at a time. Deadlines are
// absolute readings of its Clock, so arming can never be made late by a stale reading:
// a deadline that has already passed delivers at once. A Timer may deliver spuriously
// (a wake-up armed before the last ResetAt or Stop may still arrive); its user re-reads
// the clock after every delivery.
type Timer interface {
	// C is the delivery channel (capacity 1).
	C() <-chan time.Time
	// ResetAt arms the timer to deliver once the clock reads at least when, discarding any
	// value not yet received.
	ResetAt(when int64)
	// Stop disarms the timer.
	Stop()
	// Close releases the timer's resources; it must not be used afterwards.
	Close()
}

// Real is the system monotonic clock. Its zero is the moment Real was created.
type Real struct{ epoch time.Time }

// NewReal returns a Real clock whose Now() counts from this call.
func NewReal() *Real { return &Real{epoch: time.Now()} }

// Now returns the nanoseconds elapsed since the clock was created (monotonic).
func (r *Real) Now() int64 { return int64(time.Since(r.epoch)) }

// Time converts a reading of this clock back to wall-clock time.
func (r *Real) Time(ns int64) time.Time { return r.epoch.Add(time.Duration(ns)) }

// NewTimer returns a disarmed timer. On Linux it is a timerfd read through the runtime's
// network poller, which wakes within tens of microseconds of the deadline; the Go runtime's
// own timers wake up to a millisecond late whenever the process is otherwise idle (its
// poller sleeps in whole milliseconds), which would make every wheel timer late by up to
// a tick more. Elsewhere, or if a timerfd cannot be made, it is a runtime timer.
func (r *Real) NewTimer() Timer {
	if t := newPreciseTimer(r); t != nil {
		return t
	}
	return newRuntimeTimer(r)
}

// runtimeTimer is a Timer on the Go runtime's timers.
type runtimeTimer struct {
	clock *Real
	t     *time.Timer
}

func newRuntimeTimer(r *Real) *runtimeTimer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &runtimeTimer{clock: r, t: t}
}

func (r *runtimeTimer) C() <-chan time.Time { return r.t.C }

// ResetAt converts the deadline to a delay at the last moment; the runtime timer then
// fires no earlier than the deadline.
func (r *runtimeTimer) ResetAt(when int64) { r.t.Reset(time.Duration(when - r.clock.Now())) }

func (r *runtimeTimer) Stop() { r.t.Stop() }

func (r *runtimeTimer) Close() { r.t.Stop() }
