package task

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestTraceIsCarriedToRunsAndEvents: a task's Trace reaches its handler (Run.Task), the
// events that end its attempts (Retrying, Dead, Succeeded) and its dead letter, as the
// pointer it was submitted with; a task without one hands out nil.
func TestTraceIsCarriedToRunsAndEvents(t *testing.T) {
	h := newHarness(t)
	tr := &Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "tock=1"}
	seen := make(chan *Trace, 8)
	h.e.Register("fail", func(ctx context.Context, r *Run) error {
		seen <- r.Task.Trace
		return errors.New("no")
	})
	h.e.Register("ok", func(ctx context.Context, r *Run) error {
		seen <- r.Task.Trace
		return nil
	})
	h.submit(Task{ID: "f", Type: "fail", Schedule: After(0), Trace: tr,
		Retry: RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second}})
	h.submit(Task{ID: "ok", Type: "ok", Schedule: After(0), Trace: tr})
	h.submit(Task{ID: "bare", Type: "ok", Schedule: After(0)})
	h.fake.Advance(0)
	if ev := h.wait(EventRetrying, "f"); ev.Trace != tr {
		t.Errorf("Retrying event's Trace %v, want %v", ev.Trace, tr)
	}
	if ev := h.wait(EventSucceeded, "ok"); ev.Trace != tr {
		t.Errorf("Succeeded event's Trace %v, want %v", ev.Trace, tr)
	}
	if ev := h.wait(EventSucceeded, "bare"); ev.Trace != nil {
		t.Errorf("a task without a trace: Succeeded event's Trace %v, want nil", ev.Trace)
	}
	h.fake.Advance(time.Second)
	if ev := h.wait(EventDead, "f"); ev.Trace != tr {
		t.Errorf("Dead event's Trace %v, want %v", ev.Trace, tr)
	}
	var withTrace, without int
	for range 4 { // f twice, ok, bare
		if <-seen == tr {
			withTrace++
		} else {
			without++
		}
	}
	if withTrace != 3 || without != 1 {
		t.Errorf("runs saw the trace %d times and nil %d times, want 3 and 1", withTrace, without)
	}
	page, _, err := h.e.DeadLetters("", 10)
	if err != nil || len(page) != 1 || page[0].Task.Trace != tr {
		t.Errorf("dead letters %+v, %v: want f with its trace", page, err)
	}
}
