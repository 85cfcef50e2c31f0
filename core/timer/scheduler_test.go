package timer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tock-sched/tock/core/clock"
	"github.com/tock-sched/tock/core/internal/waitfor"
)

// ants starts a package-level default pool (two goroutines) at init; IgnoreCurrent leaves
// those alone and still catches every goroutine a test leaves behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// eventWait bounds how long a test waits for an event that must arrive: core's one bound.
const eventWait = waitfor.Limit

const start = int64(1_000_000_000) // fake clocks start at 1 s so that ticks are not 0

type harness struct {
	t      *testing.T
	s      *Scheduler
	fake   *clock.Fake
	events chan Event
	h      Handler
	marker Handler // precise, so a barrier fires at exactly the time it names
}

// newHarness starts a scheduler on a fake clock with one shard and one batch in flight, so
// that batches run in the order they are collected, and a handler that records events.
func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	fake := clock.NewFake(start)
	opts = append([]Option{WithClock(fake), WithShards(1), WithInflightBatches(1)}, opts...)
	s, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	hs := &harness{t: t, s: s, fake: fake, events: make(chan Event, 1<<16)}
	hs.h, err = s.Register(func(ev Event) { hs.events <- ev })
	if err != nil {
		t.Fatal(err)
	}
	hs.marker, err = s.Register(func(ev Event) { hs.events <- ev }, Precise())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return hs
}

func (hs *harness) next() Event {
	hs.t.Helper()
	select {
	case ev := <-hs.events:
		return ev
	case <-time.After(eventWait):
		hs.t.Fatalf("no event within %v (clock at %d)", eventWait, hs.fake.Now())
		return Event{}
	}
}

// barrier schedules a marker timer due at exactly the current fake time plus d, advances
// the clock to it and waits for it; with one shard and one batch in flight, every timer
// due by then has run before the marker (the wheel's due nodes are collected before the
// heap's). It returns the events seen before the marker.
func (hs *harness) barrier(d time.Duration) []Event {
	hs.t.Helper()
	const marker = ^uint64(0)
	if _, err := hs.s.After(d, hs.marker, marker); err != nil {
		hs.t.Fatal(err)
	}
	hs.fake.Advance(d)
	var before []Event
	for {
		ev := hs.next()
		if ev.Arg == marker {
			return before
		}
		before = append(before, ev)
	}
}

func TestAfterFiresAtItsTickNeverBefore(t *testing.T) {
	hs := newHarness(t)
	if _, err := hs.s.After(10*time.Millisecond+1, hs.h, 7); err != nil {
		t.Fatal(err)
	}
	hs.fake.Advance(10 * time.Millisecond) // one nanosecond short of the deadline
	if early := hs.barrier(0); len(early) != 0 {
		t.Fatalf("fired before its deadline: %+v", early)
	}
	hs.fake.Advance(time.Millisecond) // the next tick boundary
	ev := hs.next()
	if ev.Arg != 7 || ev.Due != start+int64(10*time.Millisecond)+1 {
		t.Fatalf("event %+v", ev)
	}
	if ev.Now < ev.Due || ev.Now != start+int64(11*time.Millisecond) {
		t.Fatalf("collected at %d, due %d: want the first tick boundary after the deadline", ev.Now, ev.Due)
	}
	if err := hs.s.verify(); err != nil {
		t.Fatal(err)
	}
}

func TestCancelReturnsTrueExactlyWhenItPreventsTheRun(t *testing.T) {
	hs := newHarness(t)
	tm, _ := hs.s.After(5*time.Millisecond, hs.h, 1)
	if !hs.s.Cancel(tm) {
		t.Fatal("Cancel of a pending timer = false")
	}
	if hs.s.Cancel(tm) {
		t.Fatal("second Cancel = true")
	}
	if got := hs.barrier(10 * time.Millisecond); len(got) != 0 {
		t.Fatalf("cancelled timer ran: %+v", got)
	}
	fired, _ := hs.s.After(time.Millisecond, hs.h, 2)
	if got := hs.barrier(time.Millisecond); len(got) != 1 || got[0].Arg != 2 {
		t.Fatalf("events %+v", got)
	}
	if hs.s.Cancel(fired) {
		t.Fatal("Cancel after the run = true")
	}
	if hs.s.Cancel(Timer{}) || hs.s.Cancel(Timer{shard: 99, idx: 1 << 30, gen: 5}) {
		t.Fatal("Cancel of a zero or foreign handle = true")
	}
	st := hs.s.Stats()
	if st.Cancelled != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestResetMovesAPendingTimerAndNeverRevives(t *testing.T) {
	hs := newHarness(t)
	tm, _ := hs.s.After(5*time.Millisecond, hs.h, 1)
	hs.fake.Advance(3 * time.Millisecond)
	if !hs.s.Reset(tm, 10*time.Millisecond) { // now due at +13 ms
		t.Fatal("Reset of a pending timer = false")
	}
	if got := hs.barrier(9 * time.Millisecond); len(got) != 0 { // clock at +12 ms
		t.Fatalf("ran at its old deadline: %+v", got)
	}
	hs.fake.Advance(time.Millisecond)
	if ev := hs.next(); ev.Due != start+int64(13*time.Millisecond) || ev.Now < ev.Due {
		t.Fatalf("event %+v", ev)
	}
	if hs.s.Reset(tm, time.Millisecond) {
		t.Fatal("Reset revived a timer that already ran")
	}
	if hs.s.Reset(tm, -1) {
		t.Fatal("Reset with a negative delay = true")
	}
}

func TestEveryIsDriftFreeAndSkipsMissedOccurrences(t *testing.T) {
	hs := newHarness(t)
	const iv = 10 * time.Millisecond
	tm, err := hs.s.Every(iv, hs.h, 3)
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 3; k++ {
		hs.fake.Advance(iv)
		if ev := hs.next(); ev.Due != start+int64(k)*int64(iv) || ev.Timer != tm {
			t.Fatalf("run %d: %+v", k, ev)
		}
	}
	// Fall 35 ms behind: occurrences at 40, 50 and 60 ms are past; one run, two skipped.
	hs.fake.Advance(35 * time.Millisecond)
	if ev := hs.next(); ev.Due != start+int64(4*iv) {
		t.Fatalf("catch-up run %+v", ev)
	}
	if st := hs.s.Stats(); st.Skipped != 2 {
		t.Fatalf("skipped %d, want 2", st.Skipped)
	}
	hs.fake.Advance(5 * time.Millisecond) // 70 ms: back on the grid, not 65 + 10
	if ev := hs.next(); ev.Due != start+int64(7*iv) {
		t.Fatalf("next run due %d, want the grid point %d", ev.Due, start+int64(7*iv))
	}
	if !hs.s.Cancel(tm) {
		t.Fatal("Cancel of a running periodic timer = false")
	}
	if got := hs.barrier(5 * iv); len(got) != 0 {
		t.Fatalf("cancelled periodic timer ran: %+v", got)
	}
	if err := hs.s.verify(); err != nil {
		t.Fatal(err)
	}
}

func TestClosureTimers(t *testing.T) {
	hs := newHarness(t)
	var ran, ticks atomic.Int32
	done := make(chan struct{}, 8)
	if _, err := hs.s.AfterFunc(time.Millisecond, func() { ran.Add(1); done <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	cancelled, _ := hs.s.AfterFunc(time.Millisecond, func() { t.Error("cancelled closure ran") })
	hs.s.Cancel(cancelled)
	every, err := hs.s.EveryFunc(2*time.Millisecond, func() { ticks.Add(1); done <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	hs.fake.Advance(time.Millisecond)
	<-done
	hs.fake.Advance(time.Millisecond)
	<-done
	hs.fake.Advance(2 * time.Millisecond)
	<-done
	hs.s.Cancel(every)
	if ran.Load() != 1 || ticks.Load() != 2 {
		t.Fatalf("closure ran %d times, periodic closure %d times", ran.Load(), ticks.Load())
	}
	if _, err := hs.s.AfterFunc(time.Millisecond, nil); !errors.Is(err, ErrNilFunc) {
		t.Fatalf("nil func: %v", err)
	}
	if err := hs.s.verify(); err != nil {
		t.Fatal(err)
	}
}

func TestKeyedTimersShareAShard(t *testing.T) {
	fake := clock.NewFake(start)
	s, _ := New(WithClock(fake), WithShards(16))
	defer s.Close(context.Background())
	h, _ := s.Register(func(Event) {})
	a, _ := s.AfterKey("order-1234", time.Second, h, 1)
	b, _ := s.AtKey("order-1234", start+int64(time.Hour), h, 2)
	if a.shard != b.shard {
		t.Fatalf("same key on shards %d and %d", a.shard, b.shard)
	}
	shards := map[uint32]bool{}
	for i := 0; i < 200; i++ {
		tm, _ := s.After(time.Second, h, 0)
		shards[tm.shard] = true
	}
	// One goroutine spreads its timers over (at least) the Shards/GOMAXPROCS shards of
	// the P it runs on; more if it migrates between Ps.
	if len(shards) < s.perP {
		t.Fatalf("200 unkeyed timers used %d shards, fewer than the %d a P owns", len(shards), s.perP)
	}
}

func TestPreciseHandlerFiresAtTheExactDeadline(t *testing.T) {
	hs := newHarness(t)
	got := make(chan Event, 1)
	precise, _ := hs.s.Register(func(ev Event) { got <- ev }, Precise())
	if _, err := hs.s.After(1500*time.Microsecond, precise, 9); err != nil {
		t.Fatal(err)
	}
	hs.fake.Advance(1499 * time.Microsecond)
	hs.barrier(0)
	select {
	case ev := <-got:
		t.Fatalf("precise timer fired early: %+v", ev)
	default:
	}
	hs.fake.Advance(time.Microsecond) // exactly the deadline, between two ticks
	select {
	case ev := <-got:
		if ev.Now != ev.Due || ev.Due != start+int64(1500*time.Microsecond) {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(eventWait):
		t.Fatal("precise timer did not fire at its deadline")
	}
}

func TestBadInputGetsClearErrors(t *testing.T) {
	hs := newHarness(t)
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"negative delay", second(hs.s.After(-1, hs.h, 0)), ErrInvalidDelay},
		{"delay beyond MaxDelay", second(hs.s.After(MaxDelay+1, hs.h, 0)), ErrInvalidDelay},
		{"At beyond MaxDeadline", second(hs.s.At(MaxDeadline+1, hs.h, 0)), ErrInvalidDelay},
		{"reserved handler 0", second(hs.s.After(1, 0, 0)), ErrUnknownHandler},
		{"unregistered handler", second(hs.s.After(1, 999, 0)), ErrUnknownHandler},
		{"interval below the tick", second(hs.s.Every(time.Microsecond, hs.h, 0)), ErrInvalidInterval},
		{"nil handler func", second(hs.s.Register(nil)), ErrNilFunc},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}
	if hs.s.Len() != 0 {
		t.Fatalf("rejected calls left %d timers", hs.s.Len())
	}
	for _, c := range []struct {
		opt   Option
		field string
	}{
		{WithTick(time.Nanosecond), "Tick"},
		{WithShards(-1), "Shards"},
		{WithMaxBatch(1 << 20), "MaxBatch"},
		{WithInflightBatches(-2), "InflightBatches"},
		{WithMaxPending(-1), "MaxPending"},
	} {
		_, err := New(c.opt)
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("option %s: got %v", c.field, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestMaxPendingGivesBackPressure(t *testing.T) {
	hs := newHarness(t, WithMaxPending(3))
	var tms []Timer
	for i := 0; i < 3; i++ {
		tm, err := hs.s.After(time.Second, hs.h, 0)
		if err != nil {
			t.Fatal(err)
		}
		tms = append(tms, tm)
	}
	if _, err := hs.s.After(time.Second, hs.h, 0); !errors.Is(err, ErrFull) {
		t.Fatalf("4th timer: %v, want ErrFull", err)
	}
	hs.s.Cancel(tms[0])
	if _, err := hs.s.After(time.Second, hs.h, 0); err != nil {
		t.Fatalf("after a cancel: %v", err)
	}
}

func TestPanickingCallbackIsRecoveredAndTheBatchGoesOn(t *testing.T) {
	var handled atomic.Int32
	hs := newHarness(t, WithPanicHandler(func(any) { handled.Add(1) }))
	boom, _ := hs.s.Register(func(Event) { panic("boom") })
	hs.s.After(time.Millisecond, hs.h, 1)
	hs.s.After(time.Millisecond, boom, 0)
	hs.s.After(time.Millisecond, hs.h, 2)
	got := hs.barrier(time.Millisecond)
	if len(got) != 2 {
		t.Fatalf("%d of 2 healthy timers ran around the panic", len(got))
	}
	if st := hs.s.Stats(); st.Panics != 1 || handled.Load() != 1 {
		t.Fatalf("panics %d, handler calls %d", st.Panics, handled.Load())
	}
}

func TestCallbacksMayScheduleAndCancel(t *testing.T) {
	hs := newHarness(t)
	var chain Handler
	chain, _ = hs.s.Register(func(ev Event) {
		victim, _ := hs.s.After(time.Millisecond, hs.h, 100)
		hs.s.Cancel(victim)
		hs.s.After(time.Millisecond, hs.h, ev.Arg+1)
		hs.events <- ev
	})
	hs.s.After(time.Millisecond, chain, 1)
	hs.fake.Advance(time.Millisecond)
	if ev := hs.next(); ev.Arg != 1 {
		t.Fatalf("chain event %+v", ev)
	}
	if got := hs.barrier(time.Millisecond); len(got) != 1 || got[0].Arg != 2 {
		t.Fatalf("events %+v", got)
	}
}

func TestCloseDropsPendingAndWaitsForRunningCallbacks(t *testing.T) {
	fake := clock.NewFake(start)
	s, _ := New(WithClock(fake), WithShards(2))
	entered, release := make(chan struct{}), make(chan struct{})
	slow, _ := s.Register(func(Event) { close(entered); <-release })
	idle, _ := s.Register(func(Event) {})
	s.After(time.Millisecond, slow, 0)
	for i := 0; i < 10; i++ {
		s.After(time.Hour, idle, 0)
	}
	fake.Advance(time.Millisecond)
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a callback still running: %v, want deadline exceeded", err)
	}
	if _, err := s.After(time.Second, idle, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("After on a closed scheduler: %v", err)
	}
	if err := s.Close(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if st := s.Stats(); st.Dropped != 10 {
		t.Fatalf("dropped %d, want the 10 pending timers", st.Dropped)
	}
	close(release)
	waitPoolIdle(t, s)
}

// TestCloseReleasesDroppedTimers: a timer Close dropped is gone. Cancel and Reset of it
// change nothing and say so, and Len and Stats.Pending no longer count it, whether it sat
// in the wheel, on the due list (due, not yet collected), in the heap, or was periodic or
// a closure.
func TestCloseReleasesDroppedTimers(t *testing.T) {
	fake := clock.NewFake(start)
	// One batch of one timer: while the slow callback holds it, a second due timer waits
	// on the due list.
	s, err := New(WithClock(fake), WithShards(1), WithInflightBatches(1), WithMaxBatch(1))
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	slow, _ := s.Register(func(Event) { close(entered); <-release })
	idle, _ := s.Register(func(Event) {})
	precise, _ := s.Register(func(Event) {}, Precise())
	var timers []Timer
	add := func(tm Timer, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		timers = append(timers, tm)
	}
	if _, err := s.After(time.Millisecond, slow, 0); err != nil {
		t.Fatal(err)
	}
	add(s.After(time.Millisecond, idle, 0)) // collected after slow's: left on the due list
	fake.Advance(time.Millisecond)
	<-entered
	sh := s.shards[0]
	sh.mu.Lock()
	onDue := sh.slab.at(dueList).next == timers[0].idx
	sh.mu.Unlock()
	if !onDue {
		t.Fatal("setup: the second due timer is not on the due list")
	}
	for i := range 5 {
		add(s.After(time.Duration(i+1)*time.Hour, idle, uint64(i)))
	}
	add(s.After(365*24*time.Hour, idle, 0)) // a high wheel level
	add(s.After(time.Hour, precise, 0))
	add(s.Every(time.Minute, idle, 0))
	add(s.AfterFunc(time.Hour, func() {}))
	add(s.EveryFunc(time.Minute, func() {}))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a callback still running: %v, want deadline exceeded", err)
	}
	defer func() {
		close(release)
		waitPoolIdle(t, s)
	}()
	if err := s.verify(); err != nil {
		t.Fatal(err)
	}
	for i, tm := range timers {
		if s.Cancel(tm) {
			t.Errorf("timer %d: Cancel after Close = true; Close already dropped it", i)
		}
		if s.Reset(tm, time.Second) {
			t.Errorf("timer %d: Reset after Close = true; Close already dropped it", i)
		}
	}
	st := s.Stats()
	if n := s.Len(); n != 0 || st.Pending != 0 {
		t.Errorf("after Close: Len %d, Stats.Pending %d; want 0 (every timer was dropped)", n, st.Pending)
	}
	if st.Dropped != uint64(len(timers)) || st.Cancelled != 0 {
		t.Errorf("after Close: Dropped %d, Cancelled %d; want %d, 0", st.Dropped, st.Cancelled, len(timers))
	}
}

// TestRealClockNeverEarly runs timers on the system clock from several goroutines and
// checks each against an independent monotonic reading taken when it was scheduled.
func TestRealClockNeverEarly(t *testing.T) {
	s, err := New(WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	const perG, goroutines = 500, 4
	type want struct {
		at    time.Time
		delay time.Duration
	}
	wants := make([]want, perG*goroutines)
	var early atomic.Int32
	var wg sync.WaitGroup
	wg.Add(len(wants))
	h, _ := s.Register(func(ev Event) {
		w := wants[ev.Arg]
		if time.Since(w.at) < w.delay || ev.Now < ev.Due {
			early.Add(1)
		}
		wg.Done()
	})
	var sched sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		sched.Add(1)
		go func() {
			defer sched.Done()
			for i := 0; i < perG; i++ {
				k := g*perG + i
				wants[k] = want{time.Now(), time.Duration(k%30) * time.Millisecond}
				if _, err := s.After(wants[k].delay, h, uint64(k)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	sched.Wait()
	waitGroup(t, &wg)
	if early.Load() != 0 {
		t.Fatalf("%d timers fired early", early.Load())
	}
}

// waitPoolIdle lets released callback goroutines exit before goleak looks.
func waitPoolIdle(t *testing.T, s *Scheduler) {
	t.Helper()
	waitfor.Until(t, "callback pool idle", func() bool { return s.pool.Running() == 0 })
}

func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(eventWait):
		t.Fatalf("timers did not all fire within %v", eventWait)
	}
}
