package task

import "strconv"

// Records are reused: a task that is submitted, run once and dropped (Retention < 0), or
// retained as an entry of its shard's retained log (retained.go), would otherwise allocate a 480 B record, and at a million tasks a second the collector's work
// on those was a fifth of the engine's CPU. A removed record goes to Engine.spare (a
// sync.Pool, so records that stay unused are freed by the collector after two cycles)
// and a later Submit takes it from there; but only once nothing outside its shard's lock
// can refer to it any more (recyclable). What can is the record's attempt phase, and
// what its earlier attempts left behind (record.kept):
//
//   - A queued runItem names the record by pointer, and the worker that takes the item
//     keeps using it (and hands the handler &rec.first and &rec.task) until its last
//     locked section after the handler returns: phaseQueued and phaseRunning (or
//     phaseEarly), which that section ends. A record has at most one such item or worker
//     at a time: a record becomes DUE again only after the worker of its previous attempt
//     has finished with it, or after that attempt ended without it (below); and a record
//     whose queued item went stale (it was cancelled, dropped or replaced while DUE)
//     never becomes DUE again.
//   - An attempt that ends while its handler may still be running (timed out, or its
//     task cancelled, dropped or replaced: abandon) leaves a handler holding the
//     record's context, Run and Task: the record is kept and never reused; the collector
//     frees it.
//   - A first attempt whose handler asked for ctx.Done() may have derived contexts that
//     watch it after the handler returned (context.WithCancel starts a goroutine that
//     does): recyclable declines the record too.
//
// The handler contract that makes this safe is on Handler: ctx and run are valid until
// the handler returns. Everything else the engine hands out is a copy (Info, Event,
// DeadLetter), and a Task's Payload is a fresh copy per Submit (or the array a
// SubmitOwned caller handed over) whose bytes are never written again, so a Payload
// slice taken from a Run or an Info stays valid.

// phase is where a record's current attempt stands, which says what outside the shard's
// lock refers to the record; guarded by sh.mu. Every move follows phaseMoves.
type phase uint8

const (
	phaseIdle    phase = iota // no attempt in flight: nothing outside the lock refers to the record
	phaseQueued               // a runItem names it: queued, or taken by a worker not yet in its first locked section
	phaseRunning              // the item's worker runs the handler of rec.attempt
	phaseEarly                // as phaseRunning, and Complete has given the outcome (rare.earlyErr)
	phaseFiled                // the handler returned ErrDeferred: Complete (or the timeout) ends rec.attempt; no worker holds the record

	numPhases
)

var phaseNames = [numPhases]string{phaseIdle: "idle", phaseQueued: "queued", phaseRunning: "running", phaseEarly: "early", phaseFiled: "filed"}

func (p phase) String() string {
	if p < numPhases {
		return phaseNames[p]
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// phaseMoves is the attempt's state machine: phaseMoves[from][to] is true exactly for
// the legal moves.
var phaseMoves = [numPhases][numPhases]bool{
	phaseIdle: {phaseQueued: true}, // onDue or queueNow queued a run item
	phaseQueued: {
		phaseRunning: true, // its worker started the attempt
		phaseIdle:    true, // its worker found the item stale (cancelled, dropped, replaced)
	},
	phaseRunning: {
		phaseEarly: true, // Complete before the handler returned
		phaseFiled: true, // the handler returned ErrDeferred
		phaseIdle:  true, // the handler returned; or the attempt was abandoned (timeout, cancel)
	},
	phaseEarly: {phaseIdle: true}, // the handler returned, or the attempt was abandoned
	phaseFiled: {phaseIdle: true}, // Complete, the timeout, or a cancel ended the attempt
}

// setPhase moves rec's attempt to phase to. An illegal move is a bug in the engine that
// would let a record be reused while something still refers to it, so it panics, as the
// runtime does on timer corruption, rather than risk that. Requires sh.mu.
func (rec *record) setPhase(to phase) {
	if !phaseMoves[rec.phase][to] { // a value that is no phase is out of the table's range: a panic too
		rec.badPhaseMove(to)
	}
	rec.phase = to
}

// badPhaseMove panics on an illegal move: out of line, so that setPhase inlines.
//
//go:noinline
func (rec *record) badPhaseMove(to phase) {
	panic("task: record " + rec.task.Namespace + "/" + rec.task.ID + ": illegal attempt phase move " + rec.phase.String() + " -> " + to.String())
}

// handlerRunning reports whether a handler of rec's current attempt may still be
// running. Requires sh.mu.
func (rec *record) handlerRunning() bool {
	return rec.phase == phaseRunning || rec.phase == phaseEarly
}

// abandon ends rec's attempt (rec.attempt != nil) before its worker has finished with it
// (retire, onTimeout): if its handler has not returned, it may keep rec's context and Run
// for as long as it runs, so rec is kept from reuse for good. Requires sh.mu.
func (rec *record) abandon() {
	if rec.handlerRunning() {
		rec.kept = true
	}
	rec.setPhase(phaseIdle)
}

// recyclable reports whether nothing outside the shard's lock can refer to rec any more
// (see above). Requires the lock of the shard rec is, or was, in.
func (rec *record) recyclable() bool {
	return rec.phase == phaseIdle && !rec.kept && rec.first.ctx.done == nil
}

// newRecord returns a PENDING record of task t with key hash h, reusing a recycled one
// when there is one. It takes no lock: a recycled record is referred to by nothing.
func (e *Engine) newRecord(t *Task, h uint64) *record {
	rec, _ := e.spare.Get().(*record)
	if rec == nil {
		return &record{task: *t, state: Pending, hash: h}
	}
	*rec = record{task: *t, state: Pending, hash: h}
	return rec
}

// recycle offers a record that is in no shard's table for reuse, if it is recyclable;
// otherwise it is left to the collector. The caller must not touch rec afterwards:
// another goroutine may already be reusing it. Requires the lock of the shard rec was
// removed from.
func (e *Engine) recycle(rec *record) {
	if !rec.recyclable() {
		return
	}
	// What a record refers to could be large (a payload of up to Options.MaxPayload, an
	// attempt history): it is not kept alive while the record waits for reuse.
	rec.task.Payload, rec.rare, rec.attempt = nil, nil, nil
	e.spare.Put(rec)
}
