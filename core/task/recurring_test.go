package task

import (
	"context"
	"errors"
	"testing"
	"time"
)

// settled waits until task id is waiting for the clock: PENDING or FAILED with its next
// run in the future (nothing more happens until the test moves the clock). It waits on
// events, which every step of a catch-up emits (Misfired, Started, an outcome).
func (h *harness) settled(id string) Info {
	h.t.Helper()
	deadline := time.After(eventWait)
	for {
		in, err := h.e.Get("", id)
		if err != nil {
			h.t.Fatal(err)
		}
		if (in.State == Pending || in.State == Failed) && in.NextRun.After(h.fake.Time(h.fake.Now())) {
			return in
		}
		select {
		case ev := <-h.events:
			h.backlog = append(h.backlog, ev)
		case <-deadline:
			h.t.Fatalf("task %q not waiting for a future run within %v: %+v", id, eventWait, in)
		}
	}
}

// missedSoFar sums the Missed of the Misfired events of id received so far (without
// waiting for more), and consumes them.
func (h *harness) missedSoFar(id string) int {
	for {
		select {
		case ev := <-h.events:
			h.backlog = append(h.backlog, ev)
			continue
		default:
		}
		break
	}
	n := 0
	kept := h.backlog[:0]
	for _, ev := range h.backlog {
		if ev.Kind == EventMisfired && ev.ID == id {
			n += ev.Missed
			continue
		}
		kept = append(kept, ev)
	}
	h.backlog = kept
	return n
}

// nextAttempt returns the next attempt a handler reports on seen, or false once the
// task is waiting for the clock with none reported (none will come until it moves).
func (h *harness) nextAttempt(seen chan attemptSeen, id string) (attemptSeen, bool) {
	h.t.Helper()
	deadline := time.After(eventWait)
	for {
		select {
		case a := <-seen:
			return a, true
		default:
		}
		if in, err := h.e.Get("", id); err == nil && (in.State == Pending || in.State == Failed) && in.NextRun.After(h.fake.Time(h.fake.Now())) {
			select {
			case a := <-seen: // reported just before the check
				return a, true
			default:
				return attemptSeen{}, false
			}
		}
		select {
		case a := <-seen:
			return a, true
		case ev := <-h.events:
			h.backlog = append(h.backlog, ev)
		case <-deadline:
			h.t.Fatalf("task %q: no attempt and not waiting for the clock within %v", id, eventWait)
		}
	}
}

// attemptSeen is what a handler saw of one attempt.
type attemptSeen struct {
	at, due time.Time
	attempt int
}

// TestRetriesKeepTheSchedule: a retry belongs to its occurrence and does not move the
// schedule. Occurrence n of Every(d) stays due at submission + n*d however its retries
// went (with jitter too), a cron schedule keeps its occurrences, and occurrences that
// came due while a retry was backing off are misfires, handled by the task's Misfire
// policy and counted (Stats.Misfired, EventMisfired).
func TestRetriesKeepTheSchedule(t *testing.T) {
	const m, s = time.Minute, time.Second
	type step struct {
		at, due time.Duration // from epoch: when the attempt starts, and its Run.Due
		attempt int
		fail    bool
		jitter  bool // a retry at a random time: at and due are read from Info.NextRun
	}
	backoff := func(d time.Duration, attempts int) RetryPolicy {
		return RetryPolicy{MaxAttempts: attempts, InitialBackoff: d, Multiplier: 1}
	}
	tests := []struct {
		name    string
		sched   Schedule
		misfire MisfirePolicy
		retry   RetryPolicy
		steps   []step
		missed  int           // occurrences counted as misfired
		next    time.Duration // the next run once the steps are done
	}{
		{
			name: "every 1m, one retry 10s later", sched: Every(m), retry: backoff(10*s, 3),
			steps: []step{{m, m, 1, true, false}, {m + 10*s, m + 10*s, 2, false, false}, {2 * m, 2 * m, 1, false, false}, {3 * m, 3 * m, 1, false, false}},
			next:  4 * m,
		},
		{
			name: "every 1m, retries with jitter", sched: Every(m), retry: RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * s, Multiplier: 1, Jitter: 0.5},
			steps: []step{{m, m, 1, true, false}, {0, 0, 2, true, true}, {0, 0, 3, false, true}, {2 * m, 2 * m, 1, false, false}},
			next:  3 * m,
		},
		{
			name: "every 1m, an occurrence dead after its retries", sched: Every(m), retry: backoff(10*s, 2),
			steps: []step{{m, m, 1, true, false}, {m + 10*s, m + 10*s, 2, true, false}, {2 * m, 2 * m, 1, false, false}},
			next:  3 * m,
		},
		{
			name: "fixed delay counts from the retry's end", sched: EveryAfterDone(m), retry: backoff(10*s, 3),
			steps: []step{{m, m, 1, true, false}, {m + 10*s, m + 10*s, 2, false, false}, {2*m + 10*s, 2*m + 10*s, 1, false, false}},
			next:  3*m + 10*s,
		},
		{
			// The occurrence due at 2m passed during the backoff: fire-once runs it late,
			// at once; nothing is missed.
			name: "every 1m, backoff past one occurrence, fire once", sched: Every(m), retry: backoff(90*s, 3),
			steps: []step{{m, m, 1, true, false}, {2*m + 30*s, 2*m + 30*s, 2, false, false}, {2*m + 30*s, 2 * m, 1, false, false}},
			next:  3 * m,
		},
		{
			name: "every 1m, backoff past one occurrence, skip", sched: Every(m), misfire: MisfireSkip, retry: backoff(90*s, 3),
			steps:  []step{{m, m, 1, true, false}, {2*m + 30*s, 2*m + 30*s, 2, false, false}, {3 * m, 3 * m, 1, false, false}},
			missed: 1, next: 4 * m,
		},
		{
			// 2m and 3m passed: one run, due as the latest of them, stands for both.
			name: "every 1m, backoff past two occurrences, fire once", sched: Every(m), retry: backoff(150*s, 3),
			steps:  []step{{m, m, 1, true, false}, {3*m + 30*s, 3*m + 30*s, 2, false, false}, {3*m + 30*s, 3 * m, 1, false, false}},
			missed: 1, next: 4 * m,
		},
		{
			name: "every 1m, backoff past two occurrences, skip", sched: Every(m), misfire: MisfireSkip, retry: backoff(150*s, 3),
			steps:  []step{{m, m, 1, true, false}, {3*m + 30*s, 3*m + 30*s, 2, false, false}},
			missed: 2, next: 4 * m,
		},
		{
			name: "every 1m, dead during a long backoff, skip", sched: Every(m), misfire: MisfireSkip, retry: backoff(150*s, 2),
			steps:  []step{{m, m, 1, true, false}, {3*m + 30*s, 3*m + 30*s, 2, true, false}},
			missed: 2, next: 4 * m,
		},
		{
			name: "cron every minute, one retry 10s later", sched: Cron("* * * * *", nil), retry: backoff(10*s, 3),
			steps: []step{{m, m, 1, true, false}, {m + 10*s, m + 10*s, 2, false, false}, {2 * m, 2 * m, 1, false, false}},
			next:  3 * m,
		},
		{
			name: "cron every minute, backoff past one occurrence, skip", sched: Cron("* * * * *", nil), misfire: MisfireSkip, retry: backoff(90*s, 3),
			steps:  []step{{m, m, 1, true, false}, {2*m + 30*s, 2*m + 30*s, 2, false, false}, {3 * m, 3 * m, 1, false, false}},
			missed: 1, next: 4 * m,
		},
		{
			name: "cron every minute, backoff past two occurrences, fire once", sched: Cron("* * * * *", nil), retry: backoff(150*s, 3),
			steps:  []step{{m, m, 1, true, false}, {3*m + 30*s, 3*m + 30*s, 2, false, false}, {3*m + 30*s, 3 * m, 1, false, false}},
			missed: 1, next: 4 * m,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			seen := make(chan attemptSeen, 64)
			fail := make(chan bool, 64)
			h.e.Register("r", func(ctx context.Context, r *Run) error {
				seen <- attemptSeen{at: h.fake.Time(h.fake.Now()), due: r.Due, attempt: r.Attempt}
				select {
				case f := <-fail:
					if f {
						return errors.New("flaky")
					}
					return nil
				case <-ctx.Done(): // the engine closes (a failed test)
					return ctx.Err()
				}
			})
			h.submit(Task{ID: "r", Type: "r", Schedule: tc.sched, Misfire: tc.misfire, Retry: tc.retry})
			now := time.Duration(0)
			for i, st := range tc.steps {
				if st.at > now || st.jitter {
					in := h.settled("r")
					want := epoch.Add(st.at)
					if st.jitter {
						// A retry 10s +/- 50% after the failed attempt.
						lo, hi := epoch.Add(now+5*s), epoch.Add(now+15*s)
						if in.State != Failed || in.NextRun.Before(lo) || in.NextRun.After(hi) {
							t.Fatalf("before step %d: %v, next run %v; want FAILED, a retry in [%v, %v]", i+1, in.State, in.NextRun.Sub(epoch), lo.Sub(epoch), hi.Sub(epoch))
						}
						// The clock goes to the first tick (1 ms) at or after it, where it fires.
						st.due = in.NextRun.Sub(epoch)
						st.at = (st.due + time.Millisecond - 1).Truncate(time.Millisecond)
						want = in.NextRun
					}
					if !in.NextRun.Equal(want) {
						t.Fatalf("before step %d: next run at +%v, want +%v", i+1, in.NextRun.Sub(epoch), st.at)
					}
					h.fake.Set(epoch.Add(st.at).UnixNano())
					now = st.at
				}
				fail <- st.fail
				got, ok := h.nextAttempt(seen, "r")
				if !ok {
					in, _ := h.e.Get("", "r")
					t.Fatalf("step %d: no attempt at +%v; the task is %v, next run at +%v", i+1, st.at, in.State, in.NextRun.Sub(epoch))
				}
				if !got.at.Equal(epoch.Add(st.at)) || !got.due.Equal(epoch.Add(st.due)) || got.attempt != st.attempt {
					t.Fatalf("step %d: attempt %d at +%v due +%v; want attempt %d at +%v due +%v",
						i+1, got.attempt, got.at.Sub(epoch), got.due.Sub(epoch), st.attempt, st.at, st.due)
				}
				switch {
				case !st.fail:
					h.wait(EventSucceeded, "r")
				case i+1 < len(tc.steps) && tc.steps[i+1].attempt > 1:
					h.wait(EventRetrying, "r")
				default:
					h.wait(EventDead, "r")
				}
			}
			in := h.settled("r")
			if !in.NextRun.Equal(epoch.Add(tc.next)) || in.State != Pending {
				t.Errorf("after the steps: %v, next run at +%v; want PENDING, +%v", in.State, in.NextRun.Sub(epoch), tc.next)
			}
			// Counted under the lock before the task was armed again (so final once it
			// is settled); the event is emitted after the lock is released.
			if st := h.e.Stats(); st.Misfired != uint64(tc.missed) {
				t.Fatalf("Stats.Misfired %d, want %d", st.Misfired, tc.missed)
			}
			missed := 0
			for missed < tc.missed {
				missed += h.wait(EventMisfired, "r").Missed
			}
			if missed += h.missedSoFar("r"); missed != tc.missed {
				t.Errorf("Misfired events count %d occurrences, want %d", missed, tc.missed)
			}
		})
	}
}

// scripted drives a recurring task of type "r" attempt by attempt on the fake clock:
// each attempt reports what it saw and returns the outcome the test hands it.
type scripted struct {
	h       *harness
	seen    chan attemptSeen
	outcome chan error
	now     time.Duration // the fake clock, from epoch
}

func newScripted(h *harness) *scripted {
	s := &scripted{h: h, seen: make(chan attemptSeen, 64), outcome: make(chan error)}
	h.e.Register("r", func(ctx context.Context, r *Run) error {
		s.seen <- attemptSeen{at: h.fake.Time(h.fake.Now()), due: r.Due, attempt: r.Attempt}
		select {
		case err := <-s.outcome:
			return err
		case <-ctx.Done(): // the engine closes (a failed test)
			return ctx.Err()
		}
	})
	return s
}

// set moves the clock to epoch+at.
func (s *scripted) set(at time.Duration) {
	s.h.fake.Set(epoch.Add(at).UnixNano())
	s.now = max(s.now, at)
}

// begin waits for the next attempt of task "r", moving the clock to at first if that is
// later (where the task must be waiting for exactly that time), and checks it.
func (s *scripted) begin(at, due time.Duration, attempt int) {
	h := s.h
	h.t.Helper()
	if at > s.now {
		if in := h.settled("r"); !in.NextRun.Equal(epoch.Add(at)) {
			h.t.Fatalf("waiting for the attempt at +%v: the task is %v, next run at +%v", at, in.State, in.NextRun.Sub(epoch))
		}
		s.set(at)
	}
	got, ok := h.nextAttempt(s.seen, "r")
	if !ok {
		in, _ := h.e.Get("", "r")
		h.t.Fatalf("no attempt at +%v: the task is %v, next run at +%v", at, in.State, in.NextRun.Sub(epoch))
	}
	if !got.at.Equal(epoch.Add(at)) || !got.due.Equal(epoch.Add(due)) || got.attempt != attempt {
		h.t.Fatalf("attempt %d at +%v due +%v; want attempt %d at +%v due +%v",
			got.attempt, got.at.Sub(epoch), got.due.Sub(epoch), attempt, at, due)
	}
}

// end returns err from the attempt begun and waits for the event it causes.
func (s *scripted) end(err error, kind EventKind) {
	s.h.t.Helper()
	s.outcome <- err
	s.h.wait(kind, "r")
}

func (s *scripted) attempt(at, due time.Duration, attempt int, err error, kind EventKind) {
	s.h.t.Helper()
	s.begin(at, due, attempt)
	s.end(err, kind)
}

// TestRequeueRecurringDeadOccurrence: a recurring task's dead letter is one occurrence.
// Requeue runs that occurrence once, now or as soon as the occurrence in progress ends,
// and leaves the schedule as it is; a task whose record is gone (or cancelled) comes
// back with its schedule, not as a one-shot. A different task holding the ID (a higher
// version) is still ErrExists.
func TestRequeueRecurringDeadOccurrence(t *testing.T) {
	const m, s = time.Minute, time.Second
	boom := errors.New("boom")
	flaky := RetryPolicy{MaxAttempts: 2, InitialBackoff: 10 * s, Multiplier: 1}
	requeue := func(h *harness) Info {
		h.t.Helper()
		in, err := h.e.Requeue("", "r")
		if err != nil {
			h.t.Fatalf("Requeue: %v", err)
		}
		if n := h.e.Stats().DeadLetters; n != 0 {
			h.t.Fatalf("%d dead letters after Requeue", n)
		}
		return in
	}
	// submitted submits tk as task "r" of type "r", every minute, to a new scripted
	// engine.
	submitted := func(t *testing.T, tk Task, opts ...Option) (*harness, *scripted) {
		h := newHarness(t, opts...)
		sc := newScripted(h)
		tk.ID, tk.Type, tk.Schedule = "r", "r", Every(m)
		h.submit(tk)
		return h, sc
	}
	t.Run("pending", func(t *testing.T) {
		h, sc := submitted(t, Task{})
		sc.attempt(m, m, 1, boom, EventDead)
		sc.set(m + 30*s)
		if in := requeue(h); in.State != Pending || !in.NextRun.Equal(epoch.Add(m+30*s)) {
			t.Fatalf("Requeue: %v, next run at +%v; want PENDING, now", in.State, in.NextRun.Sub(epoch))
		}
		sc.attempt(m+30*s, m+30*s, 1, nil, EventSucceeded) // the dead occurrence, once
		sc.attempt(2*m, 2*m, 1, nil, EventSucceeded)       // the schedule as it was
		sc.attempt(3*m, 3*m, 1, nil, EventSucceeded)
	})
	t.Run("pending, the requeued run outlasts the next occurrence", func(t *testing.T) {
		h, sc := submitted(t, Task{Misfire: MisfireSkip})
		sc.attempt(m, m, 1, boom, EventDead)
		sc.set(m + 30*s)
		requeue(h)
		sc.begin(m+30*s, m+30*s, 1)
		sc.set(2*m + 30*s)
		sc.end(nil, EventSucceeded)
		// The occurrence due at 2m passed while the requeued one ran: a misfire, skipped.
		if ev := h.wait(EventMisfired, "r"); ev.Missed != 1 {
			t.Fatalf("missed %d, want 1", ev.Missed)
		}
		sc.attempt(3*m, 3*m, 1, nil, EventSucceeded)
	})
	t.Run("running", func(t *testing.T) {
		h, sc := submitted(t, Task{})
		sc.attempt(m, m, 1, boom, EventDead)
		sc.begin(2*m, 2*m, 1)
		if in := requeue(h); in.State != Running {
			t.Fatalf("Requeue: %v, want RUNNING (the occurrence in progress goes on)", in.State)
		}
		sc.end(nil, EventSucceeded)
		sc.attempt(2*m, 2*m, 1, nil, EventSucceeded) // the dead occurrence, right after
		sc.attempt(3*m, 3*m, 1, nil, EventSucceeded)
	})
	t.Run("backing off", func(t *testing.T) {
		h, sc := submitted(t, Task{Retry: flaky})
		sc.attempt(m, m, 1, boom, EventRetrying)
		sc.attempt(m+10*s, m+10*s, 2, boom, EventDead)
		sc.attempt(2*m, 2*m, 1, boom, EventRetrying)
		if in := requeue(h); in.State != Failed {
			t.Fatalf("Requeue: %v, want FAILED (the retry goes on)", in.State)
		}
		sc.attempt(2*m+10*s, 2*m+10*s, 2, nil, EventSucceeded)
		sc.attempt(2*m+10*s, 2*m+10*s, 1, nil, EventSucceeded) // the dead occurrence
		sc.attempt(3*m, 3*m, 1, nil, EventSucceeded)
	})
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"record gone", []Option{WithRetention(-1)}}, {"cancelled", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			h, sc := submitted(t, Task{Version: 4}, tc.opts...)
			sc.attempt(m, m, 1, boom, EventDead)
			if err := h.e.Cancel("", "r"); err != nil {
				t.Fatal(err)
			}
			sc.set(m + 30*s)
			in := requeue(h)
			if in.Task.Schedule != Every(m) || in.Task.Version != 5 || !in.NextRun.Equal(epoch.Add(m+30*s)) {
				t.Fatalf("Requeue: schedule %+v, version %d, next run at +%v; want Every(1m) again, version 5, now",
					in.Task.Schedule, in.Task.Version, in.NextRun.Sub(epoch))
			}
			sc.attempt(m+30*s, m+30*s, 1, nil, EventSucceeded) // the dead occurrence
			// The schedule starts again from the requeue: its old phase went with the record.
			sc.attempt(2*m+30*s, 2*m+30*s, 1, nil, EventSucceeded)
		})
	}
	t.Run("a different task holds the ID", func(t *testing.T) {
		h, sc := submitted(t, Task{})
		sc.attempt(m, m, 1, boom, EventDead)
		h.submit(Task{ID: "r", Type: "r", Schedule: Every(m), Version: 1})
		if _, err := h.e.Requeue("", "r"); !errors.Is(err, ErrExists) {
			t.Fatalf("Requeue with version 1 holding the ID of a version 0 dead letter: %v, want ErrExists", err)
		}
	})
}

// TestCronDSTOnTheFakeClock runs the daylight-saving cases of TestCronDST through the
// engine: a cron task in each zone, submitted before the change, the fake clock moved to
// each next run in turn. Every run must come at its due time, and the due times must be
// the documented ones.
func TestCronDSTOnTheFakeClock(t *testing.T) {
	for _, tc := range dstCases {
		t.Run(tc.zone+"/"+tc.name, func(t *testing.T) {
			loc, from, to := tc.bounds(t)
			h := newHarnessAt(t, from)
			type run struct{ at, due time.Time }
			runs := make(chan run, 64)
			h.e.Register("c", func(ctx context.Context, r *Run) error {
				runs <- run{h.fake.Time(h.fake.Now()), r.Due}
				return nil
			})
			h.submit(Task{ID: "c", Type: "c", Schedule: Cron(tc.expr, loc)})
			var dues []time.Time
			for range 100 {
				in := h.settled("c")
				if in.NextRun.After(to) {
					break
				}
				h.fake.Set(in.NextRun.UnixNano())
				h.wait(EventSucceeded, "c")
				r := <-runs
				if !r.at.Equal(r.due) || !r.due.Equal(in.NextRun) {
					t.Fatalf("run at %v, due %v; want both %v", r.at, r.due, in.NextRun)
				}
				dues = append(dues, r.due)
			}
			if got := utcSeconds(dues); got != tc.want {
				t.Errorf("%q:\n got  %s\n want %s", tc.expr, got, tc.want)
			}
			if st := h.e.Stats(); st.Misfired != 0 || st.Succeeded != uint64(len(dues)) {
				t.Errorf("stats: misfired %d, succeeded %d; want 0, %d", st.Misfired, st.Succeeded, len(dues))
			}
		})
	}
}
