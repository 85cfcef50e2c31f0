package tockdtest

import (
	"testing"
	"time"
)

// Limit bounds every wait in this package and in the tests that use it: for a reply,
// an event, a shutdown, a condition. Loopback answers in microseconds and an embedded
// etcd elects in ~0.1 s, but the tests share a loaded 2-core machine with the race
// detector on, so the bound is the one core's tests use (core/internal/waitfor, which
// server/ cannot import): a correct test never reaches it, a broken server fails at it
// instead of hanging.
const Limit = 30 * time.Second

// Poll is how often Eventually looks at its condition.
const Poll = time.Millisecond

// Eventually returns once cond (which must only observe) holds, looking at once and
// then every Poll; if Limit passes first it fails tb with what it waited for. Use it
// for states no event announces (a counter, a task's state read back); where there is
// an event (a channel, a reply), wait on that.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	EventuallyWithin(tb, what, Limit, cond)
}

// EventuallyWithin is Eventually with a bound of the test's own, for a test whose
// point is a timing goal (a new leader dispatching within an election's bound): limit
// states that goal, with its slack, where the test names it.
func EventuallyWithin(tb testing.TB, what string, limit time.Duration, cond func() bool) {
	tb.Helper()
	if cond() {
		return
	}
	tick := time.NewTicker(Poll)
	defer tick.Stop()
	timeout := time.After(limit)
	for {
		select {
		case <-tick.C:
			if cond() {
				return
			}
		case <-timeout:
			if !cond() { // the last look, so that a condition met at the bound still counts
				tb.Fatalf("%s: not within %v", what, limit)
			}
			return
		}
	}
}

// Receive returns the next value from ch, or fails tb, naming what it waited for, if
// none comes within Limit. It is the wait on an event that must come: a goroutine's
// result, a callback's report, a channel closed when something ended.
func Receive[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	return ReceiveWithin(tb, ch, what, Limit)
}

// ReceiveWithin is Receive with a bound of the test's own (see EventuallyWithin).
func ReceiveWithin[T any](tb testing.TB, ch <-chan T, what string, limit time.Duration) T {
	tb.Helper()
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	select {
	case v := <-ch:
		return v
	case <-timeout.C:
		tb.Fatalf("%s: not within %v", what, limit)
		var none T
		return none // a tb whose Fatalf returns
	}
}
