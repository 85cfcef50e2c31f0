package task

import (
	"context"
	"errors"
	"testing"
	"time"
)

// startHeld starts task id of type "remote" (see deferring), due at once with a 1 s
// timeout, and holds its timeout; it returns the attempt's run ID.
func (h *harness) startHeld(runs chan uint64, id string) uint64 {
	h.t.Helper()
	runID := h.startDeferred(runs, Task{ID: id, Type: "remote", Schedule: After(0), Timeout: time.Second})
	if err := h.e.HoldTimeout(runID); err != nil {
		h.t.Fatal(err)
	}
	return runID
}

// A held attempt outlives its timeout; StartTimeout gives it the whole timeout again from
// the moment it is called, and the attempt then times out on that new deadline.
func TestHoldAndStartTimeout(t *testing.T) {
	h := newHarness(t, WithWorkers(1))
	runs := deferring(h, "remote")
	id := h.startHeld(runs, "held")
	h.fake.Advance(time.Hour) // far past the 1 s timeout: held, nothing happens
	if s := h.state("held"); s != Running {
		t.Fatalf("held attempt: %v, want RUNNING", s)
	}
	if err := h.e.StartTimeout(id); err != nil {
		t.Fatal(err)
	}
	h.fake.Advance(999 * time.Millisecond)
	if s := h.state("held"); s != Running {
		t.Fatalf("999 ms after StartTimeout: %v, want RUNNING", s)
	}
	h.fake.Advance(time.Millisecond)
	h.wait(EventTimedOut, "held")
	for _, f := range []func(uint64) error{h.e.HoldTimeout, h.e.StartTimeout} {
		if err := f(id); !errors.Is(err, ErrUnknownRun) {
			t.Fatalf("after the timeout: %v, want ErrUnknownRun", err)
		}
	}
}

// A held attempt still completes, and can be cancelled.
func TestHeldAttemptCompletesOrCancels(t *testing.T) {
	h := newHarness(t, WithWorkers(1))
	runs := deferring(h, "remote")
	a := h.startHeld(runs, "a")
	h.fake.Advance(time.Minute)
	if err := h.e.Complete(a, nil); err != nil {
		t.Fatal(err)
	}
	h.wait(EventSucceeded, "a")

	b := h.startHeld(runs, "b")
	if err := h.e.Cancel("", "b"); err != nil {
		t.Fatal(err)
	}
	if err := h.e.StartTimeout(b); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("StartTimeout of a cancelled task's run: %v", err)
	}
}

// Drop removes pending and running tasks without an event; the dropped task never runs
// and a running attempt's late Complete is refused.
func TestDrop(t *testing.T) {
	h := newHarness(t, WithWorkers(1))
	runs := deferring(h, "remote")
	h.submit(Task{ID: "pending", Type: "remote", Schedule: After(time.Minute)})
	id := h.startDeferred(runs, Task{ID: "running", Type: "remote", Schedule: After(0)})
	for _, tid := range []string{"pending", "running"} {
		if err := h.e.Drop("", tid); err != nil {
			t.Fatal(err)
		}
		if _, err := h.e.Get("", tid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after Drop: %v", err)
		}
	}
	if err := h.e.Drop("", "pending"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Drop: %v", err)
	}
	if err := h.e.Complete(id, nil); !errors.Is(err, ErrUnknownRun) {
		t.Fatalf("Complete of a dropped run: %v", err)
	}
	h.fake.Advance(time.Hour)
	// A marker: once it has run, a stray run of "pending" would have too.
	h.e.Register("local", func(ctx context.Context, r *Run) error { return nil })
	h.submit(Task{ID: "marker", Type: "local", Schedule: After(0)})
	h.fake.Advance(0)
	h.wait(EventSucceeded, "marker")
	select {
	case r := <-runs:
		t.Fatalf("a dropped task ran (run %d)", r)
	default:
	}
	if st := h.e.Stats(); st.Cancelled != 0 || st.Tasks != 1 {
		t.Fatalf("stats after Drop: cancelled %d tasks %d, want 0 and 1 (the marker)", st.Cancelled, st.Tasks)
	}
}
