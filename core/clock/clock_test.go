package clock

import (
	"testing"
	"time"
)

func TestRealIsMonotonicAndStartsNearZero(t *testing.T) {
	c := NewReal()
	a := c.Now()
	b := c.Now()
	if a < 0 || b < a {
		t.Fatalf("readings not monotonic from zero: %d then %d", a, b)
	}
	if got := c.Time(0); !got.Equal(c.epoch) {
		t.Fatalf("Time(0) = %v, want the epoch %v", got, c.epoch)
	}
}

func TestRealTimersDeliverNoEarlierThanArmed(t *testing.T) {
	c := NewReal()
	for name, tm := range map[string]Timer{"default": c.NewTimer(), "runtime": newRuntimeTimer(c)} {
		t.Run(name, func(t *testing.T) {
			defer tm.Close()
			start := c.Now()
			tm.ResetAt(start + int64(2*time.Millisecond))
			<-tm.C()
			if el := c.Now() - start; el < int64(2*time.Millisecond) {
				t.Fatalf("delivered after %v, before the 2ms it was armed for", time.Duration(el))
			}
			tm.ResetAt(c.Now() - 1) // already past: delivers at once
			<-tm.C()
			tm.ResetAt(c.Now() + int64(time.Hour))
			tm.Stop()
			tm.ResetAt(c.Now() + int64(time.Millisecond)) // re-armed after Stop
			<-tm.C()
		})
	}
}

func TestFakeDeliversOnlyWhenDue(t *testing.T) {
	f := NewFake(100)
	tm := f.NewTimer()
	tm.ResetAt(110)
	f.Advance(9)
	select {
	case <-tm.C():
		t.Fatal("delivered at 109, deadline 110")
	default:
	}
	if f.Armed() != 1 {
		t.Fatalf("Armed() = %d, want 1", f.Armed())
	}
	if d, ok := f.NextDeadline(); !ok || d != 110 {
		t.Fatalf("NextDeadline() = %d,%v want 110,true", d, ok)
	}
	f.Advance(1)
	select {
	case <-tm.C():
	default:
		t.Fatal("not delivered at the deadline")
	}
	if f.Armed() != 0 {
		t.Fatalf("a delivered timer is still armed")
	}
}

func TestFakeResetDiscardsUndeliveredValueAndStop(t *testing.T) {
	f := NewFake(0)
	tm := f.NewTimer()
	tm.ResetAt(0) // due at once: delivered during ResetAt
	tm.ResetAt(5)
	select {
	case <-tm.C():
		t.Fatal("Reset kept a stale delivery")
	default:
	}
	tm.Stop()
	if f.Armed() != 0 {
		t.Fatal("Stop left the timer armed")
	}
	f.Set(100)
	select {
	case <-tm.C():
		t.Fatal("stopped timer delivered")
	default:
	}
	f.Set(50) // never backwards
	if f.Now() != 100 {
		t.Fatalf("Set moved the clock back to %d", f.Now())
	}
}

// TestFakeResetAtAfterAdvanceIsNotLost pins the race that absolute deadlines exist for:
// the clock passes the deadline between a sleeper's decision and its arming.
func TestFakeResetAtAfterAdvanceIsNotLost(t *testing.T) {
	f := NewFake(1000)
	tm := f.NewTimer()
	wakeAt := f.Now() + 10 // decided at 1000
	f.Advance(10)          // the clock reaches the deadline before the timer is armed
	tm.ResetAt(wakeAt)
	select {
	case <-tm.C():
	default:
		t.Fatal("arming at a deadline already reached did not deliver")
	}
}

func TestWallClocks(t *testing.T) {
	var _ WallClock = NewReal()
	var _ WallClock = NewFake(0)
	at := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	f := NewFake(at.UnixNano())
	if got := f.Time(f.Now()); !got.Equal(at) {
		t.Fatalf("Fake.Time(Now()) = %v, want %v", got, at)
	}
	f.Advance(time.Hour)
	if got := f.Time(f.Now()); !got.Equal(at.Add(time.Hour)) {
		t.Fatalf("after an hour: %v", got)
	}
}
