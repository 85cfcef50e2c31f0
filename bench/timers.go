package bench

import "time"

// Timers is one timer implementation under test. Handles stay inside the
// implementation, in a slice indexed by slot, so no handle is ever boxed.
//
// A slot holds at most one timer: Schedule and At may be called on a slot only when its
// previous timer has fired or been cancelled. Methods other than Init and Close may be
// called concurrently for disjoint slots.
type Timers interface {
	// Init allocates storage for slots timers and arranges for onFire(slot, due) to run
	// when a slot's timer fires (onFire may be nil). due is the deadline on the Now scale;
	// it is defined for timers set with At (Schedule and Reset, the hot paths, do not
	// take an extra clock reading to record it).
	Init(slots int, onFire func(slot int, due int64)) error
	// Schedule starts a timer in slot that fires d from now.
	Schedule(slot int, d time.Duration) error
	// At starts a timer in slot that fires at due, a reading of Now.
	At(slot int, due int64) error
	// Cancel stops slot's timer and reports whether it was pending.
	Cancel(slot int) bool
	// Reset moves slot's pending timer to fire d from now and reports whether it was
	// pending.
	Reset(slot int, d time.Duration) bool
	// Now is the clock, in nanoseconds, that deadlines are on.
	Now() int64
	// Close stops every pending timer and releases the implementation.
	Close()
}

// Impl names a Timers implementation; New returns a fresh, uninitialised one.
type Impl struct {
	Name string
	New  func() Timers
}

// wakeupCounter is implemented by Timers that can count their driver's wake-ups.
type wakeupCounter interface {
	Wakeups() uint64
}
