package task

import (
	"fmt"
	"math"
	"sync"

	"github.com/tock-sched/tock/core/timer"
)

// Limits on a rate limit (SetRateLimit).
const (
	// MinRate and MaxRate bound runs per second: MaxRate is one run a nanosecond (the
	// clock's unit); MinRate, one in 1,000 s, keeps a full bucket's span within what a
	// clock reading holds.
	MinRate = 1e-3
	MaxRate = 1e9
	// MaxBurst bounds the runs a rate limit lets start at once after a quiet spell.
	MaxBurst = 1 << 20
)

// rateLimiter is one task type's rate limit: a token bucket of burst tokens refilled at
// rate, kept as the generic cell rate algorithm does, in integers: tat is the
// theoretical arrival time (a clock reading) of the next run at the steady rate, and a
// run may start at now iff now >= tat - tolerance, which then moves tat to
// max(tat, now) + interval. So over any span d, at most burst + d/interval runs start,
// and no rounding accumulates (interval is rounded once, to the nanosecond).
//
// Invariants (under mu): waiting is non-empty only while no run may start now or a wake
// timer is armed for when one may; the timer is armed iff waiting is non-empty.
type rateLimiter struct {
	idx uint64 // in Engine.rateList: the wake timer's argument; read-only

	mu        sync.Mutex
	enabled   bool  // false once SetRateLimit removed the limit (the limiter is kept for the type)
	interval  int64 // ns between runs at the steady rate
	tolerance int64 // (burst-1) × interval
	tat       int64
	seq       uint64
	waiting   waitQueue
	wake      timer.Timer // armed for the head waiter's admission; zero when none
}

// allowLocked reports whether a run may start at clock reading now, and if so counts it.
// Requires r.mu.
func (r *rateLimiter) allowLocked(now int64) bool {
	if now < r.tat-r.tolerance {
		return false
	}
	r.tat = max(r.tat, now) + r.interval
	return true
}

// rateOf returns the enabled rate limiter of a task type, or nil. One atomic load when no
// type has a rate limit. Safe without locks.
func (e *Engine) rateOf(taskType string) *rateLimiter {
	m := e.rates.Load()
	if m == nil {
		return nil
	}
	return (*m)[taskType]
}

// admitRate lets item's run start at clock reading now if r allows it and no earlier
// run waits; otherwise it parks the item and makes sure a wake timer is armed (false).
// Requires sh.mu of item's shard.
func (e *Engine) admitRate(r *rateLimiter, item runItem, now int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.enabled || r.waiting.len() == 0 && r.allowLocked(now) {
		return true
	}
	r.seq++
	r.waiting.push(waiter{dueNs: item.rec.dueNs, seq: r.seq, item: item})
	e.limitWaiting.Add(1)
	if r.wake.IsZero() {
		e.armWakeLocked(r)
	}
	return false
}

// releaseRateLocked starts the waiters that r allows now, earliest due first, and arms
// the wake timer for the next one, if any wait. Requires r.mu.
func (e *Engine) releaseRateLocked(r *rateLimiter) {
	now := e.clock.Now()
	for r.waiting.len() > 0 && (!r.enabled || r.allowLocked(now)) {
		w := r.waiting.pop()
		w.item.passed |= gateRate
		e.limitWaiting.Add(-1)
		e.dispatch(w.item)
	}
	if r.waiting.len() > 0 && r.wake.IsZero() {
		e.armWakeLocked(r)
	}
}

// armWakeLocked arms r's wake timer for when the next run may start. A scheduler that
// refuses (it is closing) leaves the waiters where they are: Close drops them anyway.
// Requires r.mu.
func (e *Engine) armWakeLocked(r *rateLimiter) {
	if tm, err := e.timers.At(r.tat-r.tolerance, e.hRate, r.idx); err == nil {
		r.wake = tm
	}
}

// onRateWake runs in the timer pool when a rate limiter's next run may start.
func (e *Engine) onRateWake(ev timer.Event) {
	e.ratesMu.Lock()
	r := e.rateList[ev.Arg]
	e.ratesMu.Unlock()
	r.mu.Lock()
	if r.wake == ev.Timer {
		r.wake = timer.Timer{}
		e.releaseRateLocked(r)
	}
	r.mu.Unlock()
}

// SetRateLimit limits how many runs of a task type start per second, across
// namespaces: a token bucket refilled at perSecond that holds burst tokens (so after a
// quiet spell up to burst runs start at once). Runs over the limit wait, DUE, without
// using an attempt, and start in due-time order as tokens come. perSecond 0 removes the
// limit and starts every waiting run at once (burst is then ignored). A new limit on a
// type that has one applies from now; runs it let start before are not taken back.
// Errors: ErrInvalidTask naming the bad argument. A limiter stays allocated for every
// type ever limited (types are few; there is one per handler). Cost: O(types) to change
// a limit (the table is copied, so that runs read it without a lock), plus O(log n) per
// waiting run started; a run of a limited type pays one short lock.
func (e *Engine) SetRateLimit(taskType string, perSecond float64, burst int) error {
	switch {
	case taskType == "" || len(taskType) > MaxTypeLen:
		return fmt.Errorf("%w: rate limit type must be 1 to %d bytes", ErrInvalidTask, MaxTypeLen)
	case math.IsNaN(perSecond) || perSecond != 0 && (perSecond < MinRate || perSecond > MaxRate):
		return fmt.Errorf("%w: rate limit of %q: perSecond %v is neither 0 nor in [%v, %v]", ErrInvalidTask, taskType, perSecond, MinRate, MaxRate)
	case perSecond != 0 && (burst < 1 || burst > MaxBurst):
		return fmt.Errorf("%w: rate limit of %q: burst %d outside [1, %d]", ErrInvalidTask, taskType, burst, MaxBurst)
	}
	e.ratesMu.Lock()
	defer e.ratesMu.Unlock()
	r := e.rateByType[taskType]
	if r == nil {
		if perSecond == 0 {
			return nil
		}
		r = &rateLimiter{idx: uint64(len(e.rateList))}
		e.rateList = append(e.rateList, r)
		e.rateByType[taskType] = r
	}
	r.mu.Lock()
	if perSecond != 0 {
		now := e.clock.Now()
		if r.enabled {
			// From now at the new rate: no run waits longer than one new interval for
			// what the old rate had promised later.
			r.tat = min(r.tat, now+int64(math.Round(1e9/perSecond)))
		} else {
			r.tat = now // a full bucket: burst runs may start at once
		}
		r.interval = max(int64(math.Round(1e9/perSecond)), 1)
		r.tolerance = int64(burst-1) * r.interval
	}
	r.enabled = perSecond != 0
	if !r.wake.IsZero() {
		e.timers.Cancel(r.wake) // if it already fired, onRateWake finds it stale
		r.wake = timer.Timer{}
	}
	e.releaseRateLocked(r)
	r.mu.Unlock()
	// Publish the enabled limiters for runs to read without a lock; nil when none.
	next := map[string]*rateLimiter{}
	if m := e.rates.Load(); m != nil {
		for typ, l := range *m {
			next[typ] = l
		}
	}
	if r.enabled {
		next[taskType] = r
	} else {
		delete(next, taskType)
	}
	if len(next) == 0 {
		e.rates.Store(nil)
	} else {
		e.rates.Store(&next)
	}
	return nil
}

// RateLimit returns a task type's rate limit (0, 0 when it has none) and how many runs of
// the type wait for it. Cost: O(1).
func (e *Engine) RateLimit(taskType string) (perSecond float64, burst, waiting int) {
	e.ratesMu.Lock()
	r := e.rateByType[taskType]
	e.ratesMu.Unlock()
	if r == nil {
		return 0, 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.enabled {
		return 0, 0, r.waiting.len()
	}
	return 1e9 / float64(r.interval), int(r.tolerance/r.interval) + 1, r.waiting.len()
}
