package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tock-sched/tock/core/timer"
)

// worker is one goroutine running handlers; its counters are its own.
type worker struct {
	stats workerStats
}

func (e *Engine) startWorker() {
	w := &worker{}
	e.workersMu.Lock()
	e.workers = append(e.workers, w)
	e.workersMu.Unlock()
	e.loopWorkers.Add(1)
	e.wg.Add(1)
	go e.work(w)
}

// work takes due tasks off runq. It receives without a select: a worker's exit is an item
// like any other (sent by Close), which keeps the hot path to one channel operation.
func (e *Engine) work(w *worker) {
	defer e.wg.Done()
	for item := range e.runq {
		if item.rec == nil {
			e.loopWorkers.Add(-1)
			return
		}
		if e.closed.Load() {
			continue // Close drops what had not started
		}
		if replaced := e.runOne(w, item); replaced {
			return // a replacement took this worker's place while its handler hung
		}
	}
}

// attempt is one run of a handler: its context and its Run.
type attempt struct {
	ctx      attemptCtx
	run      Run
	replaced bool // a new worker was started because this attempt hung; guarded by shard mu
}

// attemptCtx is the handler's context: the engine's base context plus the attempt's
// deadline, cancelled by the engine's own timeout timer (so a deadline costs no runtime
// timer) or by Cancel or Close. Its Done channel is made only if the handler asks.
// Its parent is always its engine's base context, named through the engine: 8 B, where
// a context.Context would take 16 in every record's first attempt (TestRecordSize).
type attemptCtx struct {
	eng      *Engine // Value reads eng.base
	deadline time.Time
	mu       sync.Mutex
	done     chan struct{}
	err      error
}

func (c *attemptCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

func (c *attemptCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

func (c *attemptCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *attemptCtx) Value(k any) any { return c.eng.base.Value(k) }

func (c *attemptCtx) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		if c.done != nil {
			close(c.done)
		}
	}
}

// onDue runs in the timer pool when an occurrence or a retry of a task comes due. It
// applies the misfire policy, marks the task DUE and queues it for a worker; a full queue
// makes it wait, which holds back the timer pool (back-pressure).
func (e *Engine) onDue(ev timer.Event) {
	sh, rec := e.lookup(ev.Arg)
	if rec == nil || rec.timer != ev.Timer {
		sh.mu.Unlock()
		return // cancelled or replaced after it was collected
	}
	rec.timer = timer.Timer{}
	rec.dueNs = ev.Due
	var misfire *Event
	// A requeued dead occurrence (rare.resume) is no occurrence of the schedule: it runs
	// however late it is.
	if rec.state == Pending && rec.task.Schedule.Recurring() && (rec.rare == nil || rec.rare.resume.IsZero()) {
		var dead *Event
		var skipped bool
		if misfire, dead, skipped = e.catchUp(sh, rec, ev); skipped {
			sh.mu.Unlock()
			for _, ev := range [...]*Event{misfire, dead} {
				if ev != nil {
					e.emit(*ev)
				}
			}
			return
		}
	}
	if err := setState(rec, Due); err != nil {
		sh.mu.Unlock()
		return
	}
	rec.runID = sh.nextRunID(rec.slot)
	rec.setPhase(phaseQueued) // the item names rec until its worker's last locked use of it
	item := runItem{sh: sh, rec: rec, runID: rec.runID}
	sh.mu.Unlock()
	if misfire != nil {
		e.emit(*misfire)
	}
	// A non-blocking send first: with room in the queue (the usual case) it costs one
	// channel lock, where the select below locks both channels and reads the context.
	select {
	case e.runq <- item:
		return
	default:
	}
	select {
	case e.runq <- item:
	case <-e.base.Done():
	}
}

// catchUp applies the misfire policy to an occurrence of a recurring task that came due
// at ev. If it fired more than Options.MisfireThreshold late, the occurrences missed are
// counted (misfire), and either one run stands for them all (rec.due moves to the latest
// of them) or the task is armed for its next future occurrence instead (skipped; dead
// reports a failure to arm it). Requires sh.mu.
func (e *Engine) catchUp(sh *shard, rec *record, ev timer.Event) (misfire, dead *Event, skipped bool) {
	wall := e.clock.Time(ev.Now)
	if wall.Sub(rec.due) <= e.opts.MisfireThreshold {
		return nil, nil, false
	}
	runAt, missed := rec.task.Schedule.CatchUp(rec.task.Misfire, rec.due, wall)
	if missed > 0 {
		sh.misfired += uint64(missed)
		misfire = &Event{Kind: EventMisfired, Namespace: rec.task.Namespace, ID: rec.task.ID, Version: rec.task.Version, Type: rec.task.Type, Missed: missed}
	}
	if runAt.After(wall) { // skipped to the next future occurrence
		if err := e.arm(sh, rec, runAt, e.hDue); err != nil {
			dead = &Event{Kind: EventDead, Namespace: rec.task.Namespace, ID: rec.task.ID, Version: rec.task.Version, Err: err}
		}
		return misfire, dead, true
	}
	// One run stands for every missed occurrence: it is due as the latest of them, so
	// that the next occurrence is computed from there and not from one long past.
	rec.due, rec.dueNs = runAt, ev.Now-int64(wall.Sub(runAt))
	return misfire, nil, false
}

// queueNow hands a PENDING one-shot record whose occurrence is already due (at clock
// reading dueNs) to the workers as onDue would, without a timer, if the queue has room;
// it reports whether it did. Requires sh.mu (so it never waits for room: a full queue
// leaves the record to the timer's path, which does).
func (e *Engine) queueNow(sh *shard, rec *record, dueNs int64) bool {
	if !canTransition(rec.state, Due) {
		return false
	}
	item := runItem{sh: sh, rec: rec, runID: sh.nextRunID(rec.slot)}
	select {
	case e.runq <- item:
	default:
		return false
	}
	// The worker that takes the item waits for sh.mu, so it finds the record DUE.
	rec.state, rec.runID, rec.dueNs = Due, item.runID, dueNs // the move checked above
	rec.setPhase(phaseQueued)
	return true
}

// runOne runs one attempt on worker w. It reports whether w was replaced while its
// handler hung (then w must exit). The record's phase is phaseQueued when it takes the
// lock the first time; in its second locked section it is the attempt's phase only if
// the attempt is still item's (runID, and RUNNING): otherwise the attempt ended
// meanwhile (abandon) and the record may be on to another one.
func (e *Engine) runOne(w *worker, item runItem) (replaced bool) {
	sh, rec := item.sh, item.rec
	sh.mu.Lock()
	if rec.runID != item.runID || !canTransition(rec.state, Running) {
		// Cancelled, dropped or replaced while queued: this item was the last thing to
		// refer to the record if it is no longer in the table. A slot a limit granted
		// it passes on.
		rec.setPhase(phaseIdle)
		if item.passed&gateSlot != 0 {
			e.releaseSlot(rec.task.Concurrency.lim)
		}
		if sh.slots[rec.slot] != rec {
			e.recycle(rec)
		}
		sh.mu.Unlock()
		return false
	}
	// Limits come before the attempt is counted: a run held back uses none. Without a
	// concurrency key and with no rate limit anywhere, this is two loads. The rate limit
	// reads the attempt's start time.
	startNs := e.clock.Now()
	if (rec.task.Concurrency != nil || e.rates.Load() != nil) && !rec.task.fansOut() && !e.gate(&item, startNs) {
		sh.mu.Unlock()
		return false // parked: the limiter queues the item again when it lets it go
	}
	rec.state = Running // the move checked above
	rec.setPhase(phaseRunning)
	rec.attempts++
	rec.runs++
	rec.startNs = startNs
	var a *attempt
	if rec.runs == 1 {
		a = &rec.first
	} else {
		a = &attempt{}
	}
	a.ctx.eng = e
	a.run = Run{Task: &rec.task, Attempt: rec.attempts, Due: rec.due, RunID: item.runID}
	var fan *shardSet // a sharded task's occurrence: its shards run, not a handler
	if rec.task.Shards > 1 || rec.task.Broadcast {
		fan = e.shardRun(rec, a)
	}
	if t := rec.task.Timeout; t > 0 && fan == nil {
		a.ctx.deadline = e.clock.Time(startNs + int64(t))
		if tm, err := e.timers.At(startNs+int64(t), e.hLimit, timerArg(sh, rec)); err == nil {
			rec.deadline = tm
		}
	}
	rec.attempt = a
	lateness := time.Duration(startNs - rec.dueNs)
	attemptNo := rec.attempts
	sh.mu.Unlock()

	w.stats.started.Add(1)
	w.stats.lateness.observe(max(lateness, 0))
	if e.opts.OnEvent != nil {
		t := &rec.task // not written while this worker holds the record; a shard's own (Event.OfShard)
		e.emit(Event{Kind: EventStarted, Namespace: t.Namespace, ID: t.ID, Version: t.Version, Type: t.Type, Attempt: attemptNo, Lateness: lateness,
			RunID: item.runID})
	}
	w.stats.running.Store(1)
	var err error
	if fan == nil {
		err = e.call(w, a)
	} else {
		err = e.fanOut(&rec.task, fan) // rec.task is not written while this worker holds the record
	}
	w.stats.running.Store(0)
	endNs := e.clock.Now()
	if !errors.Is(err, ErrDeferred) { // a deferred attempt's run time is known at Complete
		w.stats.duration.observe(time.Duration(endNs - startNs))
	}

	sh.mu.Lock()
	// If the attempt ended meanwhile (timed out, cancelled, replaced), abandon kept the
	// record from reuse, so this worker may still read it. Otherwise this locked section
	// is the worker's last use of the record: it leaves phaseRunning or phaseEarly.
	if a.replaced {
		sh.mu.Unlock()
		e.hung.Add(-1)
		w.stats.lateResults.Add(1)
		return true
	}
	if rec.runID != item.runID || rec.state != Running {
		sh.mu.Unlock()
		w.stats.lateResults.Add(1) // timed out, cancelled or replaced meanwhile
		return false
	}
	if errors.Is(err, ErrDeferred) {
		if rec.phase == phaseRunning {
			// The outcome comes later through Complete; the timeout timer stays armed.
			rec.setPhase(phaseFiled)
			sh.mu.Unlock()
			return false
		}
		err = rec.rare.earlyErr // Complete came first
	}
	rec.setPhase(phaseIdle) // an early outcome is dropped if the handler did not defer
	e.timers.Cancel(rec.deadline)
	rec.deadline, rec.attempt = timer.Timer{}, nil
	var es events
	e.finishAttempt(sh, rec, err, startNs, endNs, &es)
	sh.mu.Unlock()
	e.emitAll(&es)
	return false
}

// call runs the handler, turning a panic into an error.
func (e *Engine) call(w *worker, a *attempt) (err error) {
	h, ok := (*e.handlers.Load())[a.run.Task.Type]
	if !ok {
		if f := e.fallback.Load(); f != nil {
			h, ok = *f, true
		}
	}
	if !ok {
		return NonRetryable(fmt.Errorf("%w for type %q", ErrNoHandler, a.run.Task.Type))
	}
	defer func() {
		if r := recover(); r != nil {
			w.stats.panics.Add(1)
			err = fmt.Errorf("%w: %v", ErrPanic, r)
		}
	}()
	return h(&a.ctx, &a.run)
}

// events is the (at most two) events a state change reports once the lock is released;
// a fixed array, so that completing an attempt allocates nothing for them.
// ended is a workflow's member that has ended (dag.go), whose children are told once
// the events are emitted: outcome is how it ended.
type events struct {
	list    [2]Event
	n       int
	ended   *dagNode
	outcome State
	shard   shardEnd // a shard's end (shards.go); runID 0 for none
}

func (es *events) add(ev Event) { es.list[es.n] = ev; es.n++ }

// emitAll emits es's events, then tells an ended workflow member's children. Requires
// no lock.
func (e *Engine) emitAll(es *events) {
	for i := 0; i < es.n; i++ {
		e.emit(es.list[i])
	}
	if es.ended != nil {
		e.parentEnded(es.ended, es.outcome)
	}
	if es.shard.runID != 0 {
		e.shardEnded(es.shard)
	}
}

// finishAttempt records the outcome of rec's attempt that ran from clock reading startNs
// to endNs and moves the task on: its next occurrence, a retry, SUCCEEDED, or DEAD with a
// dead letter. Requires sh.mu; the events are emitted by the caller once the lock is
// released. With no retention a finished record is removed: the caller must not touch it.
func (e *Engine) finishAttempt(sh *shard, rec *record, err error, startNs, endNs int64, es *events) {
	t := &rec.task
	ev := Event{Namespace: t.Namespace, ID: t.ID, Version: t.Version, Type: t.Type, Attempt: rec.attempts, Duration: time.Duration(endNs - startNs),
		RunID: rec.runID, Trace: t.Trace}
	if rec.rare != nil {
		rec.rare.earlyErr = nil
	}
	if c := t.Concurrency; c != nil {
		e.releaseSlot(c.lim)
	}
	rec.runID = 0
	if err == nil {
		sh.succeeded++
		ev.Kind = EventSucceeded
		es.add(ev)
		if t.Schedule.Recurring() {
			e.nextOccurrence(sh, rec, e.clock.Time(endNs), es)
		} else if setState(rec, Succeeded) == nil {
			es.end(rec)
			es.endShard(rec)
			e.ended(sh, rec, endNs)
		}
		return
	}
	sh.failed++
	start, end := e.clock.Time(startNs), e.clock.Time(endNs)
	r := rec.rareState()
	if len(r.history) == 0 { // the occurrence's first failure: its first attempt (retries follow failures)
		r.firstStart = start
	}
	r.lastErr = err.Error()
	if len(r.history) == maxHistory {
		r.history = append(r.history[:1], r.history[2:]...) // keep the first and the latest
	}
	r.history = append(r.history, AttemptRecord{Attempt: rec.attempts, Start: start, End: end, Err: r.lastErr})
	retry, delay, reason := t.Retry.Decide(rec.attempts, err, r.firstStart, end, jitter())
	if retry {
		if r.occurrence.IsZero() {
			r.occurrence = rec.due // arm moves rec.due to the retry's time
		}
		if armErr := e.arm(sh, rec, end.Add(delay), e.hDue); armErr != nil {
			reason = "the retry could not be scheduled: " + armErr.Error()
		} else if setState(rec, Failed) == nil {
			if t.shard != 0 {
				e.noteShard(rec)
			}
			sh.retried++
			ev.Kind, ev.Err = EventRetrying, err
			es.add(ev)
			return
		} else {
			e.timers.Cancel(rec.timer)
		}
	}
	sh.dead++
	if t.shard == 0 { // a shard's death is its task's occurrence's (shards.go)
		e.dlq.Add(DeadLetter{Task: *t, Attempts: slices.Clone(r.history), DiedAt: end, Reason: reason})
	}
	ev.Kind, ev.Err = EventDead, fmt.Errorf("%s: %w", reason, err)
	es.add(ev)
	if t.Schedule.Recurring() {
		e.nextOccurrence(sh, rec, end, es) // one occurrence is dead; the schedule goes on
		return
	}
	if setState(rec, Dead) == nil {
		es.end(rec)
		es.endShard(rec)
		e.ended(sh, rec, endNs)
	}
}

// nextOccurrence moves a recurring task to its next occurrence after the one that just
// ended at `end`. The schedule goes on from the occurrence's due time, never from a
// retry's: retries do not shift it. Occurrences that came due while the ended one was
// running or backing off are armed in the past, so that onDue handles them as misfires
// (catchUp: the task's MisfirePolicy, counted). Requires sh.mu.
func (e *Engine) nextOccurrence(sh *shard, rec *record, end time.Time, es *events) {
	var next time.Time
	ok := true
	switch r := rec.rare; {
	case r != nil && !r.resume.IsZero(): // a requeued occurrence ended: back to the schedule
		next = r.resume
	case r != nil && !r.occurrence.IsZero():
		next, ok = rec.task.Schedule.Next(r.occurrence, end)
	default:
		next, ok = rec.task.Schedule.Next(rec.due, end)
	}
	if !ok || setState(rec, Pending) != nil {
		return
	}
	rec.attempts, rec.rare = 0, nil
	at := next
	if rec.owed { // a requeued dead occurrence waited for this one: it runs now
		rec.owed = false
		rec.rare = &rareState{resume: next}
		at = end
	}
	if err := e.arm(sh, rec, at, e.hDue); err != nil {
		es.add(Event{Kind: EventDead, Namespace: rec.task.Namespace, ID: rec.task.ID, Version: rec.task.Version, Type: rec.task.Type, Err: err})
	}
}

// onTimeout runs in the timer pool when a running attempt's timeout passes. The attempt
// fails with ErrTimeout whether or not its handler has noticed: its context is cancelled,
// its eventual result ignored, and, since its worker may be stuck for good, a new worker
// takes that worker's place (up to Options.MaxHungWorkers).
func (e *Engine) onTimeout(ev timer.Event) {
	sh, rec := e.lookup(ev.Arg)
	if rec == nil || rec.deadline != ev.Timer || rec.state != Running || rec.attempt == nil {
		sh.mu.Unlock()
		return
	}
	a := rec.attempt
	// A deferred attempt's handler has returned: no worker is stuck, none to replace.
	replace := rec.handlerRunning() && e.hung.Load() < int64(e.opts.MaxHungWorkers)
	rec.abandon()
	rec.deadline, rec.attempt = timer.Timer{}, nil
	a.ctx.cancel(context.DeadlineExceeded)
	sh.timedOut++
	if replace {
		a.replaced = true
		e.hung.Add(1)
		e.loopWorkers.Add(-1) // its worker exits when (if) the handler returns
	}
	var es events
	err := fmt.Errorf("%w after %v", ErrTimeout, rec.task.Timeout)
	timedOut := Event{Kind: EventTimedOut, Namespace: rec.task.Namespace, ID: rec.task.ID, Version: rec.task.Version, Type: rec.task.Type,
		Attempt: rec.attempts, Err: err, RunID: rec.runID}
	e.finishAttempt(sh, rec, err, rec.startNs, e.clock.Now(), &es)
	sh.mu.Unlock()
	if replace {
		e.startWorker()
	}
	e.emit(timedOut)
	e.emitAll(&es)
}

// onDrop runs in the timer pool when a finished task's retention has passed.
func (e *Engine) onDrop(ev timer.Event) {
	sh, rec := e.lookup(ev.Arg)
	if rec != nil && rec.timer == ev.Timer && rec.state.Terminal() {
		rec.timer = timer.Timer{}
		e.remove(sh, rec)
	}
	sh.mu.Unlock()
}

// DeadLetters lists the dead-letter queue, oldest first: up to limit entries after cursor
// ("" for the start), and the cursor of the next page ("" when there is none). limit <= 0
// means DefaultDLQPageSize; it is capped at MaxDLQPageSize. A cursor the engine did not
// issue is ErrBadCursor. Cursors name a position in the queue's order, not an entry, so
// entries added or removed between pages never make a remaining one show twice or go
// missing; a dead letter that replaces one of the same ID moves to the end. Cost:
// O(log n + limit), plus the removed entries crossed; it allocates the page.
func (e *Engine) DeadLetters(cursor string, limit int) ([]DeadLetter, string, error) {
	return e.dlq.List(cursor, limit)
}

// Requeue takes a dead letter out of the dead-letter queue and runs its occurrence again
// now, with its attempts reset (and its retry policy, as for any occurrence).
//
//   - A one-shot task runs again; its retained record (DEAD) is reused.
//   - A recurring task's dead letter is one of its occurrences: Requeue runs it once and
//     leaves the schedule as it is. If the task is waiting for its next occurrence, the
//     requeued one runs now and the schedule then goes on at that next occurrence (one
//     that passed meanwhile is a misfire, as ever); if an occurrence is due, running or
//     backing off between retries, the requeued one runs as soon as it ends.
//   - A task whose record is gone (dropped after its retention) or that was cancelled
//     comes back as it was submitted, recurring schedule included, at Version+1 (so that
//     its events are told from its predecessor's): the requeued occurrence runs now, and
//     a recurring schedule starts again from now, as for a Submit (its old phase was in
//     the record). It comes back without its DependsOn: it ran once its parents had
//     ended, and they may be gone.
//
// A different task holding the ID (another version of it, submitted since) is
// ErrExists; no dead letter for the ID is ErrNotFound. Info describes the task after
// the requeue. Cost: O(1), plus a Submit when the record is gone.
func (e *Engine) Requeue(namespace, id string) (Info, error) {
	namespace = nsOrDefault(namespace)
	dl, ok := e.dlq.Get(namespace, id)
	if !ok {
		return Info{}, fmt.Errorf("%w: %s/%s in the dead-letter queue", ErrNotFound, namespace, id)
	}
	if sh, rec, err := e.locked(namespace, id); err == nil {
		info, done, err := e.requeueRecord(sh, rec, dl.Task.Version)
		sh.mu.Unlock()
		if done {
			if err == nil {
				e.dlq.Remove(namespace, id)
			}
			return info, err
		}
	}
	t := dl.Task
	t.Version++
	t.DependsOn = nil // it ran once its parents had ended: the requeued run waits for none
	if !t.Schedule.Recurring() {
		_, now := e.now()
		t.Schedule = At(now)
	}
	info, err := e.Submit(t)
	if err != nil {
		return Info{}, err
	}
	if t.Schedule.Recurring() {
		// Its first occurrence is armed; the requeued one runs before it. Another Submit
		// may have replaced it meanwhile: then that task stands, and this one is gone.
		if sh, rec, err := e.locked(namespace, id); err == nil {
			if rec.task.Version == t.Version && e.requeueLocked(sh, rec) == nil {
				info = rec.info()
			}
			sh.mu.Unlock()
		}
	}
	e.dlq.Remove(namespace, id)
	return info, nil
}

// requeueRecord requeues the dead occurrence of version v of rec's task. done is false
// when the record was finished (CANCELLED, SUCCEEDED): it is removed, for the task to be
// submitted again. Requires sh.mu.
func (e *Engine) requeueRecord(sh *shard, rec *record, v uint64) (info Info, done bool, err error) {
	switch {
	case rec.task.Version != v:
		return Info{}, true, fmt.Errorf("%w: %s/%s is version %d, the dead letter's is version %d", ErrExists, rec.task.Namespace, rec.task.ID, rec.task.Version, v)
	case rec.state == Cancelled || rec.state == Succeeded:
		e.remove(sh, rec)
		return Info{}, false, nil
	}
	if err := e.requeueLocked(sh, rec); err != nil {
		return Info{}, true, err
	}
	return rec.info(), true, nil
}

// requeueLocked runs a requeued dead occurrence of rec's task now (a DEAD one-shot, or a
// recurring task waiting for its next occurrence, to which it then returns), or, for a
// recurring task with an occurrence in progress, once that ends (owed). Requires sh.mu.
func (e *Engine) requeueLocked(sh *shard, rec *record) error {
	_, now := e.now()
	if !rec.task.Schedule.Recurring() {
		if rec.state != Dead {
			return fmt.Errorf("%w: %s/%s is %s", ErrExists, rec.task.Namespace, rec.task.ID, rec.state)
		}
		e.retire(sh, rec)
		if err := setState(rec, Pending); err != nil {
			return err
		}
		rec.attempts, rec.rare = 0, nil
		return e.arm(sh, rec, now, e.hDue)
	}
	if rec.state != Pending {
		rec.owed = true // DUE, RUNNING or FAILED: nextOccurrence runs it
		return nil
	}
	resume := rec.due
	if rec.rare != nil && !rec.rare.resume.IsZero() {
		resume = rec.rare.resume // a requeued occurrence is armed already; this one replaces it
	}
	if !rec.timer.IsZero() {
		e.timers.Cancel(rec.timer) // if it already fired, onDue finds it stale
	}
	rec.timer = timer.Timer{}
	rec.attempts, rec.rare = 0, &rareState{resume: resume}
	return e.arm(sh, rec, now, e.hDue)
}

// PurgeDeadLetter deletes one dead letter; PurgeDeadLetters deletes them all and returns
// how many.
func (e *Engine) PurgeDeadLetter(namespace, id string) bool {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return e.dlq.Purge(namespace, id)
}

// PurgeDeadLetters deletes every dead letter and returns how many there were.
func (e *Engine) PurgeDeadLetters() int { return e.dlq.PurgeAll() }

// Complete reports the outcome of an attempt whose handler returns ErrDeferred: nil
// succeeds, an error fails it exactly as a handler's would (retry, or DEAD). It may come
// before the handler has returned (a remote worker can be that fast): the outcome is then
// applied when the handler returns ErrDeferred, and dropped if the handler returns
// anything else (its own result wins). It returns ErrUnknownRun when runID names no
// running attempt: it completed, timed out, was cancelled or replaced, or never existed.
// Cost: O(1).
func (e *Engine) Complete(runID uint64, err error) error {
	sh, rec, uerr := e.runningAttempt(runID)
	if uerr != nil {
		return uerr
	}
	switch rec.phase {
	case phaseEarly: // a second Complete before the handler returned
		sh.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrUnknownRun, runID)
	case phaseRunning:
		rec.setPhase(phaseEarly)
		rec.rareState().earlyErr = err
		sh.mu.Unlock()
		return nil
	}
	rec.setPhase(phaseIdle) // phaseFiled: this is the outcome
	if !rec.deadline.IsZero() {
		e.timers.Cancel(rec.deadline)
	}
	rec.deadline, rec.attempt = timer.Timer{}, nil
	endNs := e.clock.Now()
	sh.deferredDur.observe(time.Duration(endNs - rec.startNs))
	var es events
	e.finishAttempt(sh, rec, err, rec.startNs, endNs, &es)
	sh.mu.Unlock()
	e.emitAll(&es)
	return nil
}
