package task

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Limits hold runs back; they never fail them. A run that is due goes to a worker as
// ever; at the top of runOne, before its attempt is counted, it passes its type's rate
// limit (ratelimit.go) and then its task's concurrency key. A run over either limit is
// parked in that limiter's waitQueue, still DUE, still in phaseQueued (the parked item
// names its record, as a queued one does), and its worker moves on. When capacity frees
// (a slot's attempt ends, a token comes due, a limit is raised or removed) the earliest
// due waiter is granted it and queued again (dispatch), carrying in runItem.passed the
// gates it has passed, so that it is never charged twice. A cancelled or replaced run
// that waits is found stale when it is granted; a slot granted to it passes on.

// gates is the set of limits a run item has passed.
type gates uint8

const (
	gateRate gates = 1 << iota // its type's rate limit admitted it (or it has none)
	gateSlot                   // it holds a slot of its task's concurrency key
)

// Concurrency puts a task under a concurrency key: at most the key's limit of runs of the
// tasks naming it, in its namespace, are RUNNING at once (a deferred attempt counts until
// Complete). Runs over the limit wait, DUE, without using an attempt, and start in
// due-time order as slots free.
type Concurrency struct {
	// Key names what the runs share (a database, a customer's account): 1 to
	// MaxConcurrencyKeyLen bytes of UTF-8.
	Key string
	// Limit, if not 0, sets the key's limit, the latest Submit's winning, unless
	// Engine.SetConcurrencyLimit has set one, which takes precedence. 0 leaves the limit
	// as it is: 1 for a key that has none. At most MaxConcurrencyLimit.
	Limit int
	// lim is the key's limiter, set in the engine's own value (resolveKey), which the
	// tasks naming the key with the same Limit share, as do their Info, Run and
	// DeadLetter: read-only. nil in a caller's value.
	lim *concLimiter
}

// Limits on concurrency keys.
const (
	MaxConcurrencyKeyLen = 256
	MaxConcurrencyLimit  = 1 << 20
)

// validateConcurrency checks c's fields, naming the bad one.
func validateConcurrency(c *Concurrency) error {
	switch {
	case c.Key == "" || len(c.Key) > MaxConcurrencyKeyLen || !utf8.ValidString(c.Key):
		return fmt.Errorf("%w: Concurrency.Key must be valid UTF-8 of 1 to %d bytes", ErrInvalidTask, MaxConcurrencyKeyLen)
	case c.Limit < 0 || c.Limit > MaxConcurrencyLimit:
		return fmt.Errorf("%w: Concurrency.Limit %d outside [0, %d]", ErrInvalidTask, c.Limit, MaxConcurrencyLimit)
	}
	return nil
}

// concKey names a limiter: keys are scoped to their namespace.
type concKey struct{ ns, key string }

// keyTable maps the concurrency keys in use to their limiters. A limiter exists while a
// record names its key, a run holds or waits for one of its slots, or
// SetConcurrencyLimit has set its limit; then it is dropped, so that keys named once
// (one per customer, say) cost nothing once their tasks are gone.
//
// Lock order: shard.mu, then keyTable.mu, then concLimiter.mu.
type keyTable struct {
	// mu guards m: read-locked to look a key up (every keyed Submit), write-locked to add
	// or drop one. A limiter is dropped only with mu write-locked and its refs at 0, and
	// refs are only raised under mu, so a key found under the read lock stays.
	mu  sync.RWMutex
	m   map[concKey]*concLimiter
	max int // Options.MaxConcurrencyKeys; read-only
}

// concLimiter is one key's slots and waiters.
//
// Invariants (under mu): running >= 0; waiting is non-empty only while running >= limit()
// (grantLocked restores it after every change); refs equals the records naming the key
// (checked by Engine.verify while nothing runs).
type concLimiter struct {
	key concKey // read-only
	// refs counts the records whose task names the key: raised under keyTable.mu (read
	// or write), lowered without it; only the removal that takes it to 0 locks the table.
	refs atomic.Int64

	mu sync.Mutex
	// shared is the engine's Concurrency value for the latest Limit submitted with the
	// key, which Submits of that Limit share instead of allocating their own.
	shared *Concurrency
	// submitted is the latest Limit a Submit gave (0: none); override is
	// SetConcurrencyLimit's (0: none), which wins.
	submitted, override int
	// running counts the slots held: RUNNING attempts of the key's tasks, and runs
	// granted a slot on their way back to a worker.
	running int
	seq     uint64 // waiters parked so far: their order among equal due times
	waiting waitQueue
}

// limit is the key's limit. Requires l.mu.
func (l *concLimiter) limit() int {
	switch {
	case l.override > 0:
		return l.override
	case l.submitted > 0:
		return l.submitted
	}
	return 1
}

// idle reports whether the limiter holds nothing but its key. Requires l.mu.
func (l *concLimiter) idle() bool {
	return l.override == 0 && l.running == 0 && l.waiting.len() == 0
}

// resolveKey returns the engine's value of a submitted task's Concurrency c (valid),
// pointing at its key's limiter, which it creates if needed, and counts the task's
// reference; a Limit in c becomes the key's. The value is shared by the key's tasks of
// the same Limit, so that a Submit naming a key in use allocates nothing for it.
// ErrOverloaded when a new key would exceed Options.MaxConcurrencyKeys. Cost: O(1)
// under the key table's lock.
func (e *Engine) resolveKey(ns string, c *Concurrency) (*Concurrency, error) {
	k := concKey{ns, c.Key}
	e.keys.mu.RLock()
	l := e.keys.m[k]
	if l != nil {
		l.refs.Add(1)
	}
	e.keys.mu.RUnlock()
	if l == nil {
		e.keys.mu.Lock()
		if l = e.keys.m[k]; l == nil {
			if len(e.keys.m) >= e.keys.max {
				e.keys.mu.Unlock()
				return nil, fmt.Errorf("%w: %d concurrency keys in use (Options.MaxConcurrencyKeys)", ErrOverloaded, len(e.keys.m))
			}
			l = &concLimiter{key: k}
			e.keys.m[k] = l
		}
		l.refs.Add(1)
		e.keys.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.Limit > 0 && c.Limit != l.submitted {
		l.submitted = c.Limit
		e.grantLocked(l) // a raised limit lets waiters go
	}
	if l.shared == nil || l.shared.Limit != c.Limit {
		l.shared = &Concurrency{Key: k.key, Limit: c.Limit, lim: l}
	}
	return l.shared, nil
}

// unrefKey drops a record's reference to its key's limiter (the record is removed, or
// never made it into the table). Requires the shard's lock, if any.
func (e *Engine) unrefKey(c *Concurrency) {
	if c.lim.refs.Add(-1) != 0 {
		return
	}
	e.keys.mu.Lock()
	e.dropIfIdleLocked(c.lim)
	e.keys.mu.Unlock()
}

// dropIfIdleLocked removes l from the key table if nothing needs it any more. Requires
// keys.mu write-locked (and not l.mu).
func (e *Engine) dropIfIdleLocked(l *concLimiter) {
	if l.refs.Load() != 0 {
		return
	}
	l.mu.Lock()
	idle := l.idle()
	l.mu.Unlock()
	if idle && e.keys.m[l.key] == l {
		delete(e.keys.m, l.key)
	}
}

// acquireSlot takes one of the key's slots for item's run, or parks the item as a waiter
// (false). Requires sh.mu of item's shard.
func (e *Engine) acquireSlot(l *concLimiter, item runItem) bool {
	l.mu.Lock()
	if l.running < l.limit() {
		l.running++
		l.mu.Unlock()
		return true
	}
	l.seq++
	l.waiting.push(waiter{dueNs: item.rec.dueNs, seq: l.seq, item: item})
	l.mu.Unlock()
	e.limitWaiting.Add(1)
	return false
}

// releaseSlot gives back a slot of l: its attempt ended, or the run granted it was found
// stale. The earliest waiter, if any, is granted it. Requires the lock of the shard
// whose record held it.
func (e *Engine) releaseSlot(l *concLimiter) {
	l.mu.Lock()
	l.running--
	e.grantLocked(l)
	idle := l.idle()
	l.mu.Unlock()
	if idle && l.refs.Load() == 0 { // its last record was removed while a run held a slot
		e.keys.mu.Lock()
		e.dropIfIdleLocked(l)
		e.keys.mu.Unlock()
	}
}

// grantLocked hands free slots to the earliest waiters and queues them again. Requires
// l.mu.
func (e *Engine) grantLocked(l *concLimiter) {
	for l.waiting.len() > 0 && l.running < l.limit() {
		w := l.waiting.pop()
		w.item.passed |= gateSlot
		l.running++
		e.limitWaiting.Add(-1)
		e.dispatch(w.item)
	}
}

// dispatch queues a run item that a limit has let go: at once if the queue has room and
// nothing waits in the overflow before it, and otherwise at the overflow's end, which
// one goroutine (drainOverflow) hands on in order as the queue frees. It never waits
// itself: its callers hold locks, or are workers, which would wait for themselves.
// Cost: one uncontended lock and a non-blocking send; the overflow holds 32 B an item
// (bounded by the runs limits hold, themselves bounded by Options.MaxTasks).
func (e *Engine) dispatch(item runItem) {
	o := &e.overflow
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.items) == o.head {
		select {
		case e.runq <- item:
			return
		default:
		}
	}
	o.items = append(o.items, item)
	if !o.draining {
		o.draining = true
		go e.drainOverflow()
	}
}

// overflow holds the run items that dispatch could not queue at once, oldest at head.
type overflow struct {
	mu       sync.Mutex
	items    []runItem // guarded by mu; items[head:] wait
	head     int       // guarded by mu
	draining bool      // a drainOverflow goroutine runs; guarded by mu
}

// drainOverflow sends the overflow's items to the queue in order, waiting for room,
// until it is empty (or the engine closes, which drops them, as Close drops what is
// queued).
func (e *Engine) drainOverflow() {
	o := &e.overflow
	for {
		o.mu.Lock()
		if o.head == len(o.items) || e.base.Err() != nil {
			o.items, o.head, o.draining = nil, 0, false
			o.mu.Unlock()
			return
		}
		item := o.items[o.head]
		o.items[o.head] = runItem{} // it names a record: do not keep it reachable
		if o.head++; o.head >= shrinkAbove && 2*o.head >= len(o.items) {
			// Compact, so that an overflow that never empties does not grow for good.
			n := copy(o.items, o.items[o.head:])
			clear(o.items[n:])
			o.items, o.head = o.items[:n], 0
		}
		o.mu.Unlock()
		select {
		case e.runq <- item:
		case <-e.base.Done():
		}
	}
}

// SetConcurrencyLimit sets the limit of a concurrency key in a namespace ("" is
// DefaultNamespace) at runtime, over any limit its tasks' Submits gave; limit 0 removes
// that override (the latest Submit's limit applies again). A raised limit starts waiting
// runs at once, earliest due first; a lowered one lets running attempts finish and
// starts no more until the key is below it. Setting a limit keeps the key's limiter for
// the engine's life (it counts towards Options.MaxConcurrencyKeys) until it is removed.
// Errors: ErrInvalidTask naming the bad argument; ErrOverloaded for a new key past
// Options.MaxConcurrencyKeys. Cost: O(1), plus O(log n) per waiting run started.
func (e *Engine) SetConcurrencyLimit(namespace, key string, limit int) error {
	if err := validateConcurrency(&Concurrency{Key: key, Limit: limit}); err != nil {
		return err
	}
	k := concKey{nsOrDefault(namespace), key}
	e.keys.mu.Lock()
	defer e.keys.mu.Unlock()
	l := e.keys.m[k]
	if l == nil {
		if limit == 0 {
			return nil
		}
		if len(e.keys.m) >= e.keys.max {
			return fmt.Errorf("%w: %d concurrency keys in use (Options.MaxConcurrencyKeys)", ErrOverloaded, len(e.keys.m))
		}
		l = &concLimiter{key: k}
		e.keys.m[k] = l
	}
	l.mu.Lock()
	l.override = limit
	e.grantLocked(l)
	l.mu.Unlock()
	e.dropIfIdleLocked(l)
	return nil
}

// KeyInfo is a snapshot of a concurrency key.
type KeyInfo struct {
	Limit   int // in force now
	Running int // slots held: running attempts, and waiting runs just granted one
	Waiting int // runs held back by the limit
}

// ConcurrencyKey returns a snapshot of a concurrency key in a namespace; ok is false if
// the engine holds no limiter for it (no task names it and no limit was set). Cost: O(1).
func (e *Engine) ConcurrencyKey(namespace, key string) (info KeyInfo, ok bool) {
	e.keys.mu.RLock()
	l := e.keys.m[concKey{nsOrDefault(namespace), key}]
	e.keys.mu.RUnlock()
	if l == nil {
		return KeyInfo{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return KeyInfo{Limit: l.limit(), Running: l.running, Waiting: l.waiting.len()}, true
}

// gate passes item's run through its limits, in the order rate, then concurrency key,
// at clock reading now. It reports false when a limiter has parked the item (the run
// waits; the caller lets go of it). Requires sh.mu of item's shard, and a run that can
// start (DUE, current).
func (e *Engine) gate(item *runItem, now int64) bool {
	rec := item.rec
	if item.passed&gateRate == 0 {
		if rl := e.rateOf(rec.task.Type); rl != nil && !e.admitRate(rl, *item, now) {
			item.sh.limitWaits++
			return false
		}
		item.passed |= gateRate
	}
	if c := rec.task.Concurrency; c != nil && item.passed&gateSlot == 0 {
		if !e.acquireSlot(c.lim, *item) {
			item.sh.limitWaits++
			return false
		}
		item.passed |= gateSlot
	}
	return true
}

// verifyKeys checks every limiter against the records naming its key (refs), and its
// invariants. Exact only while no Submit, removal or run is in progress.
func (e *Engine) verifyKeys() error {
	refs := map[*concLimiter]int64{}
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for _, rec := range sh.slots {
			if rec != nil && rec.task.Concurrency != nil {
				refs[rec.task.Concurrency.lim]++
			}
		}
		sh.mu.Unlock()
	}
	e.keys.mu.Lock()
	defer e.keys.mu.Unlock()
	for k, l := range e.keys.m {
		if l.key != k {
			return fmt.Errorf("concurrency key %v: limiter of %v", k, l.key)
		}
		if got, want := l.refs.Load(), refs[l]; got != want {
			return fmt.Errorf("concurrency key %v: %d references counted, %d records name it", k, got, want)
		}
		delete(refs, l)
		l.mu.Lock()
		err := l.waiting.verify()
		switch {
		case err != nil:
		case l.running < 0:
			err = fmt.Errorf("%d slots held", l.running)
		case l.waiting.len() > 0 && l.running < l.limit():
			err = fmt.Errorf("%d runs wait with %d of %d slots held", l.waiting.len(), l.running, l.limit())
		case l.refs.Load() == 0 && l.idle():
			err = fmt.Errorf("idle, and kept")
		}
		l.mu.Unlock()
		if err != nil {
			return fmt.Errorf("concurrency key %v: %w", k, err)
		}
	}
	for l, n := range refs {
		return fmt.Errorf("concurrency key %v: %d records name a limiter the table does not hold", l.key, n)
	}
	return nil
}
