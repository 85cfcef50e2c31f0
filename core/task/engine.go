package task

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/core/clock"
	"github.com/tock-sched/tock/core/timer"
)

// numShards splits the task table so that submits, fires and completions of different
// tasks rarely share a lock. A power of two.
const numShards = 64

// shardBits is log2(numShards): a key hash's low shardBits bits pick its shard.
const shardBits = 6

// maxHistory bounds the attempt records kept per occurrence (the first and the latest
// ones are what a user looks at; an endless retry loop must not grow without bound).
const maxHistory = 32

type key struct{ ns, id string }

// record is a task and everything the engine knows about it. All fields are guarded by
// the owning shard's mutex, except task, which is written only when Submit fills a new or
// recycled record (a replacing Submit fills another record): while use says a worker
// holds the record, it and its handler read task without the lock.
//
// Every task needs one, so its layout is deliberate (TestRecordSize): the small fields
// sit together, with no padding between them, and what only failed or deferred attempts
// need is in rare, so that the record fits the 480 B size class. Records are reused
// (reuse.go): a task that is run once and dropped usually allocates nothing.
type record struct {
	task  Task
	slot  uint32 // index in shard.slots: the timer argument names the record by it
	state State
	phase phase // where the current attempt stands: what outside the lock refers to the record (reuse.go)
	// kept: an attempt ended while its handler could still run, which may still use the
	// record: it is never reused (reuse.go). owed: a recurring task's dead occurrence was
	// requeued while another occurrence was in progress; it runs as soon as that one
	// ends (nextOccurrence).
	kept, owed bool
	hash       uint64    // keyHash of the task's namespace and ID: its key in the shard's index
	due        time.Time // the current occurrence's (or retry's) due time
	// dueNs is due as a clock reading, set when the occurrence comes due (lateness is
	// measured from it); startNs is the clock reading at the running attempt's start.
	// Times of the engine's own bookkeeping stay clock readings: converting them to
	// time.Time is only done where a user sees one.
	dueNs, startNs int64
	attempts       int // attempts of the current occurrence
	runs           uint64
	rare           *rareState  // nil until an attempt of the occurrence fails or completes early
	timer          timer.Timer // due, retry or retention-expiry timer; zero when none
	deadline       timer.Timer // the running attempt's timeout timer
	runID          uint64      // the attempt now due or running; 0 when none
	attempt        *attempt    // the running attempt
	// first is the record's first attempt, allocated with it: a one-shot task that
	// succeeds at once (the common case) costs one allocation, not two. Later attempts are
	// allocated on their own, so a handler that outlives its attempt (timed out, then
	// retried) keeps a context and Run that no later attempt reuses.
	first attempt
}

// rareState is what a record keeps only once an attempt of its current occurrence has
// failed or been completed early, or once the task takes part in a workflow: a task
// that succeeds at once never allocates it.
type rareState struct {
	dag        *dagNode  // the task's place in a workflow (dag.go); nil for a task without edges
	shards     *shardSet // a sharded task's occurrence's fan-out (shards.go); nil otherwise
	firstStart time.Time // start of the occurrence's first attempt (set at its first failure)
	// occurrence is the due time of the occurrence whose retry record.due now names (set
	// when its first retry is armed): a recurring schedule goes on from it, not from the
	// retry's time. Zero while no retry has been armed.
	occurrence time.Time
	// resume is set while a requeued dead occurrence of a recurring task is armed or
	// running: the due time of the schedule's next occurrence, where the task goes on
	// once this run ends (instead of the schedule's Next). Zero otherwise.
	resume   time.Time
	lastErr  string          // of the latest failed attempt
	history  []AttemptRecord // failed attempts of the occurrence, oldest first; at most maxHistory
	earlyErr error           // Complete's outcome, when it came before the handler returned
}

// rareState returns rec.rare, allocating it on first use. Requires sh.mu.
func (rec *record) rareState() *rareState {
	if rec.rare == nil {
		rec.rare = &rareState{}
	}
	return rec.rare
}

type shard struct {
	mu    sync.Mutex
	idx   uint64 // position in Engine.shards
	index index  // (namespace, ID) -> slot (index.go)
	slots []*record
	free  []uint32
	runs  uint64 // attempts issued: with idx, makes run IDs unique per engine
	// runBase is the engine's run-ID base (Engine.runBase), copied here so that
	// nextRunID needs nothing but the shard; written once by New.
	runBase uint64
	tasks   int      // records held, and live entries of ret (MaxTasks is enforced per shard)
	ret     retained // finished tasks kept for the retention without their records (retained.go)
	// held is, per slot, the seq + 1 of the retained entry that keeps the slot its record
	// had (slots[slot] is then nil, and the slot not free); 0 for none. len(slots).
	held []uint64
	// deferredDur is the run time of deferred attempts (their worker is long gone).
	deferredDur histogram
	// counters, guarded by mu
	submitted, succeeded, failed, retried, dead, cancelled, timedOut, misfired uint64
	limitWaits                                                                 uint64 // runs parked by a limit
	_                                                                          [64]byte
}

// Run IDs name the attempt and where its record is. An engine-local ID l has bits 0-5
// the shard, 6-31 the record's slot, 32-63 a per-shard attempt counter (from 1), so it
// is unique within the engine until a shard has issued 2^32 attempts; the run ID is
// l XOR the engine's run-ID base, a random 64-bit value drawn by New. So Complete finds
// a record from the ID alone (one XOR, no allocation), and two engines (two starts of a
// server, two leaders) share a run ID only if their bases differ by exactly l1 XOR l2
// for some pair of their local IDs: with slots below m and attempt counters below s in
// every shard (m and s powers of two), a chance of at most 64*m*s / 2^64 per pair of
// engines (2^-28 at m = 1,024 and s = 2^20), and never within one engine. 0 is never a
// run ID (it means none).
const (
	runSlotBits  = 26
	runSlotShift = 6 // log2(numShards)
	runSeqShift  = runSlotShift + runSlotBits
	// maxSlots is the most records one shard can hold (Options.MaxTasks is checked).
	maxSlots = 1 << runSlotBits
)

// nextRunID issues a run ID for the record in slot. Requires sh.mu.
func (sh *shard) nextRunID(slot uint32) uint64 {
	for {
		sh.runs++
		if id := (sh.runs<<runSeqShift | uint64(slot)<<runSlotShift | sh.idx) ^ sh.runBase; id != 0 {
			return id
		}
	}
}

// runRecord resolves a run ID to its shard and slot.
func (e *Engine) runRecord(runID uint64) (*shard, uint32) {
	l := runID ^ e.runBase
	return &e.shards[l&(numShards-1)], uint32(l>>runSlotShift) & (maxSlots - 1)
}

// Engine runs tasks on the timer core. All methods are safe for concurrent use.
type Engine struct {
	opts   Options
	clock  clock.WallClock
	timers *timer.Scheduler
	hDue   timer.Handler // a task's occurrence or retry is due
	hLimit timer.Handler // a running attempt's timeout has passed
	hDrop  timer.Handler // a finished task's retention has passed
	hRate  timer.Handler // a rate limit lets its next waiting run start
	hSweep timer.Handler // a shard's retained log has an entry past its deadline
	shards [numShards]shard
	dlq    *dlq
	spare  sync.Pool // removed records, free for reuse (reuse.go)
	// runBase qualifies every run ID this engine issues (see nextRunID): random, drawn
	// once by New, so that run IDs differ across engines. Read-only after New.
	runBase uint64

	handlers atomic.Pointer[map[string]Handler] // copy-on-write
	fallback atomic.Pointer[Handler]            // for types with no handler; nil: none
	regMu    sync.Mutex

	// Limits (limits.go, ratelimit.go). rates holds the enabled rate limits by type,
	// copy-on-write, nil when there are none (a run's fast path); rateByType and
	// rateList hold every type's limiter ever made, by type and by index (the wake
	// timer's argument), guarded by ratesMu. limitWaiting counts the runs parked.
	keys         keyTable
	rates        atomic.Pointer[map[string]*rateLimiter]
	ratesMu      sync.Mutex
	rateByType   map[string]*rateLimiter
	rateList     []*rateLimiter
	limitWaiting atomic.Int64
	overflow     overflow // run items let go while the queue was full (dispatch)

	// dagMu guards every workflow node (dag.go), and serialises SubmitBatch. Taken
	// before any shard's lock, never while holding one.
	dagMu sync.Mutex
	// shardMu guards shardSets: the fan-outs of sharded tasks' occurrences in progress,
	// by the occurrence's run ID (shards.go). Taken under a shard's mu, never the reverse.
	shardMu   sync.Mutex
	shardSets map[uint64]*shardSet

	runq       chan runItem // a nil rec tells a worker to exit (Close)
	shardLimit int          // records a shard may hold: ceil(MaxTasks / numShards)
	payloads   atomic.Int64 // payload bytes held by records, at most Options.MaxPayloadBytes
	hung       atomic.Int64 // workers replaced while stuck in a handler, not yet returned
	// retention is Options.Retention in effect, in ns (negative: drop at once): atomic,
	// read by finished under a shard lock, written by SetRetention.
	retention   atomic.Int64
	loopWorkers atomic.Int64 // workers that will come back for the next item

	workersMu sync.Mutex
	workers   []*worker // every worker ever started (for Stats); guarded by workersMu
	wg        sync.WaitGroup

	base   context.Context // cancelled by Close
	stop   context.CancelFunc
	closed atomic.Bool
}

type runItem struct {
	sh     *shard
	rec    *record
	runID  uint64
	passed gates // the limits it has passed (limits.go); none when first queued
}

// New starts an engine: its timer scheduler and Options.Workers worker goroutines.
func New(opts ...Option) (*Engine, error) {
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	o.setDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	timers, err := timer.New(append(slices.Clone(o.Timer), timer.WithClock(o.Clock))...)
	if err != nil {
		return nil, fmt.Errorf("task: timers: %w", err)
	}
	e := &Engine{opts: o, clock: o.Clock, timers: timers, dlq: newDLQ(o.DLQCapacity), runq: make(chan runItem, o.QueueSize),
		shardLimit: (o.MaxTasks + numShards - 1) / numShards, runBase: rand.Uint64(),
		keys: keyTable{m: map[concKey]*concLimiter{}, max: o.MaxConcurrencyKeys}, rateByType: map[string]*rateLimiter{}}
	e.retention.Store(int64(o.Retention))
	e.base, e.stop = context.WithCancel(context.Background())
	handlers := map[string]Handler{}
	e.handlers.Store(&handlers)
	for i := range e.shards {
		e.shards[i].idx = uint64(i)
		e.shards[i].runBase = e.runBase
	}
	e.hDue, _ = timers.Register(e.onDue)
	e.hLimit, _ = timers.Register(e.onTimeout)
	e.hDrop, _ = timers.Register(e.onDrop)
	e.hRate, _ = timers.Register(e.onRateWake)
	e.hSweep, _ = timers.Register(e.onSweep)
	for i := 0; i < o.Workers; i++ {
		e.startWorker()
	}
	return e, nil
}

// Register sets the handler of a task type, replacing any earlier one. Tasks of a type
// with no handler when they run fail without retry (ErrNoHandler, recorded on the task).
func (e *Engine) Register(taskType string, h Handler) error {
	if taskType == "" || len(taskType) > MaxTypeLen {
		return fmt.Errorf("%w: type must be 1 to %d bytes", ErrInvalidTask, MaxTypeLen)
	}
	if h == nil {
		return fmt.Errorf("%w: nil handler for %q", ErrInvalidTask, taskType)
	}
	e.regMu.Lock()
	defer e.regMu.Unlock()
	next := make(map[string]Handler, len(*e.handlers.Load())+1)
	for k, v := range *e.handlers.Load() {
		next[k] = v
	}
	next[taskType] = h
	e.handlers.Store(&next)
	return nil
}

// RegisterFallback sets the handler of every task type that has none of its own (a
// server hands such tasks to remote workers by type); nil removes it. Without a fallback,
// tasks of a type with no handler fail without retry (ErrNoHandler).
func (e *Engine) RegisterFallback(h Handler) {
	if h == nil {
		e.fallback.Store(nil)
		return
	}
	e.fallback.Store(&h)
}

// timerArg names a record to the timer core: shard index and slot.
func timerArg(sh *shard, rec *record) uint64 { return sh.idx<<32 | uint64(rec.slot) }

// lookup resolves a timer argument; the caller checks that the record still expects
// the timer that fired. It locks the shard.
func (e *Engine) lookup(arg uint64) (*shard, *record) {
	sh := &e.shards[arg>>32&(numShards-1)]
	sh.mu.Lock()
	slot := uint32(arg)
	if int(slot) >= len(sh.slots) {
		return sh, nil
	}
	return sh, sh.slots[slot]
}

// now returns the clock reading and its wall time.
func (e *Engine) now() (int64, time.Time) {
	ns := e.clock.Now()
	return ns, e.clock.Time(ns)
}

// Submit accepts a task and schedules its first occurrence. Submitting an ID that exists
// in the namespace returns ErrExists, unless t.Version is higher than the existing task's:
// then t replaces it (a run in progress finishes, but its result is ignored). The payload
// is copied. Info describes the task as accepted (PENDING, due at its first occurrence);
// a one-shot task already due is queued for a worker at once (see the package doc).
// Cost: one index insert and one timer, or for a task already due one queue send, O(1).
func (e *Engine) Submit(t Task) (Info, error) { return e.submit(t, time.Time{}, time.Time{}, false) }

// SubmitOwned is Submit without the payload's copy: the engine keeps t.Payload's array
// as the task's own, so the caller hands it over and must never write it again. For a
// caller whose payload is already a fresh copy made for this task (a decoder's): it
// saves a copy and an allocation a task. What the engine hands out (Info, Run) then
// shares that array, as it shares its own copy after Submit; the engine never writes
// it. A task with dependencies is copied all the same. Cost: as Submit.
func (e *Engine) SubmitOwned(t Task) (Info, error) {
	return e.submit(t, time.Time{}, time.Time{}, true)
}

// Continue is Submit for a recurring task handed over from another engine (a server that
// took over from a node that died): its schedule continues from nextDue, the due time of
// the occurrence its previous holder had armed, instead of starting over from now. If
// nextDue has passed, the occurrences missed meanwhile are a misfire, handled by the
// task's Misfire policy (one run now, or none) as for an engine that fell behind. A zero
// nextDue, or a one-shot task, is plain Submit.
func (e *Engine) Continue(t Task, nextDue time.Time) (Info, error) {
	return e.ContinueNotBefore(t, nextDue, time.Time{})
}

// ContinueNotBefore is Continue whose first run does not start before notBefore (a server
// taking over a task whose last run may still execute elsewhere waits it out so). The
// engine holds the task meanwhile: Get shows it PENDING, its next run the occurrence it
// holds back, and Cancel ends it. Held past its due time, a recurring task's first run
// is a misfire (its Misfire policy applies to the occurrences due meanwhile); a one-shot
// task runs once the hold ends. A zero notBefore holds nothing. Cost: as Submit.
func (e *Engine) ContinueNotBefore(t Task, nextDue, notBefore time.Time) (Info, error) {
	if !t.Schedule.Recurring() {
		nextDue = time.Time{}
	}
	return e.submit(t, nextDue, notBefore, false)
}

// submit is Submit, Continue and SubmitOwned; owned: t.Payload is the engine's to keep.
func (e *Engine) submit(t Task, nextDue, notBefore time.Time, owned bool) (Info, error) {
	if e.closed.Load() {
		return Info{}, ErrClosed
	}
	if t.DependsOn != nil { // a workflow's member: its parents are checked and told of it
		infos, err := e.submitBatch([]Task{t}, notBefore)
		if err != nil {
			return Info{}, err
		}
		return infos[0], nil
	}
	nowNs, wall := e.now()
	first, err := e.prepare(&t, wall, owned)
	if err != nil {
		return Info{}, err
	}
	if !nextDue.IsZero() {
		first = nextDue
	}
	h := keyHash(t.Namespace, t.ID)
	sh := e.shardOf(h)
	rec := e.newRecord(&t, h) // filled outside the lock
	sh.mu.Lock()
	old, err := e.admit(sh, &t, h, 0)
	if err == nil {
		freed := 0
		if old != nil {
			freed = len(old.task.Payload)
		}
		err = e.chargePayload(int64(len(t.Payload)), int64(freed))
	}
	if err != nil {
		e.recycle(rec)
		sh.mu.Unlock()
		return Info{}, err
	}
	if t.Concurrency != nil {
		// The caller's value is replaced by the engine's before the record is in the table.
		c, err := e.resolveKey(t.Namespace, t.Concurrency)
		if err != nil {
			e.payloads.Add(-int64(len(t.Payload)))
			e.recycle(rec)
			sh.mu.Unlock()
			return Info{}, err
		}
		rec.task.Concurrency = c
	}
	e.place(sh, rec, old)
	rec.due = first
	info := rec.info() // as accepted: PENDING, due at first
	if err := e.start(sh, rec, notBefore, nowNs, wall); err != nil {
		e.remove(sh, rec)
		sh.mu.Unlock()
		return Info{}, err
	}
	sh.submitted++
	sh.mu.Unlock()
	e.emit(Event{Kind: EventSubmitted, Namespace: t.Namespace, ID: t.ID, Version: t.Version, Type: t.Type})
	return info, nil
}

// prepare checks t and fills in what the engine keeps of it: its defaults, and its own
// copies of the payload (unless owned: t.Payload is already the engine's, SubmitOwned)
// and dependencies; it returns t's first due time from wall.
func (e *Engine) prepare(t *Task, wall time.Time, owned bool) (time.Time, error) {
	if t.Timeout == 0 {
		t.Timeout = e.opts.DefaultTimeout
	}
	if err := t.normalize(e.opts.MaxPayload); err != nil {
		return time.Time{}, err
	}
	if t.Broadcast && t.shard == 0 && e.opts.BroadcastWidth == nil {
		return time.Time{}, fmt.Errorf("%w: task %q: Broadcast without Options.BroadcastWidth", ErrInvalidTask, t.ID)
	}
	if !owned {
		t.Payload = slices.Clone(t.Payload)
	}
	if d := t.DependsOn; d != nil {
		t.DependsOn = &Deps{On: slices.Clone(d.On), OnParentFailure: d.OnParentFailure}
	}
	first, err := t.Schedule.First(wall)
	if err != nil {
		return time.Time{}, fmt.Errorf("task %q: %w", t.ID, err)
	}
	return first, nil
}

// admit checks that t, of key hash h, may enter sh, where the same call (a batch) has
// already admitted adding new records: it returns the record that t replaces (nil: none).
// Requires sh.mu.
func (e *Engine) admit(sh *shard, t *Task, h uint64, adding int) (old *record, err error) {
	old = e.findLocked(sh, h, t.Namespace, t.ID)
	switch {
	case old == nil && sh.tasks+adding >= e.shardLimit:
		return nil, fmt.Errorf("%w: %d tasks held in this shard (Options.MaxTasks / %d)", ErrOverloaded, sh.tasks+adding, numShards)
	case old == nil:
		return nil, nil
	case t.Version <= old.task.Version:
		return nil, fmt.Errorf("%w: %s/%s at version %d (submitted %d)", ErrExists, t.Namespace, t.ID, old.task.Version, t.Version)
	case old.inWorkflow():
		return nil, fmt.Errorf("%w: %s/%s is %s in a workflow, which it leaves when it ends: until then it can be cancelled, not replaced",
			ErrExists, t.Namespace, t.ID, old.state)
	}
	return old, nil
}

// chargePayload counts n more payload bytes held, of which freed are to be given back
// (a replaced task's), against Options.MaxPayloadBytes: ErrOverloaded, and nothing
// counted, past it.
func (e *Engine) chargePayload(n, freed int64) error {
	if n == 0 {
		return nil
	}
	if held := e.payloads.Add(n); held-freed > int64(e.opts.MaxPayloadBytes) {
		e.payloads.Add(-n)
		return fmt.Errorf("%w: a payload of %d bytes would take the payloads held past Options.MaxPayloadBytes (%d held of %d)",
			ErrOverloaded, n, held-n, e.opts.MaxPayloadBytes)
	}
	return nil
}

// place puts rec into sh's table, in place of old (nil: none), which it removes.
// Requires sh.mu.
func (e *Engine) place(sh *shard, rec, old *record) {
	if old != nil {
		// The replacement is another record: a run of the old version still in its
		// handler keeps reading the old, unchanged Task (the old record is kept from
		// reuse until nothing refers to it).
		e.remove(sh, old)
	}
	if n := len(sh.free); n > 0 {
		rec.slot = sh.free[n-1]
		sh.free = sh.free[:n-1]
		sh.slots[rec.slot] = rec
	} else {
		rec.slot = uint32(len(sh.slots))
		sh.slots = append(sh.slots, rec)
		sh.held = append(sh.held, 0)
	}
	sh.index.insert(rec.hash, rec.slot)
	sh.tasks++
}

// start arms the PENDING rec's first occurrence, rec.due, held back to notBefore; or, for
// a one-shot task already due, queues it at once if the queue has room (queueNow). The
// clock read nowNs at wall. Requires sh.mu; on error the caller removes rec.
func (e *Engine) start(sh *shard, rec *record, notBefore time.Time, nowNs int64, wall time.Time) error {
	first := rec.due
	armAt := first
	if notBefore.After(first) {
		armAt = notBefore
	}
	if dueNs := nowNs + int64(armAt.Sub(wall)); dueNs > nowNs || rec.task.Schedule.Recurring() || !e.queueNow(sh, rec, dueNs) {
		if err := e.armFrom(sh, rec, armAt, e.hDue, nowNs, wall); err != nil {
			return err
		}
		rec.due = first // held back past it: the run is late (a misfire, if recurring)
	}
	return nil
}

// arm schedules rec's timer for wall time `when` on core handler h. Requires sh.mu.
func (e *Engine) arm(sh *shard, rec *record, when time.Time, h timer.Handler) error {
	nowNs, wall := e.now()
	return e.armFrom(sh, rec, when, h, nowNs, wall)
}

// armFrom is arm with a clock reading the caller already has (nowNs, read at wall).
func (e *Engine) armFrom(sh *shard, rec *record, when time.Time, h timer.Handler, nowNs int64, wall time.Time) error {
	tm, err := e.timers.At(nowNs+int64(when.Sub(wall)), h, timerArg(sh, rec))
	if err != nil {
		return fmt.Errorf("task %q: scheduling %v: %w", rec.task.ID, when, err)
	}
	rec.timer = tm
	if h == e.hDue {
		rec.due = when
	}
	return nil
}

// retire stops everything a record has in flight: its timers, and a running attempt,
// whose result will be ignored. Requires sh.mu.
func (e *Engine) retire(sh *shard, rec *record) {
	if !rec.timer.IsZero() {
		e.timers.Cancel(rec.timer)
	}
	if !rec.deadline.IsZero() {
		e.timers.Cancel(rec.deadline)
	}
	rec.timer, rec.deadline = timer.Timer{}, timer.Timer{}
	if rec.attempt != nil {
		rec.attempt.ctx.cancel(context.Canceled)
		rec.abandon()
		rec.attempt = nil
		if c := rec.task.Concurrency; c != nil {
			e.releaseSlot(c.lim)
		}
	}
	rec.runID = 0
}

// remove drops a record and recycles it: the caller must not touch rec afterwards.
// Requires sh.mu.
func (e *Engine) remove(sh *shard, rec *record) {
	e.retire(sh, rec)
	sh.tasks--
	if n := len(rec.task.Payload); n > 0 {
		e.payloads.Add(-int64(n))
	}
	if c := rec.task.Concurrency; c != nil {
		e.unrefKey(c)
	}
	e.unplace(sh, rec)
}

// unplace takes rec out of sh's table and its index and recycles it, leaving what it
// counts (tasks, payload bytes, its key) to the caller: the caller must not touch rec
// afterwards. Requires sh.mu.
func (e *Engine) unplace(sh *shard, rec *record) {
	sh.index.remove(rec.hash, rec.slot)
	sh.slots[rec.slot] = nil
	sh.free = append(sh.free, rec.slot)
	e.recycle(rec)
}

// findLocked returns the record of (ns, id), of keyHash h, in sh: from its table, or
// revived from its retained log (retained.go); nil if neither holds it. Requires sh.mu.
// Cost: one probe of the index; a revive's when the key names a retained entry.
func (e *Engine) findLocked(sh *shard, h uint64, ns, id string) *record {
	rec, c, en := sh.index.lookup(sh.slots, sh.held, &sh.ret, h, ns, id)
	if en != nil {
		return e.revive(sh, c, en)
	}
	return rec
}

// finished starts the retention of a record that finished at clock reading nowNs: in
// its shard's retained log if it is retainable (the record is recycled), else as a
// retained record with a timer; with no retention, the record is removed. The caller
// must not touch rec afterwards unless it was retained as a record. Requires sh.mu.
func (e *Engine) finished(sh *shard, rec *record, nowNs int64) {
	ret := e.retention.Load()
	if ret < 0 {
		e.remove(sh, rec)
		return
	}
	if retainable(rec) && e.retain(sh, rec, nowNs+ret) { // the entry holds rec's slot now
		e.recycle(rec)
		return
	}
	tm, err := e.timers.At(nowNs+ret, e.hDrop, timerArg(sh, rec))
	if err != nil {
		e.remove(sh, rec) // only a closing scheduler refuses: nothing left to query anyway
		return
	}
	rec.timer = tm
}

// ended is finished for every record but a shard's, which is removed as it ends (its
// fan-out keeps its state): the caller must not touch rec afterwards. Requires sh.mu.
func (e *Engine) ended(sh *shard, rec *record, nowNs int64) {
	if rec.task.shard != 0 {
		e.remove(sh, rec)
		return
	}
	e.finished(sh, rec, nowNs)
}

// setState moves rec along the state table. Requires sh.mu. An illegal move is a bug
// in the engine, reported as an error and never applied.
func setState(rec *record, to State) error {
	if err := transition(rec.state, to); err != nil {
		return fmt.Errorf("task %s/%s: %w", rec.task.Namespace, rec.task.ID, err)
	}
	rec.state = to
	return nil
}

// Cancel stops a task: a pending or retrying one never runs again; a running attempt's
// context is cancelled and its result ignored. A task that has finished cannot be
// cancelled (ErrIllegalTransition); an unknown one is ErrNotFound.
func (e *Engine) Cancel(namespace, id string) error {
	namespace = nsOrDefault(namespace)
	sh, rec, err := e.locked(namespace, id)
	if err != nil {
		return err
	}
	if err := setState(rec, Cancelled); err != nil {
		sh.mu.Unlock()
		return err
	}
	var es events
	es.add(Event{Kind: EventCancelled, Namespace: namespace, ID: id, Version: rec.task.Version, Type: rec.task.Type, Attempt: rec.attempts,
		RunID: rec.runID}) // the attempt running or due, if any
	es.end(rec) // a workflow's member: its children follow by their policies
	es.endShard(rec)
	var set *shardSet
	if rec.rare != nil {
		set = rec.rare.shards
	}
	e.retire(sh, rec)
	sh.cancelled++
	e.ended(sh, rec, e.clock.Now())
	sh.mu.Unlock()
	e.emitAll(&es)
	if set != nil {
		e.cancelShards(namespace, set)
	}
	return nil
}

// Drop removes a task at once, as if it had never been submitted: no event is emitted
// and no counter moves; a running attempt's context is cancelled and its result ignored.
// It is for a server handing its tasks over to another node (whose copy carries on), not
// for users: Cancel is the state change. A dropped task's children are not told of it:
// they wait until they are dropped too. ErrNotFound if the task is absent. Cost: O(1).
func (e *Engine) Drop(namespace, id string) error {
	sh, rec, err := e.locked(nsOrDefault(namespace), id)
	if err != nil {
		return err
	}
	var n *dagNode
	if rec.inWorkflow() {
		n = rec.node()
	}
	e.remove(sh, rec)
	sh.mu.Unlock()
	if n != nil {
		e.dropped(n) // its children are left waiting (dag.go)
	}
	return nil
}

// SetRetention changes how long a task that finishes from now on stays queryable (Get)
// and counts towards MaxTasks: d > 0 keeps it d after it finishes; d <= 0 drops it as
// it finishes (as a negative Options.Retention does). A record already retained keeps
// the deadline it was given when it finished: shrinking the retention frees those
// records by their old deadline at the latest, and growing it brings back none already
// dropped. A task kept in its shard's retained log (retained.go) that finishes after a
// shrink is gone from Get at its own deadline, and gives back its place under MaxTasks
// by the old deadline of those retained before it at the latest. Safe for concurrent
// use with everything else. Cost: one atomic store.
func (e *Engine) SetRetention(d time.Duration) {
	if d <= 0 {
		d = -1
	}
	e.retention.Store(int64(d))
}

// Retention is the retention in effect for tasks that finish now (Options.Retention,
// then SetRetention's): 0 when they are dropped as they finish. Cost: one atomic load.
func (e *Engine) Retention() time.Duration {
	return max(time.Duration(e.retention.Load()), 0)
}

// Get returns a snapshot of a task. Finished tasks stay visible for the retention in
// effect when they finished (Options.Retention, SetRetention).
func (e *Engine) Get(namespace, id string) (Info, error) {
	sh, rec, err := e.locked(nsOrDefault(namespace), id)
	if err != nil {
		return Info{}, err
	}
	defer sh.mu.Unlock()
	return rec.info(), nil
}

// locked finds the record of namespace/id and returns it with its shard's lock held;
// ErrNotFound (and no lock held) when there is none.
func (e *Engine) locked(namespace, id string) (*shard, *record, error) {
	h := keyHash(namespace, id)
	sh := e.shardOf(h)
	sh.mu.Lock()
	rec := e.findLocked(sh, h, namespace, id)
	if rec == nil {
		sh.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %s/%s", ErrNotFound, namespace, id)
	}
	return sh, rec, nil
}

// nsOrDefault is namespace, or DefaultNamespace for "".
func nsOrDefault(namespace string) string {
	if namespace == "" {
		return DefaultNamespace
	}
	return namespace
}

func (rec *record) info() Info {
	in := Info{Task: rec.task, State: rec.state, Attempts: rec.attempts, Runs: rec.runs}
	if r := rec.rare; r != nil {
		in.LastError, in.History = r.lastErr, slices.Clone(r.history)
	}
	if rec.state == Pending || rec.state == Failed {
		in.NextRun = rec.due
	}
	if rec.rare != nil && rec.rare.shards != nil {
		in.Shards = rec.rare.shards.shardInfos()
	}
	return in
}

// List returns up to limit tasks in state s (0: any state), ordered by namespace then ID,
// starting after cursor ("" for the first page); next is the cursor of the following
// page, "" after the last. Cost: O(tasks) per page: it is an administrative query.
func (e *Engine) List(s State, cursor string, limit int) (page []Info, next string, err error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	after, err := decodeCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	var keys []key
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for _, rec := range sh.slots {
			if rec == nil || rec.task.shard != 0 { // a shard's record is its task's business
				continue
			}
			if k := (key{rec.task.Namespace, rec.task.ID}); (s == 0 || rec.state == s) && (cursor == "" || keyLess(after, k)) {
				keys = append(keys, k)
			}
		}
		keys = sh.ret.appendKeys(keys, s, cursor, after)
		sh.mu.Unlock()
	}
	slices.SortFunc(keys, func(a, b key) int {
		if keyLess(a, b) {
			return -1
		}
		if keyLess(b, a) {
			return 1
		}
		return 0
	})
	for _, k := range keys {
		if len(page) == limit {
			return page, encodeCursor(page[len(page)-1]), nil
		}
		if in, err := e.Get(k.ns, k.id); err == nil && (s == 0 || in.State == s) {
			page = append(page, in)
		}
	}
	return page, "", nil
}

func keyLess(a, b key) bool { return a.ns < b.ns || a.ns == b.ns && a.id < b.id }

func encodeCursor(in Info) string { return in.Task.Namespace + "\x00" + in.Task.ID }

func decodeCursor(c string) (key, error) {
	if c == "" {
		return key{}, nil
	}
	for i := 0; i < len(c); i++ {
		if c[i] == 0 {
			return key{c[:i], c[i+1:]}, nil
		}
	}
	return key{}, fmt.Errorf("%w: %q", ErrBadCursor, c)
}

// Stats returns the counters. Cost: O(shards + workers).
func (e *Engine) Stats() Stats {
	st := Stats{Queued: len(e.runq), HungWorkers: int(e.hung.Load()), DeadLetters: e.dlq.Len(), DLQEvicted: e.dlq.Evicted(),
		WaitingOnLimit: int(e.limitWaiting.Load())}
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		st.Tasks += sh.tasks
		st.Submitted += sh.submitted
		st.Succeeded += sh.succeeded
		st.Failed += sh.failed
		st.Retried += sh.retried
		st.Dead += sh.dead
		st.Cancelled += sh.cancelled
		st.TimedOut += sh.timedOut
		st.Misfired += sh.misfired
		st.LimitWaits += sh.limitWaits
		st.Duration.add(&sh.deferredDur)
		sh.mu.Unlock()
	}
	e.workersMu.Lock()
	for _, w := range e.workers {
		st.Started += w.stats.started.Load()
		st.Running += int(w.stats.running.Load())
		st.Panics += w.stats.panics.Load()
		st.LateResults += w.stats.lateResults.Load()
		st.Lateness.add(&w.stats.lateness)
		st.Duration.add(&w.stats.duration)
	}
	e.workersMu.Unlock()
	return st
}

func (e *Engine) emit(ev Event) {
	if e.opts.OnEvent != nil {
		e.opts.OnEvent(ev)
	}
}

// jitter is the uniform draw for retry jitter.
func jitter() float64 { return rand.Float64() }

// Close stops the engine: no new submits (ErrClosed), no further runs; pending tasks are
// dropped; running attempts' contexts are cancelled and Close waits for their handlers
// until ctx is done (then returns ctx's error; a handler that ignores its context keeps
// its goroutine). A second Close returns ErrClosed.
func (e *Engine) Close(ctx context.Context) error {
	if !e.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	e.stop()
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for _, rec := range sh.slots {
			if rec != nil && rec.attempt != nil {
				rec.attempt.ctx.cancel(context.Canceled)
			}
		}
		sh.mu.Unlock()
	}
	// Once the timers are closed nothing sends on runq any more (onDue gives up on a full
	// queue when base is cancelled). Workers drop what is still queued, then each takes
	// one exit item.
	err := e.timers.Close(ctx)
	done := make(chan struct{})
	go func() {
		for n := e.loopWorkers.Load(); n > 0; n-- {
			e.runq <- runItem{}
		}
		e.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}
