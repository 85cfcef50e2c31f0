package task

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/internal/waitfor"
)

// newRealEngine starts an engine on the real clock, verified and closed at cleanup.
func newRealEngine(t *testing.T, opts ...Option) *Engine {
	t.Helper()
	e, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { verifyAndClose(t, e) })
	return e
}

// waitingOnLimit waits until n runs wait for a limit.
func waitingOnLimit(t *testing.T, e *Engine, n int) {
	t.Helper()
	waitfor.Until(t, fmt.Sprintf("%d runs waiting on a limit", n), func() bool { return e.Stats().WaitingOnLimit == n })
}

// TestConcurrencyKeyBoundsRunsAtOnce runs 10,000 tasks due at once under one key with
// limit 3 on 16 workers: the handlers themselves measure how many run at once, which
// never passes 3 and reaches it (the slots are used, not merely bounded); every task
// runs once, at its first attempt.
func TestConcurrencyKeyBoundsRunsAtOnce(t *testing.T) {
	const n, limit = 10_000, 3
	e := newRealEngine(t, WithWorkers(16))
	var now, most atomic.Int32
	runs := make([]atomic.Int32, n)
	done := make(chan struct{})
	var handled atomic.Int32
	e.Register("db", func(ctx context.Context, r *Run) error {
		c := now.Add(1)
		for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
		}
		runtime.Gosched() // give the other workers a chance to overlap
		now.Add(-1)
		i, _ := strconv.Atoi(r.Task.ID)
		runs[i].Add(1)
		if r.Attempt != 1 {
			t.Errorf("task %s ran as attempt %d", r.Task.ID, r.Attempt)
		}
		if handled.Add(1) == n {
			close(done)
		}
		return nil
	})
	for i := range n {
		if _, err := e.Submit(Task{ID: strconv.Itoa(i), Type: "db", Schedule: After(0), Concurrency: &Concurrency{Key: "orders", Limit: limit}}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(eventWait):
		t.Fatalf("%d of %d tasks handled within %v", handled.Load(), n, eventWait)
	}
	if m := most.Load(); m != limit {
		t.Errorf("at most %d runs of the key at once; want exactly the limit, %d", m, limit)
	}
	for i := range runs {
		if r := runs[i].Load(); r != 1 {
			t.Errorf("task %d ran %d times", i, r)
		}
	}
	if st := e.Stats(); st.WaitingOnLimit != 0 || st.LimitWaits == 0 || st.Started != n {
		t.Errorf("stats: %d waiting on a limit, %d limit waits, %d started; want 0, > 0, %d", st.WaitingOnLimit, st.LimitWaits, st.Started, n)
	}
}

// TestWaitingRunsStartInDueOrder parks 20 runs, due in a shuffled order of submission,
// behind a key with limit 1 whose slot a blocked run holds: while they wait they are DUE
// with no attempt used; once the slot frees they start one at a time, earliest due
// first, each as its first attempt.
func TestWaitingRunsStartInDueOrder(t *testing.T) {
	h := newHarness(t)
	unblock := h.blocking()
	key := &Concurrency{Key: "printer", Limit: 1}
	var mu sync.Mutex
	var order []time.Time
	h.e.Register("print", func(ctx context.Context, r *Run) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, r.Due)
		if r.Attempt != 1 {
			t.Errorf("%s ran as attempt %d", r.Task.ID, r.Attempt)
		}
		return nil
	})
	h.submit(Task{ID: "hold", Type: "block", Schedule: After(0), Concurrency: key})
	h.wait(EventStarted, "hold")
	const n = 20
	for _, i := range rand.Perm(n) {
		h.submit(Task{ID: fmt.Sprint("job-", i), Type: "print", Schedule: At(epoch.Add(time.Duration(i+1) * time.Millisecond)), Concurrency: key})
	}
	h.fake.Advance(time.Second)
	waitingOnLimit(t, h.e, n)
	for i := range n {
		in, err := h.e.Get("", fmt.Sprint("job-", i))
		if err != nil {
			t.Fatal(err)
		}
		if in.State != Due || in.Attempts != 0 {
			t.Errorf("job-%d waiting: %v with %d attempts; want DUE with 0", i, in.State, in.Attempts)
		}
	}
	if in, ok := h.e.ConcurrencyKey("", "printer"); !ok || in != (KeyInfo{Limit: 1, Running: 1, Waiting: n}) {
		t.Errorf("key while waiting: %+v, %v; want limit 1, 1 running, %d waiting", in, ok, n)
	}
	unblock()
	for i := range n {
		h.wait(EventSucceeded, fmt.Sprint("job-", i))
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.IsSortedFunc(order, func(a, b time.Time) int { return a.Compare(b) }) || len(order) != n {
		t.Errorf("runs started in due times %v; want %d, ascending", order, n)
	}
}

// TestWaitingUsesNoAttempt: a task allowed one attempt that waits for a slot still has
// it when it runs, and a retried task's retry waits without using one either.
func TestWaitingUsesNoAttempt(t *testing.T) {
	h := newHarness(t)
	unblock := h.blocking()
	key := &Concurrency{Key: "k", Limit: 1}
	var calls atomic.Int32
	h.e.Register("flaky", func(ctx context.Context, r *Run) error {
		if calls.Add(1) == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	h.submit(Task{ID: "flaky", Type: "flaky", Schedule: After(0), Concurrency: key, Retry: RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second}})
	h.wait(EventRetrying, "flaky")
	h.submit(Task{ID: "hold", Type: "block", Schedule: After(0), Concurrency: key})
	h.wait(EventStarted, "hold")
	h.fake.Advance(time.Second) // the retry is due, and waits behind hold
	waitingOnLimit(t, h.e, 1)
	if in, _ := h.e.Get("", "flaky"); in.State != Due || in.Attempts != 1 {
		t.Errorf("retry waiting: %v after %d attempts; want DUE after 1", in.State, in.Attempts)
	}
	unblock()
	if ev := h.wait(EventSucceeded, "flaky"); ev.Attempt != 2 {
		t.Errorf("retry succeeded as attempt %d; want 2", ev.Attempt)
	}
}

// TestEndedAttemptsFreeTheirSlot: however a key's running attempt ends (its handler
// returns, a deferred attempt is completed, it times out, it is cancelled or dropped),
// its slot goes to the run that waits.
func TestEndedAttemptsFreeTheirSlot(t *testing.T) {
	for _, end := range []string{"returned", "completed", "timed out", "cancelled", "dropped"} {
		t.Run("end="+end, func(t *testing.T) {
			h := newHarness(t)
			key := &Concurrency{Key: "k", Limit: 1}
			release := make(chan struct{})
			runIDs := make(chan uint64, 2)
			h.e.Register("work", func(ctx context.Context, r *Run) error {
				runIDs <- r.RunID
				switch {
				case end == "completed":
					return ErrDeferred
				case end == "returned" && r.Task.ID == "first":
					<-release
				default:
					<-ctx.Done()
				}
				return nil
			})
			h.submit(Task{ID: "first", Type: "work", Schedule: After(0), Concurrency: key, Timeout: time.Second})
			h.wait(EventStarted, "first")
			first := <-runIDs
			h.submit(Task{ID: "second", Type: "work", Schedule: After(0), Concurrency: key})
			waitingOnLimit(t, h.e, 1)
			switch end {
			case "returned":
				close(release)
			case "completed":
				if err := h.e.Complete(first, nil); err != nil {
					t.Fatal(err)
				}
			case "timed out":
				h.fake.Advance(time.Second)
			case "cancelled":
				if err := h.e.Cancel("", "first"); err != nil {
					t.Fatal(err)
				}
			case "dropped":
				if err := h.e.Drop("", "first"); err != nil {
					t.Fatal(err)
				}
			}
			h.wait(EventStarted, "second")
			if in, _ := h.e.ConcurrencyKey("", "k"); in.Running != 1 || in.Waiting != 0 {
				t.Errorf("key after the hand-over: %+v; want 1 running, none waiting", in)
			}
			if second := <-runIDs; end == "completed" {
				if err := h.e.Complete(second, nil); err != nil {
					t.Fatal(err)
				}
			} else if err := h.e.Cancel("", "second"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCancelledWaiterPassesTheSlotOn: a waiting run that is cancelled is granted the
// slot in its turn, finds itself stale and hands the slot to the next waiter; once the
// key's last record is gone its limiter is too.
func TestCancelledWaiterPassesTheSlotOn(t *testing.T) {
	h := newHarness(t, WithRetention(-1))
	unblock := h.blocking()
	key := &Concurrency{Key: "k", Limit: 1}
	h.e.Register("quick", func(context.Context, *Run) error { return nil })
	h.submit(Task{ID: "hold", Type: "block", Schedule: After(0), Concurrency: key})
	h.wait(EventStarted, "hold")
	h.submit(Task{ID: "a", Type: "quick", Schedule: At(epoch.Add(time.Millisecond)), Concurrency: key})
	h.submit(Task{ID: "b", Type: "quick", Schedule: At(epoch.Add(2 * time.Millisecond)), Concurrency: key})
	h.fake.Advance(time.Second)
	waitingOnLimit(t, h.e, 2)
	if err := h.e.Cancel("", "a"); err != nil {
		t.Fatal(err)
	}
	unblock()
	h.wait(EventSucceeded, "b")
	waitfor.Until(t, "the key's limiter dropped", func() bool {
		_, ok := h.e.ConcurrencyKey("", "k")
		return !ok
	})
	if st := h.e.Stats(); st.WaitingOnLimit != 0 || st.Started != 2 {
		t.Errorf("%d waiting on a limit, %d started; want 0 and 2 (hold, b)", st.WaitingOnLimit, st.Started)
	}
}

// TestConcurrencyLimitChangesAtRuntime: raising a key's limit starts waiting runs at
// once; SetConcurrencyLimit overrides the limits Submits give until it is removed, and
// then the latest Submit's applies; a lowered limit stops no run but starts none until
// the key is below it.
func TestConcurrencyLimitChangesAtRuntime(t *testing.T) {
	h := newHarness(t)
	unblock := h.blocking()
	submit := func(id string, limit int) {
		h.submit(Task{ID: id, Type: "block", Schedule: After(0), Concurrency: &Concurrency{Key: "k", Limit: limit}})
	}
	// expect waits until the key has running attempts in their handlers and waiting
	// runs as given, and checks its limit.
	expect := func(limit, running, waiting int) {
		t.Helper()
		waitingOnLimit(t, h.e, waiting)
		waitfor.Until(t, fmt.Sprintf("%d handlers running", running), func() bool { return h.e.Stats().Running == running })
		if in, ok := h.e.ConcurrencyKey("", "k"); !ok || in != (KeyInfo{Limit: limit, Running: running, Waiting: waiting}) {
			t.Fatalf("key k: %+v, %v; want limit %d, %d running, %d waiting", in, ok, limit, running, waiting)
		}
	}
	for i := range 5 {
		submit(fmt.Sprint("t", i), 1)
	}
	expect(1, 1, 4)
	if err := h.e.SetConcurrencyLimit("", "k", 3); err != nil {
		t.Fatal(err)
	}
	expect(3, 3, 2)
	submit("t5", 10) // a Submit's limit does not override SetConcurrencyLimit's
	expect(3, 3, 3)
	if err := h.e.SetConcurrencyLimit("", "k", 0); err != nil { // back to the latest Submit's: 10
		t.Fatal(err)
	}
	expect(10, 6, 0)
	if err := h.e.SetConcurrencyLimit("", "k", 1); err != nil {
		t.Fatal(err)
	}
	submit("t6", 0)
	expect(1, 6, 1)
	unblock()
	h.wait(EventStarted, "t6")
}

// TestKeysAreScopedToTheirNamespace: the same key in two namespaces is two limiters.
func TestKeysAreScopedToTheirNamespace(t *testing.T) {
	h := newHarness(t)
	h.blocking()
	for _, ns := range []string{"a", "b"} {
		h.submit(Task{Namespace: ns, ID: "t", Type: "block", Schedule: After(0), Concurrency: &Concurrency{Key: "k", Limit: 1}})
	}
	h.wait(EventStarted, "t")
	h.wait(EventStarted, "t")
}

// TestMaxConcurrencyKeysBoundsKeys: a new key past Options.MaxConcurrencyKeys is refused
// with ErrOverloaded naming the option; a key whose tasks are gone frees its place.
func TestMaxConcurrencyKeysBoundsKeys(t *testing.T) {
	h := newHarness(t, WithOptions(Options{MaxConcurrencyKeys: 2, Retention: -1}))
	h.e.Register("quick", func(context.Context, *Run) error { return nil })
	h.submit(Task{ID: "a", Type: "quick", Schedule: After(time.Hour), Concurrency: &Concurrency{Key: "a"}})
	h.submit(Task{ID: "b", Type: "quick", Schedule: After(time.Hour), Concurrency: &Concurrency{Key: "b"}})
	h.submit(Task{ID: "b2", Type: "quick", Schedule: After(time.Hour), Concurrency: &Concurrency{Key: "b"}})
	_, err := h.e.Submit(Task{ID: "c", Type: "quick", Schedule: After(time.Hour), Concurrency: &Concurrency{Key: "c"}})
	if !errors.Is(err, ErrOverloaded) || !strings.Contains(err.Error(), "MaxConcurrencyKeys") {
		t.Fatalf("third key: %v; want ErrOverloaded naming MaxConcurrencyKeys", err)
	}
	if err := h.e.SetConcurrencyLimit("", "c", 1); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("third key set at runtime: %v; want ErrOverloaded", err)
	}
	if err := h.e.Cancel("", "a"); err != nil {
		t.Fatal(err)
	}
	h.submit(Task{ID: "c", Type: "quick", Schedule: After(time.Hour), Concurrency: &Concurrency{Key: "c"}})
}

// TestLimitsRefuseBadValuesNamingTheField covers every argument of the limits.
func TestLimitsRefuseBadValuesNamingTheField(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		c     Concurrency
		field string
	}{
		{Concurrency{Key: ""}, "Concurrency.Key"},
		{Concurrency{Key: strings.Repeat("k", MaxConcurrencyKeyLen+1)}, "Concurrency.Key"},
		{Concurrency{Key: "\xff"}, "Concurrency.Key"},
		{Concurrency{Key: "k", Limit: -1}, "Concurrency.Limit"},
		{Concurrency{Key: "k", Limit: MaxConcurrencyLimit + 1}, "Concurrency.Limit"},
	} {
		_, err := h.e.Submit(Task{ID: "t", Type: "x", Schedule: After(0), Concurrency: &tc.c})
		if !errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Submit with %+v: %v; want ErrInvalidTask naming %s", tc.c, err, tc.field)
		}
		if err := h.e.SetConcurrencyLimit("", tc.c.Key, tc.c.Limit); !errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("SetConcurrencyLimit(%q, %d): %v; want ErrInvalidTask naming %s", tc.c.Key, tc.c.Limit, err, tc.field)
		}
	}
	for _, tc := range []struct {
		typ       string
		perSecond float64
		burst     int
		field     string
	}{
		{"", 1, 1, "type"},
		{"x", -1, 1, "perSecond"},
		{"x", MinRate / 2, 1, "perSecond"},
		{"x", MaxRate * 2, 1, "perSecond"},
		{"x", nan(), 1, "perSecond"},
		{"x", 1, 0, "burst"},
		{"x", 1, MaxBurst + 1, "burst"},
	} {
		if err := h.e.SetRateLimit(tc.typ, tc.perSecond, tc.burst); !errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("SetRateLimit(%q, %v, %d): %v; want ErrInvalidTask naming %s", tc.typ, tc.perSecond, tc.burst, err, tc.field)
		}
	}
	if _, err := New(WithOptions(Options{MaxConcurrencyKeys: -1})); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "MaxConcurrencyKeys") {
		t.Errorf("MaxConcurrencyKeys -1: %v; want ErrInvalidOption naming it", err)
	}
}

func nan() float64 { var zero float64; return zero / zero }

// TestSubmitCopiesConcurrency: the caller's Concurrency is not the engine's; changing it
// after Submit changes nothing.
func TestSubmitCopiesConcurrency(t *testing.T) {
	h := newHarness(t)
	c := &Concurrency{Key: "k", Limit: 2}
	h.submit(Task{ID: "t", Type: "x", Schedule: After(time.Hour), Concurrency: c})
	c.Key, c.Limit = "other", 9
	in, _ := h.e.Get("", "t")
	if in.Task.Concurrency == c || in.Task.Concurrency.Key != "k" || in.Task.Concurrency.Limit != 2 {
		t.Errorf("the engine's copy: %+v", in.Task.Concurrency)
	}
}

// TestKeyedTasksThroughRequeueAndReplace: a keyed task that dies gives its slot back and
// runs again from the dead-letter queue under its key; a waiting keyed task replaced by
// a higher version leaves its place to the new version's run. The table's references
// match the records at the end (the harness's verify).
func TestKeyedTasksThroughRequeueAndReplace(t *testing.T) {
	h := newHarness(t)
	unblock := h.blocking()
	key := &Concurrency{Key: "k", Limit: 1}
	var fails atomic.Bool
	fails.Store(true)
	h.e.Register("once", func(context.Context, *Run) error {
		if fails.Load() {
			return errors.New("fails")
		}
		return nil
	})
	h.submit(Task{ID: "dies", Type: "once", Schedule: After(0), Concurrency: key})
	h.wait(EventDead, "dies")
	h.submit(Task{ID: "hold", Type: "block", Schedule: After(0), Concurrency: key}) // the slot was given back
	h.wait(EventStarted, "hold")
	fails.Store(false)
	if _, err := h.e.Requeue("", "dies"); err != nil {
		t.Fatal(err)
	}
	h.fake.Advance(time.Millisecond)
	waitingOnLimit(t, h.e, 1)
	h.submit(Task{ID: "dies", Type: "once", Schedule: After(time.Hour), Concurrency: key, Version: 1}) // replaces the waiting run
	unblock()
	h.wait(EventSucceeded, "hold")
	waitfor.Until(t, "the replaced run's slot passed on", func() bool {
		in, _ := h.e.ConcurrencyKey("", "k")
		return in.Running == 0 && in.Waiting == 0
	})
	if in, _ := h.e.Get("", "dies"); in.State != Pending || in.Task.Version != 1 || in.Runs != 0 {
		t.Errorf("the replacing version: %v, version %d, %d runs; want PENDING, 1, 0", in.State, in.Task.Version, in.Runs)
	}
}

// TestKeyTableUnderConcurrentSubmitAndRemove: submits and removals of tasks naming a few
// keys, from several goroutines at once, leave the key table consistent (the harness's
// verify compares every limiter's references with the records) and empty once the
// tasks are gone: no limiter is dropped while a record names it, none is kept after.
func TestKeyTableUnderConcurrentSubmitAndRemove(t *testing.T) {
	h := newHarness(t, WithRetention(-1))
	const goroutines, rounds, keys = 4, 500, 3
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				id := fmt.Sprint("g", g, "-", i)
				key := &Concurrency{Key: fmt.Sprint("k", i%keys), Limit: 1 + i%2}
				if _, err := h.e.Submit(Task{ID: id, Type: "x", Schedule: After(time.Hour), Concurrency: key}); err != nil {
					t.Error(err)
					return
				}
				if err := h.e.Cancel("", id); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := h.e.verify(); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if in, ok := h.e.ConcurrencyKey("", fmt.Sprint("k", k)); ok {
			t.Errorf("key k%d kept with no task naming it: %+v", k, in)
		}
	}
}
