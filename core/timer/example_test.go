package timer_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tock-sched/tock/core/timer"
)

// A session store expires idle sessions: each session's timer is pushed back on every
// request (Reset) and cancelled on logout; expiry runs a registered handler with the
// session number as its argument, so scheduling allocates nothing.
func Example() {
	s, err := timer.New()
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())

	expired := make(chan uint64, 2)
	expire, _ := s.Register(func(ev timer.Event) { expired <- ev.Arg })

	alice, _ := s.After(20*time.Millisecond, expire, 1)
	bob, _ := s.After(20*time.Millisecond, expire, 2)

	s.Reset(alice, 40*time.Millisecond) // alice made a request: her session lives on
	fmt.Println("bob logged out:", s.Cancel(bob))

	fmt.Println("expired session:", <-expired)
	fmt.Println("cancel after expiry:", s.Cancel(alice))
	// Output:
	// bob logged out: true
	// expired session: 1
	// cancel after expiry: false
}
