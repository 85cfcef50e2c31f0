package clock

import (
	"sync"
	"time"
)

// Fake is a Clock that moves only when a test calls Advance or Set. It is safe for
// concurrent use. Timers armed on it deliver during the Advance/Set call that reaches
// their deadline, never before.
type Fake struct {
	mu     sync.Mutex
	now    int64                // guarded by mu
	timers map[*fakeTimer]int64 // armed timers -> deadline; guarded by mu
}

// Time maps a reading to wall-clock time: reading r is time.Unix(0, r). A test that wants
// the clock to read a given wall time t starts it at t.UnixNano().
func (f *Fake) Time(ns int64) time.Time { return time.Unix(0, ns) }

// NewFake returns a Fake clock reading start nanoseconds (a negative start reads 0).
func NewFake(start int64) *Fake {
	return &Fake{now: max(start, 0), timers: make(map[*fakeTimer]int64)}
}

// Now returns the current fake reading.
func (f *Fake) Now() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d (d < 0 is treated as 0) and delivers every timer
// whose deadline has been reached.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	f.mu.Lock()
	f.now += int64(d)
	f.deliverLocked()
	f.mu.Unlock()
}

// Set moves the clock to t if t is later than now (the clock never goes back) and delivers
// every timer whose deadline has been reached.
func (f *Fake) Set(t int64) {
	f.mu.Lock()
	if t > f.now {
		f.now = t
	}
	f.deliverLocked()
	f.mu.Unlock()
}

// Armed returns how many timers are armed now.
func (f *Fake) Armed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NextDeadline returns the earliest armed deadline and whether any timer is armed.
func (f *Fake) NextDeadline() (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first, ok := int64(0), false
	for _, when := range f.timers {
		if !ok || when < first {
			first, ok = when, true
		}
	}
	return first, ok
}

func (f *Fake) deliverLocked() {
	for t, when := range f.timers {
		if when <= f.now {
			delete(f.timers, t)
			select {
			case t.c <- time.Unix(0, f.now):
			default: // capacity 1: an undelivered value is already waiting
			}
		}
	}
}

// NewTimer returns a disarmed fake timer.
func (f *Fake) NewTimer() Timer {
	return &fakeTimer{f: f, c: make(chan time.Time, 1)}
}

type fakeTimer struct {
	f *Fake
	c chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) ResetAt(when int64) {
	f := t.f
	f.mu.Lock()
	select { // Go 1.23 semantics: arming discards a value not yet received
	case <-t.c:
	default:
	}
	f.timers[t] = when
	f.deliverLocked()
	f.mu.Unlock()
}

func (t *fakeTimer) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	delete(t.f.timers, t)
}

func (t *fakeTimer) Close() { t.Stop() }
