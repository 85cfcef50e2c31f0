// Package waitfor is the test support that core's packages share: the bound on waiting
// for something that must happen, and a wait on a condition that no event announces.
// Only tests import it.
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
	until(tb, what, Limit, cond)
}

func until(tb testing.TB, what string, limit time.Duration, cond func() bool) {
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
