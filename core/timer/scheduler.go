package timer

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/panjf2000/ants/v2"

	"github.com/tock-sched/tock/core/clock"
)

// Timer is a handle to a scheduled timer. It is a small value (copy it freely); the zero
// Timer names no timer. A handle goes stale when its timer fires (one-shot) or is
// cancelled; a stale handle never affects another timer, even one reusing its node, until
// that node has been reused 2^32 times.
type Timer struct {
	shard uint32
	idx   uint32
	gen   uint32
}

// IsZero reports whether t is the zero Timer.
func (t Timer) IsZero() bool { return t == Timer{} }

// Handler names a callback registered with Scheduler.Register.
type Handler uint32

// Event is what a handler receives when its timer fires.
type Event struct {
	Timer Timer  // the timer that fired; still valid for a periodic timer
	Arg   uint64 // the argument given when it was scheduled
	Due   int64  // its deadline, on the scheduler's clock (see Scheduler.Now)
	Now   int64  // the clock reading at which it was collected; Now >= Due always
}

// HandlerOption modifies a handler at registration.
type HandlerOption func(*handlerEntry)

// Precise makes the handler's timers fire at their exact deadline (as exact as the Go
// runtime wakes a goroutine) instead of at the next tick boundary: they are kept in the
// shard's 4-ary heap, O(log n) per operation, instead of the O(1) wheel.
func Precise() HandlerOption { return func(h *handlerEntry) { h.precise = true } }

type handlerEntry struct {
	fn      func(Event)
	precise bool
}

const (
	// closureHandler is the reserved handler of AfterFunc/EveryFunc timers.
	closureHandler = 0
	// preciseFlag in node.fn routes a node to the heap.
	preciseFlag = uint32(1) << 30
	handlerMask = preciseFlag - 1
	// MaxHandlers is how many handlers one scheduler can register.
	MaxHandlers = 1 << 20
)

// Scheduler is a lock-sharded timer scheduler. All methods are safe for concurrent use.
type Scheduler struct {
	opts   Options
	clock  clock.Clock
	shards []*shard
	perP   int // shards owned by each P for unkeyed timers (see localShard)
	pool   *ants.PoolWithFunc

	handlers atomic.Pointer[[]handlerEntry] // copy-on-write; index = Handler
	regMu    sync.Mutex                     // serialises Register

	closed  atomic.Bool
	stop    chan struct{}
	drivers sync.WaitGroup
	panics  atomic.Uint64
}

// New starts a scheduler: one driver goroutine per shard and a pool of
// Shards × InflightBatches workers (started lazily). Close it to stop them.
func New(opts ...Option) (*Scheduler, error) {
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	o.setDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{opts: o, clock: o.Clock, stop: make(chan struct{})}
	handlers := []handlerEntry{closureHandler: {}}
	s.handlers.Store(&handlers)
	// The pool is sized so that every batch can have a worker: the batches, not the pool,
	// are the back-pressure. Purging idle workers is off: at most Shards × InflightBatches
	// parked goroutines exist, and re-creating them would allocate on the fire path.
	pool, err := ants.NewPoolWithFunc(o.Shards*o.InflightBatches, s.runBatch, ants.WithDisablePurge(true))
	if err != nil {
		return nil, fmt.Errorf("timer: worker pool: %w", err)
	}
	s.pool = pool
	limit := 0
	if o.MaxPending > 0 {
		limit = (o.MaxPending + o.Shards - 1) / o.Shards
	}
	tickNs := int64(o.Tick)
	startTick := uint64(max(s.clock.Now(), 0) / tickNs)
	s.perP = max(1, o.Shards/runtime.GOMAXPROCS(0))
	s.shards = make([]*shard, o.Shards)
	for i := range s.shards {
		s.shards[i] = newShard(uint32(i), tickNs, limit, startTick, o.InflightBatches, o.MaxBatch)
	}
	s.drivers.Add(len(s.shards))
	for _, sh := range s.shards {
		go s.drive(sh)
	}
	return s, nil
}

// Register adds a handler and returns its number. Cost: O(handlers) (copy-on-write), so
// register at start-up, not per timer.
func (s *Scheduler) Register(fn func(Event), opts ...HandlerOption) (Handler, error) {
	if fn == nil {
		return 0, ErrNilFunc
	}
	e := handlerEntry{fn: fn}
	for _, opt := range opts {
		opt(&e)
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	old := *s.handlers.Load()
	if len(old) >= MaxHandlers {
		return 0, ErrTooManyHandlers
	}
	next := append(old[:len(old):len(old)], e)
	s.handlers.Store(&next)
	return Handler(len(next) - 1), nil
}

// Now returns the scheduler's clock reading in nanoseconds; deadlines passed to At and
// reported in Event are on this scale.
func (s *Scheduler) Now() int64 { return s.clock.Now() }

// After schedules handler h to run with arg once d has elapsed, on one of the calling
// core's shards. Cost: O(1), no allocation.
func (s *Scheduler) After(d time.Duration, h Handler, arg uint64) (Timer, error) {
	if d < 0 || d > MaxDelay {
		return Timer{}, ErrInvalidDelay
	}
	return s.add(s.localShard(), s.clock.Now()+int64(d), h, arg, 0)
}

// At schedules handler h to run with arg at clock reading when (see Now). A deadline in
// the past fires as soon as possible; one beyond MaxDeadline is ErrInvalidDelay. At reads
// no clock.
func (s *Scheduler) At(when int64, h Handler, arg uint64) (Timer, error) {
	if err := s.checkDeadline(when); err != nil {
		return Timer{}, err
	}
	return s.add(s.localShard(), when, h, arg, 0)
}

// AfterKey is After on the shard xxhash(key) % Shards, so that one key's timers share a
// shard (and a lock).
func (s *Scheduler) AfterKey(key string, d time.Duration, h Handler, arg uint64) (Timer, error) {
	if d < 0 || d > MaxDelay {
		return Timer{}, ErrInvalidDelay
	}
	return s.add(s.keyShard(key), s.clock.Now()+int64(d), h, arg, 0)
}

// AtKey is At on the shard xxhash(key) % Shards.
func (s *Scheduler) AtKey(key string, when int64, h Handler, arg uint64) (Timer, error) {
	if err := s.checkDeadline(when); err != nil {
		return Timer{}, err
	}
	return s.add(s.keyShard(key), when, h, arg, 0)
}

// Every schedules handler h to run with arg every interval, first after one interval. It
// is drift-free: each deadline is the previous deadline plus interval, whatever the
// lateness of the previous run; occurrences that are already past when one fires are
// skipped (counted in Stats.Skipped), never bunched. The handle stays valid until Cancel.
func (s *Scheduler) Every(interval time.Duration, h Handler, arg uint64) (Timer, error) {
	if interval < s.opts.Tick || interval > MaxDelay {
		return Timer{}, ErrInvalidInterval
	}
	return s.add(s.localShard(), s.clock.Now()+int64(interval), h, arg, int64(interval))
}

// AfterFunc runs f once d has elapsed. The closure is kept in a side table, not in the
// slab; prefer Register + After on hot paths, which allocate nothing.
func (s *Scheduler) AfterFunc(d time.Duration, f func()) (Timer, error) {
	if d < 0 || d > MaxDelay {
		return Timer{}, ErrInvalidDelay
	}
	return s.addFunc(s.clock.Now()+int64(d), f, 0)
}

// EveryFunc runs f every interval with the semantics of Every.
func (s *Scheduler) EveryFunc(interval time.Duration, f func()) (Timer, error) {
	if interval < s.opts.Tick || interval > MaxDelay {
		return Timer{}, ErrInvalidInterval
	}
	return s.addFunc(s.clock.Now()+int64(interval), f, int64(interval))
}

// Cancel stops t. It returns true exactly when it prevented a run: the timer was pending
// (for a periodic timer: every later run is prevented). It returns false when the timer
// has already been handed to a worker to run, was cancelled before, or t is zero or stale.
// Cost: O(1) (O(log n) for a precise handler's timer), no allocation.
func (s *Scheduler) Cancel(t Timer) bool {
	if int(t.shard) >= len(s.shards) {
		return false
	}
	sh := s.shards[t.shard]
	sh.mu.Lock()
	n := sh.lookup(t)
	if n == nil {
		sh.mu.Unlock()
		return false
	}
	sh.detach(t.idx, n)
	sh.free(t.idx, n)
	sh.cancelled++
	sh.mu.Unlock()
	return true
}

// Reset moves pending timer t to fire d from now and returns true; a periodic timer keeps
// its interval from there. Unlike (*time.Timer).Reset it does not revive a timer that has
// fired or been cancelled: it returns false and changes nothing (the handle is stale and
// its node may belong to another timer). Cost: O(1), no allocation; moving a timer later
// touches only its own node (see shard.reset).
func (s *Scheduler) Reset(t Timer, d time.Duration) bool {
	if d < 0 || d > MaxDelay || int(t.shard) >= len(s.shards) {
		return false
	}
	sh := s.shards[t.shard]
	when := s.clock.Now() + int64(d)
	sh.mu.Lock()
	n := sh.lookup(t)
	if n == nil {
		sh.mu.Unlock()
		return false
	}
	wake := sh.noteWake(sh.reset(t.idx, n, when))
	sh.mu.Unlock()
	if wake {
		sh.signal()
	}
	return true
}

// MaxDeadline is the latest deadline At accepts: 2^62 ns (~146 years) on the clock's
// scale, far enough from overflow for every deadline computation, and checked without a
// clock read.
const MaxDeadline = int64(1) << 62

func (s *Scheduler) checkDeadline(when int64) error {
	if when > MaxDeadline {
		return ErrInvalidDelay
	}
	return nil
}

// localShard picks, at random, one of the shards owned by the caller's P (processor):
// P p owns shards [p*perP, p*perP+perP) modulo Shards, perP = Shards / GOMAXPROCS at New
// (at least 1). Concurrent producers on different cores therefore take different locks and
// touch different wheels, and one producer still spreads its timers over perP shards.
func (s *Scheduler) localShard() *shard {
	p := procPin()
	procUnpin()
	k := p*s.perP + int(uint64(cheaprand())*uint64(s.perP)>>32)
	if k >= len(s.shards) {
		k %= len(s.shards)
	}
	return s.shards[k]
}

func (s *Scheduler) keyShard(key string) *shard {
	return s.shards[xxhash.Sum64String(key)%uint64(len(s.shards))]
}

// add links a new node for handler h on shard sh.
func (s *Scheduler) add(sh *shard, when int64, h Handler, arg uint64, period int64) (Timer, error) {
	handlers := *s.handlers.Load()
	if h == closureHandler || int(h) >= len(handlers) {
		return Timer{}, ErrUnknownHandler
	}
	fn := uint32(h)
	if handlers[h].precise {
		fn |= preciseFlag
	}
	sh.mu.Lock()
	if err := sh.admit(); err != nil {
		sh.mu.Unlock()
		return Timer{}, err
	}
	t, wake := sh.link(when, fn, arg, period)
	sh.mu.Unlock()
	if wake {
		sh.signal()
	}
	return t, nil
}

// addFunc links a new closure timer on a random shard.
func (s *Scheduler) addFunc(when int64, f func(), period int64) (Timer, error) {
	if f == nil {
		return Timer{}, ErrNilFunc
	}
	sh := s.localShard()
	sh.mu.Lock()
	if err := sh.admit(); err != nil {
		sh.mu.Unlock()
		return Timer{}, err
	}
	var slot uint32
	if k := len(sh.freeFuncs); k > 0 {
		slot = sh.freeFuncs[k-1]
		sh.freeFuncs = sh.freeFuncs[:k-1]
		sh.funcs[slot] = f
	} else {
		slot = uint32(len(sh.funcs))
		sh.funcs = append(sh.funcs, f)
	}
	t, wake := sh.link(when, closureHandler, uint64(slot), period)
	sh.mu.Unlock()
	if wake {
		sh.signal()
	}
	return t, nil
}

// admit checks that the shard accepts one more timer. Requires sh.mu.
func (sh *shard) admit() error {
	if sh.closed {
		return ErrClosed
	}
	if sh.limit > 0 && sh.slab.live >= sh.limit {
		return ErrFull
	}
	return nil
}

// link allocates and inserts a node; it reports whether the driver must be signalled.
// Requires sh.mu.
func (sh *shard) link(when int64, fn uint32, arg uint64, period int64) (Timer, bool) {
	i := sh.slab.alloc()
	n := sh.slab.at(i)
	n.when, n.arg = when, arg
	if period > 0 {
		fn |= periodicFlag
		sh.periods[i] = period
	}
	n.fn = fn
	sh.scheduled++
	wake := sh.noteWake(sh.insert(i, n))
	return Timer{shard: sh.id, idx: i, gen: n.gen}, wake
}

// Stats is a snapshot of the scheduler's counters, summed over shards.
type Stats struct {
	Pending   int    // timers scheduled and not yet fired, cancelled or dropped by Close
	Scheduled uint64 // timers scheduled
	Cancelled uint64 // successful Cancel calls
	Fired     uint64 // runs handed to workers (a periodic timer counts each run)
	Skipped   uint64 // periodic occurrences skipped because they were already past
	Panics    uint64 // callback panics recovered
	Dropped   uint64 // due runs dropped by Close, plus timers pending at Close
	Wakeups   uint64 // driver wake-ups, all shards
	Shards    int
}

// Len returns the number of pending timers. Cost: O(shards), takes each shard's lock.
func (s *Scheduler) Len() int {
	total := 0
	for _, sh := range s.shards {
		sh.mu.Lock()
		total += sh.slab.live
		sh.mu.Unlock()
	}
	return total
}

// Stats returns the counters. Cost: O(shards), takes each shard's lock.
func (s *Scheduler) Stats() Stats {
	st := Stats{Shards: len(s.shards), Panics: s.panics.Load()}
	for _, sh := range s.shards {
		sh.mu.Lock()
		st.Pending += sh.slab.live
		st.Scheduled += sh.scheduled
		st.Cancelled += sh.cancelled
		st.Fired += sh.fired
		st.Skipped += sh.skipped
		sh.mu.Unlock()
		st.Dropped += sh.dropped.Load()
		st.Wakeups += sh.wakeups.Load()
	}
	return st
}

// Close stops the scheduler. From its start every schedule call returns ErrClosed;
// pending timers, and due runs not yet handed to a worker, are dropped (counted in
// Stats.Dropped) without running. A dropped timer is gone as if it had fired: once Close
// returns, Cancel and Reset of it return false, and Len and Stats.Pending do not count it. Callbacks already running are not interrupted: Close
// waits for them until ctx is done and then returns ctx's error (they still finish in
// the background). A second Close returns ErrClosed.
func (s *Scheduler) Close(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	for _, sh := range s.shards {
		sh.mu.Lock()
		sh.closed = true
		sh.mu.Unlock()
	}
	close(s.stop)
	s.drivers.Wait()
	for _, sh := range s.shards {
		sh.mu.Lock()
		sh.dropped.Add(uint64(sh.dropAll()))
		sh.mu.Unlock()
	}
	if err := s.pool.ReleaseContext(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("timer: releasing workers: %w", err)
	}
	return nil
}
