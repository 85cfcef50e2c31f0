package timer_test

import (
	"context"
	"time"

	"github.com/tock-sched/tock/core/timer"
)

// The README's "Embedding the core" snippet, compiled here (TestReadmeGoBlocks in
// core/task checks that README.md shows exactly the lines between the markers).
func Example_readme() {
	ctx := context.Background()
	var sessionID uint64
	expire := func(uint64) {}
	// README.md begin
	s, err := timer.New()                       // 1 ms tick, 4×GOMAXPROCS shards
	h, err := s.Register(func(ev timer.Event) { // register once, at start-up
		expire(ev.Arg) // ev.Due, ev.Now: deadline and collection time
	})
	t, err := s.After(30*time.Second, h, sessionID) // allocation-free, O(1)
	s.Cancel(t)                                     // true exactly when it prevented the run
	defer s.Close(ctx)
	// README.md end
	_, _ = t, err
}
