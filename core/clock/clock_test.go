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

func TestRealTimerDeliversNoEarlierThanArmed(t *testing.T) {
	c := NewReal()
	start := c.Now()
	tm := c.NewTimer(2 * time.Millisecond)
	<-tm.C()
	if el := c.Now() - start; el < int64(2*time.Millisecond) {
		t.Fatalf("delivered after %v, before the 2ms it was armed for", time.Duration(el))
	}
	tm.Reset(time.Hour)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported not armed")
	}
}

func TestFakeDeliversOnlyWhenDue(t *testing.T) {
	f := NewFake(100)
	tm := f.NewTimer(10)
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
	tm := f.NewTimer(0) // due at once: delivered during NewTimer
	tm.Reset(5)
	select {
	case <-tm.C():
		t.Fatal("Reset kept a stale delivery")
	default:
	}
	if !tm.Stop() {
		t.Fatal("Stop of armed timer = false")
	}
	if tm.Stop() {
		t.Fatal("second Stop = true")
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
