package task

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Sharded runs. A task with Shards = N (2 <= N <= MaxShards) fans each occurrence out
// into N runs. Its own record goes DUE and RUNNING as any task's, but its worker calls
// no handler: it submits one shard record per index (a one-shot task due now, with the
// task's type, payload, retry policy and timeout) and leaves the occurrence's attempt
// deferred, as a handler returning ErrDeferred does. Each shard is then an ordinary
// record: its own attempts, backoff, timeout and run IDs; its handler sees the task
// (Run.Task: the sharded task's ID, not the shard record's) and Run.Shard. When the
// last shard ends, the occurrence is completed (Complete with the occurrence's run ID):
//
//   - every shard SUCCEEDED: the occurrence succeeded (SUCCEEDED, or for a recurring
//     task its next occurrence, which fans out again);
//   - some shard ended DEAD or CANCELLED: the occurrence fails for good (ErrShardFailed,
//     never retried: the shards retried on their own), DEAD with one dead letter for the
//     task, or for a recurring task its next occurrence. The other shards run on to their
//     own end first; a shard's dead letter is the task's, not filed on its own.
//
// A shard's record emits its own events, under its own ID (Event.OfShard); the task's
// occurrence emits its start and its end. Cancelling the task cancels its shards. The task's Timeout bounds each shard's attempt,
// not the occurrence. A sharded task cannot have a concurrency key (its shards would wait
// on slots its occurrence holds), nor be Exclusive (its shards overlap by design).
//
// Invariants (lock order: a shard's mu, then Engine.shardMu, then a shardSet's mu):
//   - A shardSet is in Engine.shardSets, under its occurrence's run ID, from the fan-out
//     until its last shard has ended (left = 0); its occurrence's record holds it in
//     rare.shards until the occurrence ends.
//   - left counts the shards whose record has not ended; each shard's end is counted once
//     (its record is removed as it ends, so it cannot end twice).
//   - A task without Shards takes no allocation and two branches for this.

// MaxShards bounds Task.Shards: a fan-out submits that many records at once, each
// holding the payload's bytes against Options.MaxPayloadBytes.
const MaxShards = 1024

// ErrNoShards: an occurrence of a Broadcast task came due with no one to broadcast to
// (Options.BroadcastWidth said 0); the attempt fails, retried per the task's policy.
var ErrNoShards = errors.New("task: a broadcast with no one to run it")

// ErrShardFailed: an occurrence of a sharded task failed because one of its shards ended
// DEAD or CANCELLED; the message names the first and counts them.
var ErrShardFailed = errors.New("task: a shard failed")

// shardIDPrefix starts the ID of a shard's own record: "\x00shard:", the occurrence's run
// ID in 16 hex digits, "/", the index. Users' IDs may not start with it.
const shardIDPrefix = "\x00shard:"

// ShardInfo is one shard's state in Info.Shards.
type ShardInfo struct {
	Index     int
	State     State // PENDING until its record has been submitted and run
	Attempts  int
	LastError string
}

// Shard returns the shard this run is of and the task's shard count: (0, 1) for a task
// without shards.
func (r *Run) Shard() (index, total int) {
	if r.Task.shard == 0 {
		return 0, 1
	}
	return int(r.Task.shard) - 1, int(r.Task.Shards)
}

// fansOut reports whether t's occurrences fan out into shards (t is no shard itself).
func (t *Task) fansOut() bool { return (t.Shards > 1 || t.Broadcast) && t.shard == 0 }

func (t *Task) validateShards() error {
	switch {
	case t.shard == 0 && strings.HasPrefix(t.ID, shardIDPrefix):
		return fmt.Errorf("ID may not start with %q (shards' own records)", shardIDPrefix)
	case t.shard == 0 && !t.Broadcast && (t.Shards == 1 || t.Shards > MaxShards):
		return fmt.Errorf("Shards %d outside [2, %d] (0 for none)", t.Shards, MaxShards)
	case t.shard == 0 && t.Broadcast && t.Shards != 0:
		return errors.New("Shards and Broadcast cannot be combined (a broadcast's width is its workers')")
	case t.shard == 0 && t.Concurrency != nil:
		return errors.New("Shards (or Broadcast) and Concurrency cannot be combined")
	case t.shard == 0 && t.Exclusive:
		return errors.New("Shards (or Broadcast) and Exclusive cannot be combined (the shards run at once)")
	}
	return nil
}

// shardSet is one occurrence's fan-out.
type shardSet struct {
	runID uint64 // the occurrence's attempt, completed when left reaches 0
	// tasks are what the shards' handlers see as Run.Task: the sharded task with shard
	// set; written once, before any shard is submitted.
	tasks []Task
	mu    sync.Mutex
	// guarded by mu
	shards []ShardInfo
	left   int
	failed int
	// stopped: the occurrence was cancelled (cancelShards); fanOut submits no more
	// shards, and cancels one it submitted meanwhile.
	stopped bool
	first   string // the first failure, for the occurrence's error
}

// shardID is the ID of shard i's record of the occurrence run runID.
func shardID(runID uint64, i int) string {
	return shardIDPrefix + fmt.Sprintf("%016x/%d", runID, i)
}

// shardRunID is the occurrence's run ID in a shard record's ID.
func shardRunID(id string) uint64 {
	n, _ := strconv.ParseUint(id[len(shardIDPrefix):len(shardIDPrefix)+16], 16, 64)
	return n
}

// fill sizes set for n shards of t and registers it: before any shard is submitted.
// Requires no lock (set is its fan-out's worker's until registered, but for Info's
// reads of shards).
func (e *Engine) fill(set *shardSet, t *Task, n int) {
	tasks := make([]Task, n)
	shards := make([]ShardInfo, n)
	for i := range n {
		tasks[i] = *t
		tasks[i].Shards, tasks[i].shard = uint16(n), uint16(i+1)
		shards[i] = ShardInfo{Index: i, State: Pending}
	}
	set.mu.Lock()
	set.tasks, set.shards, set.left = tasks, shards, n
	set.mu.Unlock()
	e.shardMu.Lock()
	if e.shardSets == nil {
		e.shardSets = make(map[uint64]*shardSet)
	}
	e.shardSets[set.runID] = set
	e.shardMu.Unlock()
}

// setOf returns the fan-out a shard record belongs to; nil once it has ended.
func (e *Engine) setOf(rec *record) *shardSet {
	e.shardMu.Lock()
	defer e.shardMu.Unlock()
	return e.shardSets[shardRunID(rec.task.ID)]
}

// fanOut submits the shards of set's occurrence of t (t.Shards of them, or for a
// broadcast as many as Options.BroadcastWidth says), a copy of which each shard's record
// keeps. It returns ErrDeferred: the last shard's end completes the occurrence. A shard
// that cannot be submitted counts as one that ended DEAD. A broadcast to no one fails
// the attempt (ErrNoShards), to be retried per the task's policy. Requires no lock.
func (e *Engine) fanOut(t *Task, set *shardSet) error {
	n := int(t.Shards)
	if t.Broadcast {
		if n = min(e.opts.BroadcastWidth(t), MaxShards); n <= 0 {
			return fmt.Errorf("%w: task %s/%s", ErrNoShards, t.Namespace, t.ID)
		}
	}
	e.fill(set, t, n)
	for i := range n {
		if set.isStopped() { // cancelled before its turn: it never runs
			e.shardEnded(shardEnd{runID: set.runID, info: ShardInfo{Index: i, State: Cancelled}})
			continue
		}
		st := Task{Namespace: t.Namespace, ID: shardID(set.runID, i), Type: t.Type, Payload: t.Payload, Schedule: After(0),
			Retry: t.Retry, Timeout: t.Timeout, Shards: uint16(n), shard: uint16(i + 1), Broadcast: t.Broadcast, Trace: t.Trace}
		if _, err := e.SubmitOwned(st); err != nil { // the payload is never written: the shards share it
			e.shardEnded(shardEnd{runID: set.runID, info: ShardInfo{Index: i, State: Dead, LastError: err.Error()}})
		} else if set.isStopped() { // cancelShards may have looked for it before it was there
			_ = e.Cancel(t.Namespace, st.ID)
		}
	}
	return ErrDeferred
}

func (set *shardSet) isStopped() bool {
	set.mu.Lock()
	defer set.mu.Unlock()
	return set.stopped
}

// noteShard records a shard record's state in its fan-out. Requires sh.mu of rec.
func (e *Engine) noteShard(rec *record) {
	set := e.setOf(rec)
	if set == nil {
		return
	}
	set.note(rec.shardInfo())
}

// note records a shard's state.
func (set *shardSet) note(info ShardInfo) {
	set.mu.Lock()
	set.shards[info.Index] = info
	set.mu.Unlock()
}

// shardInfo is the state of rec, a shard's record. Requires its sh.mu.
func (rec *record) shardInfo() ShardInfo {
	in := ShardInfo{Index: int(rec.task.shard) - 1, State: rec.state, Attempts: rec.attempts}
	if rec.rare != nil {
		in.LastError = rec.rare.lastErr
	}
	return in
}

// shardEnd is a shard's end, told to its fan-out once the lock is released.
type shardEnd struct {
	runID uint64 // the occurrence's; 0 for none
	info  ShardInfo
}

// endShard notes in es that rec, a shard's record, has ended. Requires sh.mu.
func (es *events) endShard(rec *record) {
	if rec.task.shard != 0 {
		es.shard = shardEnd{runID: shardRunID(rec.task.ID), info: rec.shardInfo()}
	}
}

// shardEnded counts a shard's end in its fan-out; the last one completes the occurrence.
// Requires no lock.
func (e *Engine) shardEnded(end shardEnd) {
	e.shardMu.Lock()
	set := e.shardSets[end.runID]
	e.shardMu.Unlock()
	if set == nil {
		return
	}
	set.mu.Lock()
	set.shards[end.info.Index] = end.info
	set.left--
	if end.info.State != Succeeded {
		if set.failed == 0 {
			set.first = fmt.Sprintf("shard %d ended %s: %s", end.info.Index, end.info.State, end.info.LastError)
		}
		set.failed++
	}
	left, failed, first := set.left, set.failed, set.first
	set.mu.Unlock()
	if left > 0 {
		return
	}
	e.shardMu.Lock()
	delete(e.shardSets, end.runID)
	e.shardMu.Unlock()
	var err error
	if failed > 0 {
		err = NonRetryable(fmt.Errorf("%w: %d of %d shards (first: %s)", ErrShardFailed, failed, len(set.tasks), first))
	}
	_ = e.Complete(end.runID, err) // ErrUnknownRun: the occurrence was cancelled or replaced
}

// cancelShards cancels the shards of set that have not ended. Requires no lock.
func (e *Engine) cancelShards(ns string, set *shardSet) {
	set.mu.Lock()
	set.stopped = true
	n := len(set.tasks) // 0 while its fan-out has not filled it: then it submits none
	set.mu.Unlock()
	for i := range n {
		_ = e.Cancel(ns, shardID(set.runID, i)) // ErrNotFound, ErrIllegalTransition: it has ended
	}
}

// shardInfos is a copy of set's shard states, for Info.
func (set *shardSet) shardInfos() []ShardInfo {
	set.mu.Lock()
	defer set.mu.Unlock()
	return append([]ShardInfo(nil), set.shards...)
}

// shardRun prepares rec's attempt a: for a sharded task's occurrence it makes and
// returns the fan-out (its worker submits the shards); for a shard's record it points
// a's Run.Task at the task as its fan-out keeps it, and returns nil. Requires sh.mu.
func (e *Engine) shardRun(rec *record, a *attempt) *shardSet {
	if rec.task.shard == 0 {
		set := &shardSet{runID: a.run.RunID} // fanOut fills it, outside the lock
		rec.rareState().shards = set
		return set
	}
	if set := e.setOf(rec); set != nil {
		a.run.Task = &set.tasks[rec.task.shard-1]
		set.note(rec.shardInfo())
	}
	return nil
}

// verifyShards checks the fan-outs in progress: each set's left counts its shards not
// ended and failed those ended otherwise than SUCCEEDED, and every shard record not
// ended belongs to a set in progress. Exact while no shard is ending (tests call it
// once the engine is idle). Takes every shard's mu in turn, then shardMu.
func (e *Engine) verifyShards() error {
	var live []uint64 // the occurrences of the shard records held
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		for _, rec := range sh.slots {
			if rec != nil && rec.task.shard != 0 && !rec.state.Terminal() {
				live = append(live, shardRunID(rec.task.ID))
			}
		}
		sh.mu.Unlock()
	}
	e.shardMu.Lock()
	defer e.shardMu.Unlock()
	for _, runID := range live {
		if e.shardSets[runID] == nil {
			return fmt.Errorf("a shard record of occurrence %x, which has no fan-out in progress", runID)
		}
	}
	for runID, set := range e.shardSets {
		set.mu.Lock()
		left, failed := 0, 0
		for _, s := range set.shards {
			switch {
			case !s.State.Terminal():
				left++
			case s.State != Succeeded:
				failed++
			}
		}
		ok := left == set.left && failed == set.failed
		got := fmt.Sprintf("left %d, failed %d; its shards say %d and %d", set.left, set.failed, left, failed)
		set.mu.Unlock()
		if !ok {
			return fmt.Errorf("fan-out of occurrence %x: %s", runID, got)
		}
	}
	return nil
}
