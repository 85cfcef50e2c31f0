package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// runWorker runs w until the test ends, then checks Run returned context.Canceled. It
// returns once the first SUBSCRIBE is accepted (a task submitted before its type has
// a handler is DEAD at once); later subscriptions are sent on the channel it returns.
func runWorker(t *testing.T, w *Worker) <-chan struct{} {
	t.Helper()
	subs := make(chan struct{}, 16)
	w.subscribed = func() { subs <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := tockdtest.Receive(t, done, "Run's return after cancel"); !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
	waitSub(t, subs)
	return subs
}

func waitSub(t *testing.T, subs <-chan struct{}) {
	t.Helper()
	tockdtest.Receive(t, subs, "the worker's subscribe")
}

func newWorkerT(t *testing.T, addr string, opts ...Option) *Worker {
	t.Helper()
	w, err := NewWorker(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWorkerRunsTasks(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	w := newWorkerT(t, s.Addr, WithConcurrency(3))
	var running, peak atomic.Int32
	seen := make(chan string, 100)
	if err := w.Handle("email", func(ctx context.Context, f *Fire) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if _, ok := ctx.Deadline(); !ok || f.TTR <= 0 || f.Attempt < 1 {
			return task.NonRetryable(fmt.Errorf("bad fire %+v", f))
		}
		seen <- f.TaskID + ":" + string(f.Payload)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("", nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Handle with no type: %v", err)
	}
	runWorker(t, w)
	const n = 20
	for i := range n {
		tk := oneShot(fmt.Sprintf("e%d", i), "email", 0)
		tk.Payload = []byte("hi")
		// With every credit in use the server fails the attempt ("no worker available"): retries cover it.
		tk.Retry = task.RetryPolicy{MaxAttempts: 100, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
		if _, err := c.Submit(bounded(t), tk, protocol.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		waitState(t, c, fmt.Sprintf("e%d", i), task.Succeeded)
	}
	if p := peak.Load(); p > 3 {
		t.Errorf("%d handlers ran at once, Concurrency is 3", p)
	}
	got := map[string]bool{}
	for len(seen) > 0 {
		got[<-seen] = true
	}
	if !got["e0:hi"] || len(got) != n {
		t.Errorf("handled %d distinct tasks (%v), want %d", len(got), got, n)
	}
}

func TestWorkerRetriesThenSucceeds(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	acked := make(chan string, 4) // OnAcked: the result and the server's answer per attempt
	w := newWorkerT(t, s.Addr, WithOnAcked(func(f *Fire, result, ackErr error) {
		acked <- fmt.Sprintf("attempt %d: result %v, answer %v", f.Attempt, result, ackErr)
	}))
	var mu sync.Mutex
	attempts := map[uint64]bool{}
	if err := w.Handle("flaky", func(ctx context.Context, f *Fire) error {
		mu.Lock()
		attempts[uint64(f.Attempt)] = true
		mu.Unlock()
		if f.Attempt < 2 && f.Payload != nil {
			return errors.New("transient")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	tk := oneShot("f", "flaky", 0)
	tk.Payload = []byte("x")
	tk.Retry = task.RetryPolicy{MaxAttempts: 100, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	if _, err := c.Submit(bounded(t), tk, protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, "f", task.Succeeded)
	mu.Lock()
	defer mu.Unlock()
	if !attempts[1] || !attempts[2] {
		t.Errorf("attempts seen by the handler: %v, want 1 (failed) and 2", attempts)
	}
	got := map[string]bool{} // in either order: each attempt's goroutine reports its own
	for range 2 {
		select {
		case a := <-acked:
			got[a] = true
		case <-time.After(tockdtest.Limit):
			t.Fatalf("OnAcked called only for %v", got)
		}
	}
	for _, want := range []string{"attempt 1: result transient, answer <nil>", "attempt 2: result <nil>, answer <nil>"} {
		if !got[want] {
			t.Errorf("OnAcked reports %v, lacking %q", got, want)
		}
	}
}

func TestWorkerNonRetryableIsDead(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	w := newWorkerT(t, s.Addr)
	var calls atomic.Int32
	if err := w.Handle("doomed", func(ctx context.Context, f *Fire) error {
		calls.Add(1)
		return task.NonRetryable(errors.New("bad payload"))
	}); err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	tk := oneShot("d", "doomed", 0)
	tk.Retry = task.RetryPolicy{MaxAttempts: 100, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	if _, err := c.Submit(bounded(t), tk, protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, "d", task.Dead)
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1 (non-retryable)", n)
	}
	dls, _, err := c.DeadLetters(bounded(t), "", 0)
	if err != nil || len(dls) != 1 || dls[0].Task.ID != "d" {
		t.Fatalf("DeadLetters = %+v, %v", dls, err)
	}
	if st, err := c.Requeue(bounded(t), "", "d"); err != nil || st.TaskID != "d" {
		t.Errorf("Requeue = %+v, %v", st, err)
	}
}

func TestWorkerRedialsAfterServerRestart(t *testing.T) {
	s := tockdtest.Start(t)
	w := newWorkerT(t, s.Addr, WithReconnectBackoff(time.Millisecond, 20*time.Millisecond))
	ran := make(chan string, 10)
	if err := w.Handle("t", func(ctx context.Context, f *Fire) error { ran <- f.TaskID; return nil }); err != nil {
		t.Fatal(err)
	}
	subs := runWorker(t, w)
	s.Stop()
	s2 := tockdtest.Start(t, tockdtest.Addr(s.Addr))
	waitSub(t, subs) // redialled and subscribed again
	c := dialT(t, s2.Addr)
	tk := oneShot("r", "t", 0)
	tk.Retry = task.RetryPolicy{MaxAttempts: 1000, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	if _, err := c.Submit(bounded(t), tk, protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, "r", task.Succeeded)
	if id := <-ran; id != "r" {
		t.Errorf("ran %q", id)
	}
}
