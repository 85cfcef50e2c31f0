package task

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/tock-sched/tock/core/clock"
	"github.com/tock-sched/tock/core/internal/waitfor"
)

// ants starts a package-level default pool at init; IgnoreCurrent leaves it alone.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// eventWait bounds waits for events that must come: core's one bound.
const eventWait = waitfor.Limit

// epoch is where the fake clocks start: a plain UTC day.
var epoch = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	t       *testing.T
	e       *Engine
	fake    *clock.Fake
	events  chan Event
	backlog []Event // events read while waiting for another one
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	return newHarnessAt(t, epoch, opts...)
}

// newHarnessAt is newHarness with the fake clock starting at start.
func newHarnessAt(t *testing.T, start time.Time, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, fake: clock.NewFake(start.UnixNano()), events: make(chan Event, 1<<16)}
	opts = append([]Option{WithClock(h.fake), WithOnEvent(func(ev Event) { h.events <- ev })}, opts...)
	e, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	t.Cleanup(func() { verifyAndClose(t, e) })
	return h
}

// verifyAndClose checks e's tables (verify) and closes it: every test engine's cleanup.
func verifyAndClose(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.verify(); err != nil {
		t.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	e.Close(ctx)
}

// wait returns the first event of kind for task id not returned before; events of other
// kinds or tasks are kept for later waits.
func (h *harness) wait(kind EventKind, id string) Event {
	h.t.Helper()
	for i, ev := range h.backlog {
		if ev.Kind == kind && ev.ID == id {
			h.backlog = append(h.backlog[:i], h.backlog[i+1:]...)
			return ev
		}
	}
	deadline := time.After(eventWait)
	for {
		select {
		case ev := <-h.events:
			if ev.Kind == kind && ev.ID == id {
				return ev
			}
			h.backlog = append(h.backlog, ev)
		case <-deadline:
			h.t.Fatalf("no %v event for %q within %v", kind, id, eventWait)
			return Event{}
		}
	}
}

// blocking registers the handler of type "block", whose runs wait until unblock is called
// (at the latest by the test's cleanup, before the engine is closed).
func (h *harness) blocking() (unblock func()) {
	release := make(chan struct{})
	unblock = sync.OnceFunc(func() { close(release) })
	h.t.Cleanup(unblock)
	h.e.Register("block", func(ctx context.Context, r *Run) error { <-release; return nil })
	return unblock
}

func (h *harness) submit(t Task) Info {
	h.t.Helper()
	in, err := h.e.Submit(t)
	if err != nil {
		h.t.Fatalf("submit %q: %v", t.ID, err)
	}
	return in
}

func (h *harness) state(id string) State {
	h.t.Helper()
	in, err := h.e.Get("", id)
	if err != nil {
		h.t.Fatal(err)
	}
	return in.State
}

func TestOneShotRunsOnceAtItsTime(t *testing.T) {
	h := newHarness(t)
	var runs atomic.Int32
	var sawDue time.Time
	h.e.Register("email", func(ctx context.Context, r *Run) error {
		runs.Add(1)
		sawDue = r.Due
		if string(r.Task.Payload) != "hello" || r.Attempt != 1 {
			return fmt.Errorf("run %+v", r)
		}
		return nil
	})
	in := h.submit(Task{ID: "a", Type: "email", Payload: []byte("hello"), Schedule: After(10 * time.Second)})
	if in.State != Pending || !in.NextRun.Equal(epoch.Add(10*time.Second)) {
		t.Fatalf("after submit: %+v", in)
	}
	h.fake.Advance(10 * time.Second)
	h.wait(EventSucceeded, "a")
	if runs.Load() != 1 || !sawDue.Equal(epoch.Add(10*time.Second)) {
		t.Fatalf("runs %d, due %v", runs.Load(), sawDue)
	}
	if s := h.state("a"); s != Succeeded {
		t.Fatalf("state %v", s)
	}
	st := h.e.Stats()
	if st.Submitted != 1 || st.Started != 1 || st.Succeeded != 1 || st.Lateness.Count != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRetriesBackOffThenDeadLetterAndRequeue(t *testing.T) {
	h := newHarness(t)
	var fail atomic.Bool
	fail.Store(true)
	var attempts []time.Time
	h.e.Register("flaky", func(ctx context.Context, r *Run) error {
		attempts = append(attempts, h.fake.Time(h.fake.Now()))
		if fail.Load() {
			return errors.New("upstream down")
		}
		return nil
	})
	h.submit(Task{ID: "j", Type: "flaky", Schedule: After(0),
		Retry: RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, Multiplier: 2}})
	h.fake.Advance(0)
	h.wait(EventRetrying, "j")
	if s := h.state("j"); s != Failed {
		t.Fatalf("after attempt 1: %v", s)
	}
	h.fake.Advance(time.Second)
	h.wait(EventRetrying, "j")
	h.fake.Advance(2 * time.Second)
	dead := h.wait(EventDead, "j")
	if !strings.Contains(dead.Err.Error(), "upstream down") {
		t.Fatalf("dead event error %v", dead.Err)
	}
	want := []time.Time{epoch, epoch.Add(time.Second), epoch.Add(3 * time.Second)}
	if len(attempts) != 3 {
		t.Fatalf("%d attempts, want 3", len(attempts))
	}
	for i := range want {
		if !attempts[i].Equal(want[i]) {
			t.Fatalf("attempt %d at %v, want %v (1 s then 2 s backoff, no jitter)", i+1, attempts[i], want[i])
		}
	}
	in, _ := h.e.Get("", "j")
	if in.State != Dead || in.Attempts != 3 || len(in.History) != 3 || in.LastError != "upstream down" {
		t.Fatalf("info %+v", in)
	}
	page, _, err := h.e.DeadLetters("", 10)
	if err != nil || len(page) != 1 || page[0].Task.ID != "j" || len(page[0].Attempts) != 3 {
		t.Fatalf("dead letters %+v, %v", page, err)
	}
	fail.Store(false)
	if _, err := h.e.Requeue("", "j"); err != nil {
		t.Fatal(err)
	}
	h.fake.Advance(0)
	h.wait(EventSucceeded, "j")
	if s := h.state("j"); s != Succeeded {
		t.Fatalf("after requeue: %v", s)
	}
	if h.e.Stats().DeadLetters != 0 {
		t.Fatal("requeued task still in the dead-letter queue")
	}
}

func TestNonRetryableErrorSkipsRetries(t *testing.T) {
	h := newHarness(t)
	h.e.Register("parse", func(ctx context.Context, r *Run) error {
		return NonRetryable(errors.New("malformed payload"))
	})
	h.submit(Task{ID: "p", Type: "parse", Schedule: After(0), Retry: RetryPolicy{MaxAttempts: 5}})
	h.fake.Advance(0)
	h.wait(EventDead, "p")
	if in, _ := h.e.Get("", "p"); in.Attempts != 1 {
		t.Fatalf("%d attempts for a non-retryable error", in.Attempts)
	}
}

func TestMissingHandlerIsRecordedOnTheTask(t *testing.T) {
	h := newHarness(t)
	h.submit(Task{ID: "m", Type: "nobody", Schedule: After(0), Retry: RetryPolicy{MaxAttempts: 3}})
	h.fake.Advance(0)
	h.wait(EventDead, "m")
	in, _ := h.e.Get("", "m")
	if in.State != Dead || !strings.Contains(in.LastError, "no handler") || in.Attempts != 1 {
		t.Fatalf("info %+v", in)
	}
}

// The fallback handler runs types with no handler of their own; a type's own wins.
func TestFallbackHandler(t *testing.T) {
	h := newHarness(t)
	ran := make(chan string, 2)
	h.e.RegisterFallback(func(ctx context.Context, r *Run) error { ran <- "fallback:" + r.Task.Type; return nil })
	h.e.Register("own", func(ctx context.Context, r *Run) error { ran <- "own"; return nil })
	h.submit(Task{ID: "a", Type: "anything", Schedule: After(0)})
	h.fake.Advance(0)
	h.wait(EventSucceeded, "a")
	h.submit(Task{ID: "b", Type: "own", Schedule: After(0)})
	h.fake.Advance(0)
	h.wait(EventSucceeded, "b")
	if got := []string{<-ran, <-ran}; got[0] != "fallback:anything" || got[1] != "own" {
		t.Fatalf("handlers ran %v", got)
	}
	h.e.RegisterFallback(nil)
	h.submit(Task{ID: "c", Type: "anything", Schedule: After(0)})
	h.fake.Advance(0)
	h.wait(EventDead, "c")
}

// TestHungHandlerIsTimedOutAndDoesNotStall runs one worker whose handler ignores its
// context and never returns on its own: the attempt is still reported timed out at its
// deadline, and a replacement worker runs the next task.
func TestHungHandlerIsTimedOutAndDoesNotStall(t *testing.T) {
	h := newHarness(t, WithWorkers(1))
	release := make(chan struct{})
	defer close(release)
	sawDeadline := make(chan bool, 1) // the handler may start after the test moved on
	h.e.Register("hang", func(ctx context.Context, r *Run) error {
		d, ok := ctx.Deadline()
		sawDeadline <- ok && d.Equal(epoch.Add(5*time.Second))
		<-release // ignores ctx
		return nil
	})
	h.e.Register("quick", func(ctx context.Context, r *Run) error { return nil })
	h.submit(Task{ID: "hang", Type: "hang", Schedule: After(0), Timeout: 5 * time.Second})
	h.fake.Advance(0)
	h.wait(EventStarted, "hang")
	h.submit(Task{ID: "next", Type: "quick", Schedule: After(time.Second)})
	h.fake.Advance(5 * time.Second)
	ev := h.wait(EventTimedOut, "hang")
	if !errors.Is(ev.Err, ErrTimeout) {
		t.Fatalf("timeout event error %v", ev.Err)
	}
	h.wait(EventDead, "hang")
	h.wait(EventSucceeded, "next") // ran although the only original worker is stuck
	select {
	case ok := <-sawDeadline:
		if !ok {
			t.Fatal("the handler's context did not carry the attempt's deadline")
		}
	case <-time.After(eventWait):
		t.Fatal("the hung handler never started")
	}
	st := h.e.Stats()
	if st.TimedOut != 1 || st.HungWorkers != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHandlerHonouringContextSeesItCancelledAtTimeout(t *testing.T) {
	h := newHarness(t)
	got := make(chan error, 1)
	h.e.Register("slow", func(ctx context.Context, r *Run) error {
		<-ctx.Done()
		got <- ctx.Err()
		return ctx.Err()
	})
	h.submit(Task{ID: "s", Type: "slow", Schedule: After(0), Timeout: time.Second})
	h.fake.Advance(0)
	h.wait(EventStarted, "s")
	h.fake.Advance(time.Second)
	select {
	case err := <-got:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ctx.Err() = %v", err)
		}
	case <-time.After(eventWait):
		t.Fatal("the handler's context was not cancelled at the timeout")
	}
	h.wait(EventDead, "s")
}

func TestPanicIsAFailedAttempt(t *testing.T) {
	h := newHarness(t)
	h.e.Register("boom", func(ctx context.Context, r *Run) error { panic("kaboom") })
	h.e.Register("fine", func(ctx context.Context, r *Run) error { return nil })
	h.submit(Task{ID: "b", Type: "boom", Schedule: After(0)})
	h.submit(Task{ID: "f", Type: "fine", Schedule: After(0)})
	h.fake.Advance(0)
	dead := h.wait(EventDead, "b")
	if !errors.Is(dead.Err, ErrPanic) || !strings.Contains(dead.Err.Error(), "kaboom") {
		t.Fatalf("dead event error %v", dead.Err)
	}
	h.wait(EventSucceeded, "f")
	if st := h.e.Stats(); st.Panics != 1 {
		t.Fatalf("panics %d", st.Panics)
	}
}

func TestExistsUnlessHigherVersionReplaces(t *testing.T) {
	h := newHarness(t, WithWorkers(1)) // one worker: runs happen in queue order
	var payloads []string
	h.e.Register("v", func(ctx context.Context, r *Run) error {
		payloads = append(payloads, string(r.Task.Payload))
		return nil
	})
	h.submit(Task{ID: "x", Type: "v", Payload: []byte("v1"), Schedule: After(time.Minute), Version: 1})
	if _, err := h.e.Submit(Task{ID: "x", Type: "v", Schedule: After(time.Second), Version: 1}); !errors.Is(err, ErrExists) {
		t.Fatalf("same version: %v", err)
	}
	h.submit(Task{ID: "x", Type: "v", Payload: []byte("v2"), Schedule: After(time.Second), Version: 2})
	h.fake.Advance(time.Minute) // past both the replacement's and the replaced task's time
	if ev := h.wait(EventSucceeded, "x"); ev.Version != 2 {
		t.Fatalf("succeeded event names version %d, want 2", ev.Version)
	}
	// A marker queued after everything that came due: once it has run, so has any stray
	// run of the replaced version.
	h.submit(Task{ID: "marker", Type: "v", Payload: []byte("marker"), Schedule: After(0)})
	h.fake.Advance(0)
	h.wait(EventSucceeded, "marker")
	if len(payloads) != 2 || payloads[0] != "v2" {
		t.Fatalf("runs %v, want only the replacement", payloads)
	}
}

func TestCancel(t *testing.T) {
	h := newHarness(t)
	h.e.Register("c", func(ctx context.Context, r *Run) error { return nil })
	h.submit(Task{ID: "p", Type: "c", Schedule: After(time.Minute)})
	if err := h.e.Cancel("", "p"); err != nil {
		t.Fatal(err)
	}
	if s := h.state("p"); s != Cancelled {
		t.Fatalf("state %v", s)
	}
	if err := h.e.Cancel("", "p"); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("second cancel: %v", err)
	}
	if err := h.e.Cancel("", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	h.submit(Task{ID: "q", Type: "c", Schedule: After(time.Second)})
	h.fake.Advance(time.Second)
	h.wait(EventSucceeded, "q")
	if _, err := h.e.Get("", "p"); err != nil { // retention: one minute by default
		t.Fatalf("cancelled task dropped before its retention: %v", err)
	}
}

func TestFixedRateIntervalRunsEachOccurrenceOnce(t *testing.T) {
	h := newHarness(t)
	dues := make(chan time.Time, 16)
	h.e.Register("tick", func(ctx context.Context, r *Run) error { dues <- r.Due; return nil })
	h.submit(Task{ID: "t", Type: "tick", Schedule: Every(10 * time.Second)})
	for k := 1; k <= 3; k++ {
		h.fake.Advance(10 * time.Second)
		h.wait(EventSucceeded, "t")
		if d := <-dues; !d.Equal(epoch.Add(time.Duration(k) * 10 * time.Second)) {
			t.Fatalf("occurrence %d due %v", k, d)
		}
	}
	if s := h.state("t"); s != Pending {
		t.Fatalf("between occurrences: %v", s)
	}
}

func TestCronWithSecondsRunsEachOccurrenceOnce(t *testing.T) {
	h := newHarness(t)
	dues := make(chan time.Time, 16)
	h.e.Register("cron", func(ctx context.Context, r *Run) error { dues <- r.Due; return nil })
	h.submit(Task{ID: "c", Type: "cron", Schedule: Cron("*/15 * * * * *", time.UTC)})
	for k := 1; k <= 4; k++ {
		h.fake.Advance(15 * time.Second)
		h.wait(EventSucceeded, "c")
		if d := <-dues; !d.Equal(epoch.Add(time.Duration(k) * 15 * time.Second)) {
			t.Fatalf("occurrence %d due %v", k, d)
		}
	}
}

// misfireCases are the misfire policies, each with the runs it makes of a backlog of
// missed occurrences.
var misfireCases = []struct {
	policy   MisfirePolicy
	wantRuns int
}{{MisfireFireOnce, 1}, {MisfireSkip, 0}}

// countRuns registers handler typ, which succeeds and counts its runs.
func countRuns(h *harness, typ string) *atomic.Int32 {
	var runs atomic.Int32
	h.e.Register(typ, func(ctx context.Context, r *Run) error { runs.Add(1); return nil })
	return &runs
}

// waitMisfire waits for id's misfire event and, when its policy runs the backlog
// (wantRuns 1), for that run's success; it returns the misfire.
func (h *harness) waitMisfire(id string, wantRuns int) Event {
	h.t.Helper()
	ev := h.wait(EventMisfired, id)
	if wantRuns == 1 {
		h.wait(EventSucceeded, id)
	}
	return ev
}

func TestMisfirePolicies(t *testing.T) {
	for _, tc := range misfireCases {
		t.Run(fmt.Sprint(tc.policy), func(t *testing.T) {
			h := newHarness(t)
			runs := countRuns(h, "r")
			h.submit(Task{ID: "r", Type: "r", Schedule: Every(time.Second), Misfire: tc.policy})
			// The engine falls 10 s behind: occurrences at 1..10 s are all due at once.
			h.fake.Advance(10*time.Second + 500*time.Millisecond)
			h.waitMisfire("r", tc.wantRuns)
			in, _ := h.e.Get("", "r")
			if int(runs.Load()) != tc.wantRuns || in.State != Pending || !in.NextRun.Equal(epoch.Add(11*time.Second)) {
				t.Fatalf("runs %d, info %+v", runs.Load(), in)
			}
		})
	}
}

// Continue continues a recurring task's schedule from the occurrence its previous holder
// had armed: one already past is a misfire, handled by the task's policy.
func TestContinueAppliesTheMisfirePolicy(t *testing.T) {
	for _, tc := range misfireCases {
		t.Run(fmt.Sprint(tc.policy), func(t *testing.T) {
			h := newHarness(t)
			runs := countRuns(h, "r")
			// Handed over 10.5 s after the occurrence due at epoch-10s: 11 of them passed.
			past := epoch.Add(-10*time.Second - 500*time.Millisecond)
			if _, err := h.e.Continue(Task{ID: "r", Type: "r", Schedule: Every(time.Second), Misfire: tc.policy}, past); err != nil {
				t.Fatal(err)
			}
			h.fake.Advance(0)
			ev := h.waitMisfire("r", tc.wantRuns)
			in, _ := h.e.Get("", "r")
			// The schedule keeps its phase: occurrences at past + k s, the next after now.
			if int(runs.Load()) != tc.wantRuns || ev.Missed == 0 || !in.NextRun.Equal(past.Add(11*time.Second)) {
				t.Fatalf("runs %d, missed %d, next %v (want %v)", runs.Load(), ev.Missed, in.NextRun, past.Add(11*time.Second))
			}
		})
	}
	// One-shot tasks ignore nextDue.
	h := newHarness(t)
	in, err := h.e.Continue(Task{ID: "o", Type: "r", Schedule: After(time.Minute)}, epoch.Add(-time.Hour))
	if err != nil || !in.NextRun.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("one-shot resume: %+v, %v", in, err)
	}
}

func TestBadInputIsRejectedWithClearErrors(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		name string
		task Task
		want error
	}{
		{"no ID", Task{Type: "x", Schedule: After(0)}, ErrInvalidTask},
		{"no type", Task{ID: "a", Schedule: After(0)}, ErrInvalidTask},
		{"ID not UTF-8", Task{ID: "a\xff", Type: "x", Schedule: After(0)}, ErrInvalidTask},
		{"namespace not UTF-8", Task{Namespace: "n\xff", ID: "a", Type: "x", Schedule: After(0)}, ErrInvalidTask},
		{"long namespace", Task{Namespace: strings.Repeat("n", MaxNamespaceLen+1), ID: "a", Type: "x", Schedule: After(0)}, ErrInvalidTask},
		{"huge payload", Task{ID: "a", Type: "x", Schedule: After(0), Payload: make([]byte, 2<<20)}, ErrInvalidTask},
		{"negative timeout", Task{ID: "a", Type: "x", Schedule: After(0), Timeout: -1}, ErrInvalidTask},
		{"zero schedule", Task{ID: "a", Type: "x"}, ErrInvalidSchedule},
		{"bad cron", Task{ID: "a", Type: "x", Schedule: Cron("61 * * * *", nil)}, ErrInvalidSchedule},
		{"negative delay", Task{ID: "a", Type: "x", Schedule: After(-time.Second)}, ErrInvalidSchedule},
		{"bad retry", Task{ID: "a", Type: "x", Schedule: After(0), Retry: RetryPolicy{Jitter: 2}}, ErrInvalidRetry},
	} {
		if _, err := h.e.Submit(c.task); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if st := h.e.Stats(); st.Tasks != 0 || st.Submitted != 0 {
		t.Fatalf("rejected submits left state behind: %+v", st)
	}
}

// TestSubmitFillsDefaults: a task without a namespace or retry policy is held with the
// defaults filled in, and "" and DefaultNamespace name the same namespace.
func TestSubmitFillsDefaults(t *testing.T) {
	h := newHarness(t)
	in := h.submit(Task{ID: "a", Type: "x", Schedule: After(time.Hour)})
	if in.Task.Namespace != DefaultNamespace || in.Task.Retry != (RetryPolicy{}).WithDefaults() {
		t.Fatalf("held as %+v", in.Task)
	}
	custom := RetryPolicy{MaxAttempts: 3}
	in = h.submit(Task{Namespace: "other", ID: "a", Type: "x", Schedule: After(time.Hour), Retry: custom})
	if in.Task.Namespace != "other" || in.Task.Retry != custom.WithDefaults() {
		t.Fatalf("held as %+v", in.Task)
	}
	if _, err := h.e.Submit(Task{Namespace: DefaultNamespace, ID: "a", Type: "x", Schedule: After(time.Hour)}); !errors.Is(err, ErrExists) {
		t.Fatalf("the same ID in DefaultNamespace: %v, want ErrExists", err)
	}
}

func TestOverloadedBeyondMaxTasks(t *testing.T) {
	// MaxTasks is enforced per shard (ceil(MaxTasks/64) records each), so a limit of 64
	// lets each shard hold one: some submit among the first 65 must be refused, and never
	// more than 64 are accepted.
	h := newHarness(t, WithMaxTasks(numShards))
	accepted := 0
	var err error
	for i := 0; i < numShards+1 && err == nil; i++ {
		if _, err = h.e.Submit(Task{ID: fmt.Sprint(i), Type: "x", Schedule: After(time.Hour)}); err == nil {
			accepted++
		}
	}
	if !errors.Is(err, ErrOverloaded) || accepted > numShards {
		t.Fatalf("accepted %d, then %v", accepted, err)
	}
	if st := h.e.Stats(); st.Tasks != accepted {
		t.Fatalf("stats count %d tasks, %d accepted", st.Tasks, accepted)
	}
}

func TestListByStateInPages(t *testing.T) {
	h := newHarness(t)
	for i := 0; i < 25; i++ {
		h.submit(Task{ID: fmt.Sprintf("t%02d", i), Type: "x", Schedule: After(time.Hour)})
	}
	h.e.Cancel("", "t03")
	var ids []string
	cursor := ""
	for {
		page, next, err := h.e.List(Pending, cursor, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range page {
			ids = append(ids, in.Task.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(ids) != 24 || ids[0] != "t00" || ids[3] != "t04" || ids[23] != "t24" {
		t.Fatalf("listed %v", ids)
	}
	if _, _, err := h.e.List(Pending, "garbage", 10); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestFixedDelayIntervalCountsFromCompletion(t *testing.T) {
	h := newHarness(t)
	dues := make(chan time.Time, 16)
	h.e.Register("poll", func(ctx context.Context, r *Run) error {
		h.fake.Advance(3 * time.Second) // the run takes 3 s
		dues <- r.Due
		return nil
	})
	h.submit(Task{ID: "d", Type: "poll", Schedule: EveryAfterDone(10 * time.Second)})
	h.fake.Advance(10 * time.Second)
	h.wait(EventSucceeded, "d")
	if d := <-dues; !d.Equal(epoch.Add(10 * time.Second)) {
		t.Fatalf("first run due %v", d)
	}
	// Completed at 13 s: the next run is due at 23 s, not 20 s.
	if in, _ := h.e.Get("", "d"); !in.NextRun.Equal(epoch.Add(23 * time.Second)) {
		t.Fatalf("next run %v, want completion + interval", in.NextRun)
	}
	h.fake.Advance(10 * time.Second)
	h.wait(EventSucceeded, "d")
	if d := <-dues; !d.Equal(epoch.Add(23 * time.Second)) {
		t.Fatalf("second run due %v", d)
	}
}

// TestMisbehavingHandlersNeverStallOthers runs a handler that panics, one that hangs,
// one that fails forever (with retries), and a hundred healthy tasks on two workers: every
// healthy task succeeds, and each misbehaving one ends in the dead-letter queue.
func TestMisbehavingHandlersNeverStallOthers(t *testing.T) {
	h := newHarness(t, WithWorkers(2))
	release := make(chan struct{})
	defer close(release)
	h.e.Register("panic", func(ctx context.Context, r *Run) error { panic("bad") })
	h.e.Register("hang", func(ctx context.Context, r *Run) error { <-release; return nil })
	h.e.Register("fail", func(ctx context.Context, r *Run) error { return errors.New("always") })
	h.e.Register("ok", func(ctx context.Context, r *Run) error { return nil })
	retry := RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Second}
	h.submit(Task{ID: "panic", Type: "panic", Schedule: After(0), Retry: retry})
	h.submit(Task{ID: "hang1", Type: "hang", Schedule: After(0), Timeout: 2 * time.Second})
	h.submit(Task{ID: "hang2", Type: "hang", Schedule: After(0), Timeout: 2 * time.Second})
	h.submit(Task{ID: "fail", Type: "fail", Schedule: After(0), Retry: retry})
	for i := 0; i < 100; i++ {
		h.submit(Task{ID: fmt.Sprint("ok", i), Type: "ok", Schedule: After(time.Duration(i%5) * time.Second)})
	}
	h.fake.Advance(0)
	h.wait(EventStarted, "hang1")
	h.wait(EventStarted, "hang2") // both original workers are now stuck
	for step := 0; step < 10; step++ {
		h.fake.Advance(time.Second)
	}
	for i := 0; i < 100; i++ {
		h.wait(EventSucceeded, fmt.Sprint("ok", i))
	}
	h.wait(EventDead, "hang1")
	h.wait(EventDead, "hang2")
	// The two failing tasks retry 3 times each; a retry is due a backoff (at most 4 s here)
	// after the failed attempt ends, so move the clock past it once both have failed.
	for retry := 0; retry < 3; retry++ {
		h.wait(EventRetrying, "panic")
		h.wait(EventRetrying, "fail")
		h.fake.Advance(5 * time.Second)
	}
	h.wait(EventDead, "panic")
	h.wait(EventDead, "fail")
	if st := h.e.Stats(); st.DeadLetters != 4 || st.Succeeded != 100 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRecordSize pins the record's size: every task allocates one, so a field that pushes
// it past the 480 B size class costs every task 32 B or more (past 512 B, objects also
// carry an 8 B allocation header) and the collector as much more work.
func TestRecordSize(t *testing.T) {
	if size := unsafe.Sizeof(record{}); size > 480 {
		t.Fatalf("record is %d B: past the 480 B size class", size)
	}
}

// TestStartedAndSucceededEventsMeasureLatenessAndDuration pins the lateness an attempt
// reports (from its due time, or for a misfire merged into one run from the latest
// occurrence it stands for) and its duration, on the fake clock.
func TestStartedAndSucceededEventsMeasureLatenessAndDuration(t *testing.T) {
	h := newHarness(t)
	h.e.Register("slow", func(ctx context.Context, r *Run) error {
		h.fake.Advance(2 * time.Second) // the run takes 2 s
		return nil
	})
	h.submit(Task{ID: "once", Type: "slow", Schedule: After(time.Second)})
	h.fake.Advance(1500 * time.Millisecond) // collected half a second late
	if ev := h.wait(EventStarted, "once"); ev.Lateness != 500*time.Millisecond {
		t.Fatalf("lateness %v, want 500ms", ev.Lateness)
	}
	if ev := h.wait(EventSucceeded, "once"); ev.Duration != 2*time.Second {
		t.Fatalf("duration %v, want 2s", ev.Duration)
	}
	h.e.Register("quick", func(ctx context.Context, r *Run) error { return nil })
	h.submit(Task{ID: "every", Type: "quick", Schedule: Every(10 * time.Second)})
	h.fake.Advance(35 * time.Second) // occurrences at 10, 20 and 30 s: one run, due at 30 s
	if ev := h.wait(EventMisfired, "every"); ev.Missed != 2 {
		t.Fatalf("missed %d, want 2", ev.Missed)
	}
	if ev := h.wait(EventStarted, "every"); ev.Lateness != 5*time.Second {
		t.Fatalf("lateness %v, want 5s (from the 30 s occurrence)", ev.Lateness)
	}
}

// TestSetRetention: a retention changed at runtime applies to tasks that finish after
// the change; a record already retained goes at the deadline it got when it finished
// (on the fake clock: one finished under 1 h is still there after the new 1 s has
// passed, and goes at its hour); 0 drops a task as it finishes.
func TestSetRetention(t *testing.T) {
	h := newHarness(t, WithRetention(time.Hour))
	h.e.Register("c", func(ctx context.Context, r *Run) error { return nil })
	if got := h.e.Retention(); got != time.Hour {
		t.Fatalf("Retention() = %v, want the option's 1h", got)
	}
	h.submit(Task{ID: "old", Type: "c", Schedule: After(0)})
	h.fake.Advance(0)
	h.wait(EventSucceeded, "old")

	h.e.SetRetention(time.Second)
	if got := h.e.Retention(); got != time.Second {
		t.Fatalf("Retention() = %v after SetRetention(1s)", got)
	}
	h.submit(Task{ID: "new", Type: "c", Schedule: After(0)})
	h.fake.Advance(0)
	h.wait(EventSucceeded, "new")
	if _, err := h.e.Get("", "new"); err != nil {
		t.Fatalf("new dropped before its 1s retention: %v", err)
	}
	h.fake.Advance(time.Second)
	waitfor.Until(t, "new dropped 1s after it finished", func() bool {
		_, err := h.e.Get("", "new")
		return errors.Is(err, ErrNotFound)
	})
	if _, err := h.e.Get("", "old"); err != nil {
		t.Fatalf("old, finished under a 1h retention, dropped at the new 1s: %v", err)
	}
	h.fake.Advance(time.Hour - 2*time.Second)
	h.fake.Advance(time.Second - time.Millisecond) // 1ms short of old's hour: never early
	if _, err := h.e.Get("", "old"); err != nil {
		t.Fatalf("old dropped before its hour: %v", err)
	}
	h.fake.Advance(time.Millisecond)
	waitfor.Until(t, "old dropped at its hour", func() bool {
		_, err := h.e.Get("", "old")
		return errors.Is(err, ErrNotFound)
	})

	h.e.SetRetention(0)
	if got := h.e.Retention(); got != 0 {
		t.Fatalf("Retention() = %v after SetRetention(0)", got)
	}
	h.submit(Task{ID: "gone", Type: "c", Schedule: After(0)})
	h.fake.Advance(0)
	h.wait(EventSucceeded, "gone")
	if _, err := h.e.Get("", "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(gone) after it finished under retention 0: %v, want ErrNotFound", err)
	}
}
