package task

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// runOnce submits a one-shot task due now, fires it and waits for its outcome event.
func (h *harness) runOnce(t Task, outcome EventKind) {
	h.t.Helper()
	t.Schedule = After(0)
	h.submit(t)
	h.fake.Advance(0)
	h.wait(outcome, t.ID)
}

// TestReusedRecordsCarryNothingOver runs tasks one after another with records dropped
// as they finish (Retention < 0), so that later tasks reuse earlier ones' records, and
// alternates tasks that leave state behind (a timeout, a failed attempt, a retry, a
// long ID) with plain ones: each handler must see its own task and a fresh attempt, and
// Get must show no trace of a record's previous task. Records must actually be reused.
func TestReusedRecordsCarryNothingOver(t *testing.T) {
	h := newHarness(t, WithRetention(-1), WithWorkers(1))
	type seen struct {
		id       string
		attempt  int
		err      error
		deadline bool
		timeout  time.Duration
	}
	runs := make(chan seen, 4)
	owner := make(map[*Run]string) // a Run's first task: only the pointers are compared
	reused := 0
	h.e.Register("t", func(ctx context.Context, r *Run) error {
		_, hasDeadline := ctx.Deadline()
		runs <- seen{r.Task.ID, r.Attempt, ctx.Err(), hasDeadline, r.Task.Timeout}
		if _, ok := owner[r]; ok && r.Attempt == 1 {
			reused++
		} else if !ok {
			owner[r] = r.Task.ID
		}
		if r.Task.Retry.MaxAttempts > 1 && r.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	for i := 0; i < 200; i++ {
		task := Task{ID: fmt.Sprint("plain-", i), Type: "t"}
		if i%2 == 1 {
			task.ID = fmt.Sprintf("eventful-%d-%0200d", i, 0)
			task.Timeout = time.Hour
			task.Retry = RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second}
			task.Payload = []byte("payload")
		}
		task.Schedule = After(time.Second)
		h.submit(task)
		in, err := h.e.Get("", task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if in.Attempts != 0 || in.Runs != 0 || in.LastError != "" || len(in.History) != 0 || in.State != Pending {
			t.Fatalf("%s: a fresh task shows %+v", task.ID, in)
		}
		h.fake.Advance(time.Second)
		attempts := 1
		if task.Retry.MaxAttempts > 1 {
			h.wait(EventRetrying, task.ID)
			h.fake.Advance(time.Second)
			attempts = 2
		}
		h.wait(EventSucceeded, task.ID)
		for a := 1; a <= attempts; a++ {
			if got, want := <-runs, (seen{task.ID, a, nil, task.Timeout > 0, task.Timeout}); got != want {
				t.Fatalf("attempt %d of %s saw %+v, want %+v", a, task.ID, got, want)
			}
		}
	}
	if reused == 0 {
		t.Fatal("200 tasks run one after another never reused a record")
	}
}

// TestRecordsOfHandlersStillRunningAreNotReused ends attempts while their handlers still
// run (a timeout followed by a successful retry, a Cancel, a Drop, a replacing Submit),
// with records dropped as they finish, then runs other tasks; the abandoned handlers then
// read their ctx and Run. Each must still see its own task (under -race, a reused record
// would also be reported as a race), and no later task may be given the same Run.
func TestRecordsOfHandlersStillRunningAreNotReused(t *testing.T) {
	for _, end := range []string{"timeout", "cancel", "drop", "replace"} {
		t.Run("end="+end, func(t *testing.T) {
			h := newHarness(t, WithRetention(-1))
			release := make(chan struct{})
			unblock := sync.OnceFunc(func() { close(release) })
			t.Cleanup(unblock) // before the harness closes the engine, if the test fails
			type late struct {
				id  string
				err error
			}
			lateSeen := make(chan late, 1)
			var abandoned *Run
			started := make(chan *Run, 1)
			h.e.Register("hang", func(ctx context.Context, r *Run) error {
				if r.Attempt > 1 {
					return nil // the retry after a timeout
				}
				started <- r
				<-release // ignores ctx until released
				lateSeen <- late{r.Task.ID, ctx.Err()}
				return nil
			})
			others := make(chan *Run, 64)
			h.e.Register("quick", func(ctx context.Context, r *Run) error { others <- r; return nil })
			hung := Task{ID: "hung", Type: "hang", Schedule: After(0)}
			if end == "timeout" {
				hung.Timeout = time.Second
				hung.Retry = RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second}
			}
			h.submit(hung)
			h.fake.Advance(0)
			abandoned = <-started
			switch end {
			case "timeout":
				h.fake.Advance(time.Second)
				h.wait(EventRetrying, "hung")
				h.fake.Advance(time.Second)
				h.wait(EventSucceeded, "hung") // the record is dropped
			case "cancel":
				if err := h.e.Cancel("", "hung"); err != nil {
					t.Fatal(err)
				}
			case "drop":
				if err := h.e.Drop("", "hung"); err != nil {
					t.Fatal(err)
				}
			case "replace":
				h.submit(Task{ID: "hung", Type: "quick", Schedule: After(time.Hour), Version: 1})
				if err := h.e.Drop("", "hung"); err != nil { // the replacement, not the record in use
					t.Fatal(err)
				}
			}
			for i := 0; i < 50; i++ {
				h.runOnce(Task{ID: fmt.Sprint("other-", i), Type: "quick"}, EventSucceeded)
				if r := <-others; r == abandoned {
					t.Fatalf("other-%d was given the Run of a handler still running", i)
				}
			}
			unblock()
			got := <-lateSeen
			want := late{"hung", context.Canceled}
			if end == "timeout" {
				want.err = context.DeadlineExceeded
			}
			if got != want {
				t.Fatalf("the abandoned handler saw %+v after other tasks ran, want %+v", got, want)
			}
		})
	}
}

// TestRecordWhoseContextWasWatchedIsNotReused: a handler that asks for ctx.Done() may
// leave goroutines of derived contexts watching it after it returns, so its record is
// never reused (the context package starts such a goroutine for context.WithCancel of a
// context it does not know).
func TestRecordWhoseContextWasWatchedIsNotReused(t *testing.T) {
	h := newHarness(t, WithRetention(-1), WithWorkers(1))
	watched := make(chan *Run, 1)
	h.e.Register("watch", func(ctx context.Context, r *Run) error {
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		select {
		case <-child.Done():
			return child.Err()
		default:
		}
		watched <- r
		return nil
	})
	plain := make(chan *Run, 1)
	h.e.Register("plain", func(ctx context.Context, r *Run) error { plain <- r; return nil })
	h.runOnce(Task{ID: "watched", Type: "watch"}, EventSucceeded)
	w := <-watched
	for i := 0; i < 100; i++ {
		h.runOnce(Task{ID: fmt.Sprint("p", i), Type: "plain"}, EventSucceeded)
		if <-plain == w {
			t.Fatalf("task p%d reused the record of a task whose context was watched", i)
		}
	}
}

// TestStaleQueuedRunFreesItsRecord cancels a task whose run is queued behind a busy
// worker (Retention < 0 removes it at once, while the queued item still names it): the
// run must never start, and tasks pending together after it, which may reuse its record
// once the worker has discarded the item (exactly once: two of them sharing it would
// corrupt the table), each run once.
func TestStaleQueuedRunFreesItsRecord(t *testing.T) {
	h := newHarness(t, WithRetention(-1), WithWorkers(1))
	unblock := h.blocking()
	ran := make(chan string, 64)
	h.e.Register("t", func(ctx context.Context, r *Run) error { ran <- r.Task.ID; return nil })
	h.submit(Task{ID: "blocker", Type: "block", Schedule: After(0)})
	h.wait(EventStarted, "blocker")
	h.submit(Task{ID: "queued", Type: "t", Schedule: After(0)})
	if s := h.state("queued"); s != Due { // its item waits for the only worker
		t.Fatalf("queued task %v, want DUE", s)
	}
	if err := h.e.Cancel("", "queued"); err != nil {
		t.Fatal(err)
	}
	unblock()
	h.wait(EventSucceeded, "blocker")
	want := make(map[string]bool)
	for i := 0; i < 20; i++ {
		id := fmt.Sprint("after-", i)
		want[id] = true
		h.submit(Task{ID: id, Type: "t", Schedule: After(time.Second)})
	}
	if err := h.e.verify(); err != nil {
		t.Fatal(err)
	}
	h.fake.Advance(time.Second)
	for len(want) > 0 {
		select {
		case id := <-ran:
			if !want[id] {
				t.Fatalf("ran %q: not one of the tasks pending (or twice)", id)
			}
			delete(want, id)
		case <-time.After(eventWait):
			t.Fatalf("%d tasks never ran", len(want))
		}
	}
}

// TestPhaseMoves: setPhase applies exactly the moves of phaseMoves and panics on any
// other (self-loops and values that are not phases included); every phase leads back to
// idle, and only an idle record that nothing kept is recyclable.
func TestPhaseMoves(t *testing.T) {
	try := func(from, to phase) (panicked bool) {
		defer func() { panicked = recover() != nil }()
		rec := &record{phase: from}
		rec.setPhase(to)
		if rec.phase != to {
			t.Errorf("%s -> %s applied as %s", from, to, rec.phase)
		}
		return false
	}
	for from := range numPhases + 1 {
		for to := range numPhases + 1 {
			legal := from < numPhases && to < numPhases && phaseMoves[from][to]
			if panicked := try(from, to); panicked == legal {
				t.Errorf("%s -> %s: panicked %v, legal %v", from, to, panicked, legal)
			}
		}
	}
	for p := range numPhases {
		reach := map[phase]bool{p: true}
		for q := []phase{p}; len(q) > 0; q = q[1:] {
			for to := range numPhases {
				if phaseMoves[q[0]][to] && !reach[to] {
					reach[to] = true
					q = append(q, to)
				}
			}
		}
		if !reach[phaseIdle] {
			t.Errorf("%s never gets back to idle", p)
		}
		for _, kept := range []bool{false, true} {
			rec := &record{phase: p, kept: kept}
			if got, want := rec.recyclable(), p == phaseIdle && !kept; got != want {
				t.Errorf("phase %s kept %v: recyclable %v", p, kept, got)
			}
		}
	}
	if s := phase(9).String(); s != "phase(9)" {
		t.Errorf("phase(9).String() = %q", s)
	}
}
