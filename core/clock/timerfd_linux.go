//go:build linux

package clock

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// preciseTimer is a Timer backed by a Linux timerfd armed at an absolute CLOCK_MONOTONIC
// deadline, with a runtime timer armed for the same deadline as a second path; the first
// to fire delivers, the other is a harmless spurious wake-up.
//
// Why both: the timerfd is read by a goroutine parked in the runtime's poller, and an
// idle process sleeps in that poller, so the expiry wakes it within microseconds where a
// runtime timer would wait for the poller's next whole millisecond. But while every P is
// busy running goroutines nobody sits in the poller: it is checked between goroutines
// and by sysmon at most every 10 ms, and a busy process saw timerfd wake-ups up to 10 ms
// late. Runtime timers are checked on every goroutine switch, which is exactly when the
// process is busy. Measured at 1.1M fires/s offered, p99 lateness: timerfd only 1.7-5.6
// ms (noisy), both paths: see BENCHMARKS.md.
type preciseTimer struct {
	file   *os.File
	fd     int
	offset int64 // CLOCK_MONOTONIC reading minus Real.Now() (never below the true offset)
	clock  *Real
	backup *time.Timer // runtime timer for the same deadline
	// armed is set by ResetAt and taken by the first path to fire, so one arming delivers
	// once, not twice. A stale expiry of an earlier arming may take it: that is an early
	// (spurious) wake-up, after which the user re-arms; never a lost one.
	armed atomic.Bool
	c     chan time.Time
	done  chan struct{} // closed when the reader goroutine has exited
	once  sync.Once
}

func newPreciseTimer(r *Real) Timer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	// Real.Now() is the runtime's CLOCK_MONOTONIC reading minus the epoch's. Reading the
	// monotonic clock after Now() makes the estimated offset at least the true one, so a
	// deadline converted with it can only be armed late (by nanoseconds), never early.
	before := r.Now()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		unix.Close(fd)
		return nil
	}
	t := &preciseTimer{
		file:   os.NewFile(uintptr(fd), "tock-timerfd"), // non-blocking: served by the poller
		fd:     fd,
		offset: ts.Nano() - before,
		clock:  r,
		c:      make(chan time.Time, 1),
		done:   make(chan struct{}),
	}
	t.backup = time.AfterFunc(time.Hour, t.fired)
	t.backup.Stop()
	go t.read()
	return t
}

// fired is called by either path when its deadline passes.
func (t *preciseTimer) fired() {
	if t.armed.CompareAndSwap(true, false) {
		t.deliver()
	}
}

func (t *preciseTimer) deliver() {
	select {
	case t.c <- time.Time{}:
	default: // one undelivered wake-up is enough
	}
}

func (t *preciseTimer) read() {
	defer close(t.done)
	var expirations [8]byte
	for {
		if _, err := t.file.Read(expirations[:]); err != nil {
			return // closed
		}
		t.fired()
	}
}

func (t *preciseTimer) C() <-chan time.Time { return t.c }

func (t *preciseTimer) ResetAt(when int64) {
	select {
	case <-t.c:
	default:
	}
	t.armed.Store(true)
	deadline := max(when+t.offset, 1) // 0 would disarm; any past time expires at once
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(deadline)}
	if err := unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		// The fd is ours and the arguments valid; failing here means the fd was closed.
		// Deliver now rather than sleep forever: the user re-reads the clock.
		t.deliver()
	}
	t.backup.Reset(time.Duration(when - t.clock.Now()))
}

func (t *preciseTimer) Stop() {
	var disarm unix.ItimerSpec
	unix.TimerfdSettime(t.fd, 0, &disarm, nil)
	t.backup.Stop()
	t.armed.Store(false)
}

// Close closes the fd, which ends the reader goroutine, and waits for it to exit.
func (t *preciseTimer) Close() {
	t.once.Do(func() {
		t.backup.Stop()
		t.file.Close()
		<-t.done
	})
}
