package waitfor

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestUntil returns once another goroutine makes the condition true, checking it again
// after each poll.
func TestUntil(t *testing.T) {
	var n atomic.Int32
	calls := 0
	go n.Store(1)
	Until(t, "n set", func() bool { calls++; return n.Load() == 1 })
	if calls < 1 || n.Load() != 1 {
		t.Fatalf("returned after %d calls with n = %d", calls, n.Load())
	}
}

// fatalTB records Fatalf instead of stopping the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

// TestUntilGivesUp: a condition that never holds fails once the limit has passed, with
// the thing waited for named.
func TestUntilGivesUp(t *testing.T) {
	tb := &fatalTB{TB: t}
	start := time.Now()
	until(tb, "never", 20*time.Millisecond, func() bool { return false })
	if tb.msg != "never: not within 20ms" || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("Fatalf %q after %v", tb.msg, time.Since(start))
	}
}
