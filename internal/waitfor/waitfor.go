// Package waitfor is the test support every package of the module shares for waiting:
// the bound on waiting for something that must happen, a wait on a condition that no
// event announces, and a wait on a channel. core's tests use it directly, server's
// through tockdtest. Only tests import it.
//
// Invariant: every wait ends within its bound (Limit unless the caller names one):
// what it waited for happened, or tb has failed, naming it.
package waitfor

import (
	"testing"
	"time"
)

// Limit bounds every wait for an event that must come. It is generous because a loaded
// 2-core CI machine may not run the goroutines involved for a long while; correct code
// delivers in microseconds, broken code never.
const Limit = 30 * time.Second

// Poll is how often Until looks at its condition.
const Poll = time.Millisecond

// Until calls cond every Poll until it returns true, and fails tb, naming what it waited
// for, if that has not happened within Limit. It is for states no event announces (a
// counter, a goroutine count): where there is an event, wait on it instead.
func Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	UntilWithin(tb, what, Limit, cond)
}

// UntilWithin is Until with a bound of the test's own, for a test whose point is a
// timing goal (a new leader dispatching within an election's bound): limit states that
// goal, with its slack, where the test names it.
func UntilWithin(tb testing.TB, what string, limit time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, limit)
			return // a tb whose Fatalf returns
		}
		time.Sleep(Poll)
	}
}

// Receive returns the next value from ch, or fails tb, naming what it waited for, if
// none comes within Limit. It is the wait on an event that must come: a goroutine's
// result, a callback's report, a channel closed when something ended.
func Receive[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	return ReceiveWithin(tb, ch, what, Limit)
}

// ReceiveWithin is Receive with a bound of the test's own (see UntilWithin).
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
