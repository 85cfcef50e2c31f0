package task

// Records are reused: a task that is submitted, run once and dropped (Retention < 0) would
// otherwise allocate a 480 B record, and at a million tasks a second the collector's work
// on those was a fifth of the engine's CPU. A removed record goes to Engine.spare (a
// sync.Pool, so records that stay unused are freed by the collector after two cycles)
// and a later Submit takes it from there; but only once nothing outside its shard's lock
// can refer to it any more. What can is tracked in record.use:
//
//   - A queued runItem names the record by pointer, and the worker that takes the item
//     keeps using it (and hands the handler &rec.first and &rec.task) until its last
//     locked section after the handler returns: onDue sets useRun, that worker clears it.
//     A record has at most one such item or worker at a time: a record becomes DUE again
//     only after the worker of its previous attempt has finished with it, or after that
//     attempt ended without it (below); and a record whose queued item went stale (it
//     was cancelled, dropped or replaced while DUE) never becomes DUE again.
//   - An attempt that ends while its handler may still be running (timed out, or its
//     task cancelled, dropped or replaced) leaves a handler holding the record's context,
//     Run and Task: the record is marked useKept and never reused; the collector frees it.
//   - A first attempt whose handler asked for ctx.Done() may have derived contexts that
//     watch it after the handler returned (context.WithCancel starts a goroutine that
//     does): recycle declines the record too.
//
// The handler contract that makes this safe is on Handler: ctx and run are valid until
// the handler returns. Everything else the engine hands out is a copy (Info, Event,
// DeadLetter), and a Task's Payload is a fresh copy per Submit whose bytes are never
// written again, so a Payload slice taken from a Run or an Info stays valid.

// use says what outside the shard's lock may still refer to a record; guarded by sh.mu.
type use uint8

const (
	useFree use = iota // nothing: once removed, the record may be reused
	useRun             // a queued runItem, then the worker that took it
	useKept            // a handler that outlived its attempt: never reused
)

// hold marks rec as named by the runItem about to be queued. Requires sh.mu.
func (rec *record) hold() {
	if rec.use == useFree {
		rec.use = useRun
	}
}

// release ends the hold of a run item's worker: it makes no further use of rec once
// it unlocks. Requires sh.mu.
func (rec *record) release() {
	if rec.use == useRun {
		rec.use = useFree
	}
}

// detach is called when rec's running attempt ends before its worker has finished with
// it (retire, onTimeout): unless the handler has already returned (the attempt was
// deferred), it may keep rec's context and Run for as long as it runs. Requires sh.mu.
func (rec *record) detach() {
	if rec.attempt != nil && !rec.filed {
		rec.use = useKept
	}
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

// recycle offers a record that is in no shard's table for reuse, if nothing can refer to
// it any more (see above); otherwise it is left to the collector. The caller must not
// touch rec afterwards: another goroutine may already be reusing it. Requires the lock
// of the shard rec was removed from (its use and first attempt are guarded by it).
func (e *Engine) recycle(rec *record) {
	if rec.use != useFree || rec.first.ctx.done != nil {
		return
	}
	// What a record refers to could be large (a payload of up to Options.MaxPayload, an
	// attempt history): it is not kept alive while the record waits for reuse.
	rec.task.Payload, rec.rare, rec.attempt = nil, nil, nil
	e.spare.Put(rec)
}
