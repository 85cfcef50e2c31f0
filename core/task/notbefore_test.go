package task

import (
	"context"
	"testing"
	"time"
)

// ContinueNotBefore holds a task's first run back until notBefore while the engine holds
// the task (Get finds it, Cancel ends it): a recurring task's occurrences that fell due
// meanwhile are a misfire (fire once: one run, due at the latest of them, on the
// schedule's phase); a one-shot task runs once the hold ends.
func TestContinueNotBeforeHoldsTheFirstRun(t *testing.T) {
	h := newHarness(t, WithWorkers(1))
	dues := make(chan Run, 16)
	h.e.Register("w", func(_ context.Context, r *Run) error {
		dues <- Run{Task: &Task{ID: r.Task.ID}, Due: r.Due}
		return nil
	})
	now := epoch
	// A one-shot task already due is not queued at once (it would be DUE by now).
	if _, err := h.e.ContinueNotBefore(Task{ID: "once", Type: "w", Schedule: At(now)}, time.Time{}, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := h.state("once"); got != Pending {
		t.Fatalf("a one-shot task held for 1 s is %v at once, want PENDING", got)
	}
	rec := Task{ID: "rec", Type: "w", Schedule: Every(time.Second), Misfire: MisfireFireOnce}
	in, err := h.e.ContinueNotBefore(rec, now.Add(time.Second), now.Add(3500*time.Millisecond))
	if err != nil || in.State != Pending || !in.NextRun.Equal(now.Add(time.Second)) {
		t.Fatalf("ContinueNotBefore: %+v, %v; want PENDING, next run the occurrence it holds", in, err)
	}
	if _, err := h.e.ContinueNotBefore(Task{ID: "cancelled", Type: "w", Schedule: Every(time.Second)}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := h.state("cancelled"); got != Pending {
		t.Fatalf("a held task is %v, want PENDING", got)
	}
	if err := h.e.Cancel("", "cancelled"); err != nil {
		t.Fatalf("Cancel of a held task: %v", err)
	}
	for range 35 {
		h.fake.Advance(100 * time.Millisecond)
	}
	// rec's first run stands for the occurrences of 1 s, 2 s and 3 s: due at 3 s, so it
	// came due no sooner than 3 s (at 3.5 s, when its hold ended), not at 1 s.
	want := map[string]time.Time{"once": now, "rec": now.Add(3 * time.Second)}
	for range want {
		select {
		case r := <-dues:
			if w, ok := want[r.Task.ID]; !ok || !r.Due.Equal(w) {
				t.Fatalf("run of %s due %v; want %v", r.Task.ID, r.Due, w)
			}
			delete(want, r.Task.ID)
		case <-time.After(eventWait):
			t.Fatalf("%v never ran", want)
		}
	}
	if got := h.state("cancelled"); got != Cancelled {
		t.Fatalf("the cancelled held task is %v", got)
	}
}
