package client

import (
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
