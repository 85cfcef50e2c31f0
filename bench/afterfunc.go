package bench

import "time"

// AfterFunc is time.AfterFunc with one func value per slot, built in Init: the only
// allocation per Schedule is the runtime's timer. Its clock is time.Since(base).
type AfterFunc struct {
	base   time.Time
	timers []*time.Timer
	fns    []func()
	dues   []int64 // deadlines given to At, read by the slot's func
}

// NewAfterFunc returns a fresh AfterFunc.
func NewAfterFunc() Timers { return &AfterFunc{} }

func (a *AfterFunc) Init(slots int, onFire func(slot int, due int64)) error {
	if onFire == nil {
		onFire = func(int, int64) {}
	}
	a.base = time.Now()
	a.timers = make([]*time.Timer, slots)
	a.fns = make([]func(), slots)
	a.dues = make([]int64, slots)
	// Each func reads its own copy of the slice header, not a.dues: Close cannot stop a
	// func the runtime has already started (Timer.Stop does not wait for it), and it
	// clears a's fields, which such a func would then index.
	dues := a.dues
	for i := range a.fns {
		a.fns[i] = func() { onFire(i, dues[i]) }
	}
	return nil
}

func (a *AfterFunc) Schedule(slot int, d time.Duration) error {
	a.timers[slot] = time.AfterFunc(d, a.fns[slot])
	return nil
}

// At converts due to a delay on the same clock. The runtime takes its own reading after
// this one, so its deadline is at or after due: lateness is never understated.
func (a *AfterFunc) At(slot int, due int64) error {
	a.dues[slot] = due
	a.timers[slot] = time.AfterFunc(time.Duration(due-a.Now()), a.fns[slot])
	return nil
}

func (a *AfterFunc) Cancel(slot int) bool { return a.timers[slot].Stop() }

func (a *AfterFunc) Reset(slot int, d time.Duration) bool { return a.timers[slot].Reset(d) }

func (a *AfterFunc) Now() int64 { return int64(time.Since(a.base)) }

func (a *AfterFunc) Close() {
	for _, t := range a.timers {
		if t != nil {
			t.Stop()
		}
	}
	a.timers, a.fns, a.dues = nil, nil, nil
}
