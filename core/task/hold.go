package task

import (
	"fmt"

	"github.com/tock-sched/tock/core/timer"
)

// HoldTimeout stops the timeout of the running attempt runID: the attempt then waits
// without limit (for a remote worker with room for it, say) until StartTimeout, Complete
// or Cancel. A handler may call it for its own run before returning ErrDeferred. The
// attempt's context keeps the deadline it was given. It returns ErrUnknownRun when runID
// names no running attempt. Cost: O(1).
func (e *Engine) HoldTimeout(runID uint64) error {
	sh, rec, err := e.runningAttempt(runID)
	if err != nil {
		return err
	}
	if !rec.deadline.IsZero() {
		e.timers.Cancel(rec.deadline)
		rec.deadline = timer.Timer{}
	}
	sh.mu.Unlock()
	return nil
}

// StartTimeout starts the running attempt runID's timeout afresh from now: unless
// Complete comes within the task's timeout, the attempt fails with ErrTimeout. It is for a
// deferred attempt handed to its executor later than it started (after HoldTimeout). A
// task without a timeout is unaffected. ErrUnknownRun when runID names no running
// attempt (it completed, timed out, was cancelled or replaced). Cost: O(1).
func (e *Engine) StartTimeout(runID uint64) error {
	sh, rec, err := e.runningAttempt(runID)
	if err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if !rec.deadline.IsZero() {
		e.timers.Cancel(rec.deadline)
		rec.deadline = timer.Timer{}
	}
	t := rec.task.Timeout
	if t <= 0 {
		return nil
	}
	nowNs, _ := e.now()
	tm, err := e.timers.At(nowNs+int64(t), e.hLimit, timerArg(sh, rec))
	if err != nil {
		return err
	}
	rec.deadline = tm
	return nil
}

// runningAttempt returns, with sh.mu held, the record whose attempt runID is running; with
// ErrUnknownRun (and no lock held) when there is none.
func (e *Engine) runningAttempt(runID uint64) (*shard, *record, error) {
	sh, slot := e.runRecord(runID)
	sh.mu.Lock()
	var rec *record
	if int(slot) < len(sh.slots) {
		rec = sh.slots[slot]
	}
	if rec == nil || rec.runID != runID || rec.state != Running || rec.attempt == nil {
		sh.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %d", ErrUnknownRun, runID)
	}
	return sh, rec, nil
}
