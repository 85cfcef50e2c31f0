package timer

import (
	"context"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/clock"
)

// The allocation tests count every allocation in the process during the measured calls
// (testing.AllocsPerRun reads the runtime's malloc counter), so the firing test covers
// the driver goroutine and the pool workers too, not just the caller.

func newAllocScheduler(t *testing.T) (*Scheduler, *clock.Fake, Handler, chan Event) {
	t.Helper()
	fake := clock.NewFake(start)
	s, err := New(WithClock(fake), WithShards(1), WithInflightBatches(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	events := make(chan Event, 1024)
	h, _ := s.Register(func(ev Event) { events <- ev })
	// Grow the slab and the side structures to the working set, then empty them.
	var warm []Timer
	for i := 0; i < 8192; i++ {
		tm, _ := s.After(time.Hour+time.Duration(i)*time.Millisecond, h, 0)
		warm = append(warm, tm)
	}
	for _, tm := range warm {
		s.Cancel(tm)
	}
	return s, fake, h, events
}

func TestScheduleAndCancelAllocateNothing(t *testing.T) {
	s, _, h, _ := newAllocScheduler(t)
	var tm Timer
	if a := testing.AllocsPerRun(1000, func() { tm, _ = s.After(time.Hour, h, 1) }); a != 0 {
		t.Errorf("After: %v allocs per call", a)
	}
	if a := testing.AllocsPerRun(1000, func() { s.Cancel(tm); tm, _ = s.After(time.Minute, h, 2) }); a != 0 {
		t.Errorf("Cancel+After: %v allocs per call", a)
	}
	if a := testing.AllocsPerRun(1000, func() { s.At(start+int64(time.Hour), h, 3) }); a != 0 {
		t.Errorf("At: %v allocs per call", a)
	}
	if a := testing.AllocsPerRun(1000, func() { s.AfterKey("tenant-42", time.Hour, h, 4) }); a != 0 {
		t.Errorf("AfterKey: %v allocs per call", a)
	}
}

func TestResetAllocatesNothing(t *testing.T) {
	s, _, h, _ := newAllocScheduler(t)
	tm, _ := s.After(time.Hour, h, 1)
	d := time.Hour
	if a := testing.AllocsPerRun(1000, func() { d += time.Millisecond; s.Reset(tm, d) }); a != 0 {
		t.Errorf("Reset: %v allocs per call", a)
	}
}

func TestFiringAllocatesNothing(t *testing.T) {
	s, fake, h, events := newAllocScheduler(t)
	const perRound = 64
	round := func() {
		for i := 0; i < perRound; i++ {
			s.After(time.Millisecond, h, uint64(i))
		}
		fake.Advance(time.Millisecond)
		for i := 0; i < perRound; i++ {
			<-events
		}
	}
	round() // start the pool's worker goroutine and the driver's timer
	if a := testing.AllocsPerRun(200, round); a != 0 {
		t.Errorf("schedule + fire of %d timers: %v allocs per round", perRound, a)
	}
}
