package bench

import (
	"context"
	"time"

	"github.com/tock-sched/tock/core/timer"
)

// Tock is a timer.Scheduler with one registered handler; a timer's argument is its slot.
type Tock struct {
	opts    []timer.Option
	hopts   []timer.HandlerOption
	s       *timer.Scheduler
	h       timer.Handler
	handles []timer.Timer
}

// NewTock returns a constructor of Tock with the given scheduler options (none: defaults).
func NewTock(opts ...timer.Option) func() Timers {
	return func() Timers { return &Tock{opts: opts} }
}

// NewTockPrecise is NewTock with a Precise handler: timers live in the 4-ary heap and
// fire at their deadline instead of the next tick boundary.
func NewTockPrecise() Timers { return &Tock{hopts: []timer.HandlerOption{timer.Precise()}} }

func (t *Tock) Init(slots int, onFire func(slot int, due int64)) error {
	s, err := timer.New(t.opts...)
	if err != nil {
		return err
	}
	if onFire == nil {
		onFire = func(int, int64) {}
	}
	h, err := s.Register(func(ev timer.Event) { onFire(int(ev.Arg), ev.Due) }, t.hopts...)
	if err != nil {
		_ = s.Close(context.Background())
		return err
	}
	t.s, t.h, t.handles = s, h, make([]timer.Timer, slots)
	return nil
}

func (t *Tock) Schedule(slot int, d time.Duration) error {
	tm, err := t.s.After(d, t.h, uint64(slot))
	t.handles[slot] = tm
	return err
}

func (t *Tock) At(slot int, due int64) error {
	tm, err := t.s.At(due, t.h, uint64(slot))
	t.handles[slot] = tm
	return err
}

func (t *Tock) Cancel(slot int) bool { return t.s.Cancel(t.handles[slot]) }

func (t *Tock) Reset(slot int, d time.Duration) bool { return t.s.Reset(t.handles[slot], d) }

func (t *Tock) Now() int64 { return t.s.Now() }

// Wakeups is the drivers' wake-up count, all shards.
func (t *Tock) Wakeups() uint64 { return t.s.Stats().Wakeups }

func (t *Tock) Close() {
	if t.s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = t.s.Close(ctx)
	t.s, t.handles = nil, nil
}
