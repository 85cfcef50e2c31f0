package task

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/internal/waitfor"
)

// deferring registers a handler that defers every attempt and hands its run ID to the test.
func deferring(h *harness, typ string) chan uint64 {
	runs := make(chan uint64, 16)
	h.e.Register(typ, func(ctx context.Context, r *Run) error {
		runs <- r.RunID
		return ErrDeferred
	})
	return runs
}

// startDeferred submits tk (due at once, of a type deferring registered), lets it start,
// and returns its first attempt's run ID, read from runs.
func (h *harness) startDeferred(runs chan uint64, tk Task) uint64 {
	h.t.Helper()
	h.submit(tk)
	h.fake.Advance(0)
	return recv(h.t, runs)
}

func recv(t *testing.T, ch chan uint64) uint64 {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(eventWait):
		t.Fatal("the handler was not called")
		return 0
	}
}

func TestDeferredAttemptCompletesLater(t *testing.T) {
	h := newHarness(t, WithWorkers(1))
	runs := deferring(h, "remote")
	h.e.Register("local", func(ctx context.Context, r *Run) error { return nil })
	h.submit(Task{ID: "l", Type: "local", Schedule: After(time.Second)})
	id := h.startDeferred(runs, Task{ID: "r", Type: "remote", Schedule: After(0)})
	// The only worker is free again while the deferred attempt is outstanding.
	h.fake.Advance(time.Second)
	h.wait(EventSucceeded, "l")
	if s := h.state("r"); s != Running {
		t.Fatalf("deferred attempt: %v, want RUNNING", s)
	}
	h.fake.Advance(2 * time.Second) // the attempt took 3 s on the fake clock
	if err := h.e.Complete(id, nil); err != nil {
		t.Fatal(err)
	}
	ev := h.wait(EventSucceeded, "r")
	if ev.RunID != id {
		t.Fatalf("succeeded event names run %d, want %d", ev.RunID, id)
	}
	if ev.Duration != 3*time.Second {
		t.Fatalf("duration %v, want the 3 s between start and Complete", ev.Duration)
	}
	if err := h.e.Complete(id, nil); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("second Complete: %v", err)
	}
	if err := h.e.Complete(12345, nil); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("unknown run: %v", err)
	}
}

func TestDeferredFailureIsRetriedWithANewRunID(t *testing.T) {
	h := newHarness(t)
	runs := deferring(h, "remote")
	first := h.startDeferred(runs, Task{ID: "r", Type: "remote", Schedule: After(0), Retry: RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second}})
	if err := h.e.Complete(first, errors.New("worker said no")); err != nil {
		t.Fatal(err)
	}
	h.wait(EventRetrying, "r")
	h.fake.Advance(time.Second)
	second := recv(t, runs)
	if second == first {
		t.Fatal("the retry reused the run ID")
	}
	if err := h.e.Complete(first, nil); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("a stale run completed: %v", err)
	}
	if err := h.e.Complete(second, NonRetryable(errors.New("bad payload"))); err != nil {
		t.Fatal(err)
	}
	h.wait(EventDead, "r")
}

func TestDeferredAttemptTimesOutAndCannotCompleteAfter(t *testing.T) {
	h := newHarness(t)
	runs := deferring(h, "remote")
	id := h.startDeferred(runs, Task{ID: "r", Type: "remote", Schedule: After(0), Timeout: 5 * time.Second})
	h.fake.Advance(5 * time.Second)
	h.wait(EventTimedOut, "r")
	h.wait(EventDead, "r")
	if err := h.e.Complete(id, nil); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("Complete after the timeout: %v", err)
	}
	// If the timeout fired before the worker had filed the attempt as deferred, it counted
	// the worker as stuck and started a replacement (correctly: its handler had not yet
	// returned); once the handler has returned, no worker may stay counted as hung.
	waitfor.Until(t, "no worker counted as hung after a deferred attempt", func() bool { return h.e.Stats().HungWorkers == 0 })
}

func TestCancelEndsADeferredAttempt(t *testing.T) {
	h := newHarness(t)
	runs := deferring(h, "remote")
	id := h.startDeferred(runs, Task{ID: "r", Type: "remote", Schedule: After(0)})
	if err := h.e.Cancel("", "r"); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Complete(id, nil); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("Complete after Cancel: %v", err)
	}
	if s := h.state("r"); s != Cancelled {
		t.Fatalf("state %v", s)
	}
}

// TestCompleteBeforeTheHandlerReturns: a remote worker can answer before the handler
// that handed it the task has returned ErrDeferred; the outcome is kept and applied then.
func TestCompleteBeforeTheHandlerReturns(t *testing.T) {
	h := newHarness(t)
	var early error
	h.e.Register("fast", func(ctx context.Context, r *Run) error {
		early = h.e.Complete(r.RunID, nil)
		return ErrDeferred
	})
	h.e.Register("changed-mind", func(ctx context.Context, r *Run) error {
		h.e.Complete(r.RunID, nil) // dropped: the handler's own error wins
		return NonRetryable(errors.New("failed after all"))
	})
	h.submit(Task{ID: "f", Type: "fast", Schedule: After(0)})
	h.submit(Task{ID: "c", Type: "changed-mind", Schedule: After(0)})
	h.fake.Advance(0)
	h.wait(EventSucceeded, "f")
	if early != nil {
		t.Fatalf("early Complete: %v", early)
	}
	h.wait(EventDead, "c")
}
