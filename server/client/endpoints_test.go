package client

import (
	"slices"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// Once a WELCOME stated a heartbeat deadline (the client speaks to a cluster that fails
// over), the pause before the next try is the backoff, bounded by failoverPause and by
// the heartbeat interval: the next leader is found within about failoverPause of its
// election, however far the backoff has grown. Before any WELCOME it is the backoff.
func TestRetryPauseIsBoundedOnceAClusterIsKnown(t *testing.T) {
	for _, tc := range []struct {
		name              string
		deadline, backoff time.Duration
		want              time.Duration
	}{
		{"no WELCOME yet", 0, 5 * time.Second, 5 * time.Second},
		{"backoff below the bound", 1500 * time.Millisecond, failoverPause / 2, failoverPause / 2},
		{"backoff above it", 1500 * time.Millisecond, 5 * time.Second, failoverPause},
		{"heartbeat interval below it", protocol.HeartbeatMisses * failoverPause / 2, 5 * time.Second, failoverPause / 2},
	} {
		e, err := newEndpoints("127.0.0.1:1")
		if err != nil {
			t.Fatal(err)
		}
		e.setDeadline(tc.deadline)
		if got := e.retryPause(tc.backoff); got != tc.want {
			t.Errorf("%s: retryPause(%v) with a heartbeat deadline of %v = %v, want %v", tc.name, tc.backoff, tc.deadline, got, tc.want)
		}
	}
}

// An address that went silent (quiet) is skipped for one heartbeat deadline: pick passes
// over it in turn, and a NOT_LEADER naming it is not followed (redirect reports false, so
// that the caller pauses); at the deadline, exactly, it is dialled again. When every
// address went silent, pick goes round them as before. Boundaries on a fake clock:
// deadline-1ns, deadline.
func TestSilentAddressIsSkippedForADeadline(t *testing.T) {
	const deadline = 1500 * time.Millisecond
	e, err := newEndpoints("a,b,c")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	e.now = func() time.Time { return now }
	e.quiet("a") // no WELCOME has stated a heartbeat: nothing to go by, nothing skipped
	if got := e.pick(); got != "a" {
		t.Fatalf("pick with no deadline known = %q, want a", got)
	}
	e.setDeadline(deadline)
	e.quiet("a")
	var got []string
	for range 4 {
		got = append(got, e.pick())
	}
	if want := []string{"b", "c", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("picks while a is silent = %v, want %v", got, want)
	}
	if e.redirect("a") {
		t.Fatal("redirect to the silent a reports it will be dialled")
	}
	if got := e.pick(); got == "a" {
		t.Fatal("pick dialled the silent a after a NOT_LEADER named it")
	}
	if !e.redirect("b") || e.pick() != "b" {
		t.Fatal("a NOT_LEADER naming b, not silent, is not followed")
	}
	now = now.Add(deadline - time.Nanosecond)
	if e.redirect("a") {
		t.Fatal("a is followed 1 ns before its deadline ran out")
	}
	now = now.Add(time.Nanosecond)
	if !e.redirect("a") || e.pick() != "a" {
		t.Fatal("a is not followed once its deadline ran out")
	}
	for _, a := range []string{"a", "b", "c"} {
		e.quiet(a)
	}
	got = got[:0]
	for range 3 {
		got = append(got, e.pick())
	}
	if slices.Sort(got); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("picks with every address silent = %v, want each once", got)
	}
}
