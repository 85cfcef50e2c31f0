package task

import (
	"context"
	"testing"
	"time"
)

// TestTaskDueAtSubmitIsQueuedWithoutATimer: a one-shot task already due when submitted
// (no delay, or At a past time) is DUE when Submit returns, with no timer scheduled for it,
// although Submit reports it as accepted (PENDING, due at its time); one due later, or a
// recurring one, gets a timer.
func TestTaskDueAtSubmitIsQueuedWithoutATimer(t *testing.T) {
	h := newHarness(t, WithWorkers(1))
	unblock := h.blocking()
	h.e.Register("t", func(ctx context.Context, r *Run) error { return nil })
	h.submit(Task{ID: "blocker", Type: "block", Schedule: After(time.Second)})
	h.fake.Advance(time.Second)
	h.wait(EventStarted, "blocker") // the only worker is busy: what is queued stays DUE
	scheduled := h.e.timers.Stats().Scheduled
	for _, tc := range []struct {
		id    string
		sched Schedule
	}{
		{"now", After(0)},
		{"past", At(epoch.Add(-time.Hour))},
	} {
		in := h.submit(Task{ID: tc.id, Type: "t", Schedule: tc.sched})
		if in.State != Pending || in.NextRun.IsZero() {
			t.Fatalf("%s: Submit reported %v due %v, want PENDING with its due time", tc.id, in.State, in.NextRun)
		}
		if s := h.state(tc.id); s != Due {
			t.Fatalf("%s: %v after Submit, want DUE", tc.id, s)
		}
	}
	if got := h.e.timers.Stats().Scheduled; got != scheduled {
		t.Fatalf("%d timers scheduled for tasks due at submission", got-scheduled)
	}
	h.submit(Task{ID: "later", Type: "t", Schedule: After(time.Millisecond)})
	h.submit(Task{ID: "every", Type: "t", Schedule: Every(time.Second)})
	if got := h.e.timers.Stats().Scheduled; got != scheduled+2 {
		t.Fatalf("%d timers scheduled for a delayed and a recurring task, want 2", got-scheduled)
	}
	unblock()
	h.wait(EventSucceeded, "now")
	h.wait(EventSucceeded, "past")
}

// TestTaskDueAtSubmitWithTheQueueFullTakesTheTimer: with no room in the queue, Submit of
// a task that is already due does not wait: the task takes the timer's path (whose
// firing waits for room) and runs once the queue drains.
func TestTaskDueAtSubmitWithTheQueueFullTakesTheTimer(t *testing.T) {
	h := newHarness(t, WithWorkers(1), func(o *Options) { o.QueueSize = 1 })
	unblock := h.blocking()
	ran := make(chan string, 4)
	h.e.Register("t", func(ctx context.Context, r *Run) error { ran <- r.Task.ID; return nil })
	h.submit(Task{ID: "blocker", Type: "block", Schedule: After(0)})
	h.wait(EventStarted, "blocker")
	h.submit(Task{ID: "queued", Type: "t", Schedule: After(0)}) // fills the queue
	scheduled := h.e.timers.Stats().Scheduled
	h.submit(Task{ID: "overflow", Type: "t", Schedule: After(0)})
	if got := h.e.timers.Stats().Scheduled; got != scheduled+1 {
		t.Fatalf("%d timers scheduled for a due task that found the queue full, want 1", got-scheduled)
	}
	h.fake.Advance(time.Millisecond) // its tick: the timer fires and waits for room
	unblock()
	for _, want := range []string{"queued", "overflow"} {
		select {
		case id := <-ran:
			if id != want {
				t.Fatalf("ran %q, want %q", id, want)
			}
		case <-time.After(eventWait):
			t.Fatalf("%q never ran", want)
		}
	}
}
