package task

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/internal/waitfor"
)

// TestRateLimitHoldsOnTheFakeClock: with a limit of 1,000 runs/s and a burst of 5, a
// backlog of 2,000 due runs starts 5 at once and then one a millisecond: the fake clock
// steps 1 ms at a time for 1 s, each step waits for its run to start, and the count of
// runs let go never runs ahead of burst + elapsed × rate. Over the second the rate is
// within 5% of 1,000/s (here exactly: the wake timer fires at each token's time).
func TestRateLimitHoldsOnTheFakeClock(t *testing.T) {
	const n, rate, burst, steps = 2000, 1000, 5, 1000
	h := newHarness(t)
	started := make(chan struct{}, n)
	h.e.Register("mail", func(context.Context, *Run) error { started <- struct{}{}; return nil })
	if err := h.e.SetRateLimit("mail", rate, burst); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		h.submit(Task{ID: fmt.Sprint("m", i), Type: "mail", Schedule: After(0)})
	}
	receive := func(k int, step int) {
		t.Helper()
		for range k {
			select {
			case <-started:
			case <-time.After(eventWait):
				t.Fatalf("step %d: a run that the rate allows did not start within %v", step, eventWait)
			}
		}
	}
	receive(burst, 0)
	waitingOnLimit(t, h.e, n-burst)
	for step := 1; step <= steps; step++ {
		h.fake.Advance(time.Millisecond)
		receive(1, step)
		// Let go so far: burst + step. A limiter that let more go shows it here, at this
		// step or the next (its waiting count is decremented before a run is queued).
		if w := h.e.Stats().WaitingOnLimit; w != n-burst-step {
			t.Fatalf("after %d ms: %d runs waiting; want %d (burst %d + 1 a ms let go)", step, w, n-burst-step, burst)
		}
	}
	got := float64(n-burst-h.e.Stats().WaitingOnLimit) / (float64(steps) * float64(time.Millisecond) / float64(time.Second))
	if math.Abs(got-rate)/rate > 0.05 {
		t.Errorf("steady rate %.1f runs/s; want %d within 5%%", got, rate)
	}
	if perSecond, b, waiting := h.e.RateLimit("mail"); perSecond != rate || b != burst || waiting != n-burst-steps {
		t.Errorf("RateLimit: %v/s, burst %d, %d waiting; want %d, %d, %d", perSecond, b, waiting, rate, burst, n-burst-steps)
	}
	if err := h.e.SetRateLimit("mail", 0, 0); err != nil { // the rest go at once
		t.Fatal(err)
	}
	receive(n-burst-steps, steps+1)
}

// TestRateLimitChangesAtRuntime: a raised rate applies from the change (not after the
// old rate's next token), and a removed one lets every waiting run go.
func TestRateLimitChangesAtRuntime(t *testing.T) {
	h := newHarness(t)
	h.e.Register("slow", func(context.Context, *Run) error { return nil })
	if err := h.e.SetRateLimit("slow", 1, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		h.submit(Task{ID: fmt.Sprint("s", i), Type: "slow", Schedule: At(epoch.Add(time.Duration(i) * time.Millisecond))})
	}
	h.wait(EventStarted, "s0") // due now: it took the token
	h.fake.Advance(10 * time.Millisecond)
	waitingOnLimit(t, h.e, 9)
	if err := h.e.SetRateLimit("slow", 1000, 1); err != nil { // next token in 1 ms, not 1 s
		t.Fatal(err)
	}
	h.fake.Advance(time.Millisecond)
	h.wait(EventStarted, "s1") // earliest due first
	waitingOnLimit(t, h.e, 8)
	if err := h.e.SetRateLimit("slow", 0, 0); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 10; i++ {
		h.wait(EventStarted, fmt.Sprint("s", i))
	}
	if perSecond, _, _ := h.e.RateLimit("slow"); perSecond != 0 {
		t.Errorf("removed rate limit reads %v/s", perSecond)
	}
	// A limit set again applies again.
	if err := h.e.SetRateLimit("slow", 1, 1); err != nil {
		t.Fatal(err)
	}
	h.submit(Task{ID: "again", Type: "slow", Schedule: After(0)})
	h.wait(EventStarted, "again")
	h.submit(Task{ID: "again2", Type: "slow", Schedule: After(0)})
	waitingOnLimit(t, h.e, 1)
	h.fake.Advance(time.Second)
	h.wait(EventStarted, "again2")
}

// TestRateAndConcurrencyLimitsTogether: a run held by its key after its type's rate let
// it go is not charged a second token when its slot comes.
func TestRateAndConcurrencyLimitsTogether(t *testing.T) {
	h := newHarness(t)
	unblock := h.blocking()
	if err := h.e.SetRateLimit("block", 1, 2); err != nil {
		t.Fatal(err)
	}
	key := &Concurrency{Key: "k", Limit: 1}
	h.submit(Task{ID: "a", Type: "block", Schedule: After(0), Concurrency: key})
	h.wait(EventStarted, "a")
	h.submit(Task{ID: "b", Type: "block", Schedule: After(0), Concurrency: key}) // the burst's second token; then the key holds it
	waitingOnLimit(t, h.e, 1)
	if in, _ := h.e.ConcurrencyKey("", "k"); in.Waiting != 1 {
		t.Fatalf("b waits for %+v; want the key", in)
	}
	unblock()
	h.wait(EventStarted, "b") // no token is left until 1 s from now: b must not need one
	if st := h.e.Stats(); st.LimitWaits != 1 {
		t.Errorf("%d limit waits; want 1 (b, on its key)", st.LimitWaits)
	}
}

// TestReleasedBacklogWaitsInOneQueue: removing a rate limit with thousands of runs
// waiting, while the workers are busy and the queue is small, lets them all go without
// a goroutine each: what the queue cannot take waits in the engine's overflow, in order,
// for one goroutine to hand on; and every run starts once the workers are free.
func TestReleasedBacklogWaitsInOneQueue(t *testing.T) {
	const n = 3000
	// Two workers are held by the burst's runs; the third parks the rest, and then is
	// held by the first run let go.
	h := newHarness(t, WithOptions(Options{Workers: 3, QueueSize: 16}))
	release := make(chan struct{})
	var started atomic.Int32
	h.e.Register("slow", func(context.Context, *Run) error { started.Add(1); <-release; return nil })
	if err := h.e.SetRateLimit("slow", 1, 2); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		h.submit(Task{ID: fmt.Sprint("s", i), Type: "slow", Schedule: At(epoch.Add(time.Duration(i) * time.Millisecond))})
	}
	h.fake.Advance(time.Duration(n) * time.Millisecond)
	waitingOnLimit(t, h.e, n-2) // two took the burst
	before := runtime.NumGoroutine()
	if err := h.e.SetRateLimit("slow", 0, 0); err != nil {
		t.Fatal(err)
	}
	if extra := runtime.NumGoroutine() - before; extra > 10 {
		t.Errorf("letting %d runs go started %d goroutines", n-2, extra)
	}
	close(release)
	waitfor.Until(t, fmt.Sprintf("%d runs started", n), func() bool { return started.Load() == n })
}
