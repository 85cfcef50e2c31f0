//go:build linux

package clock

import (
	"testing"
	"time"
)

func TestRealUsesTimerfdOnLinux(t *testing.T) {
	tm := NewReal().NewTimer()
	defer tm.Close()
	if _, ok := tm.(*preciseTimer); !ok {
		t.Fatalf("NewTimer returned %T, want the timerfd-backed timer", tm)
	}
}

// TestPreciseTimerDeliversOncePerArming checks that the timerfd and its backup runtime
// timer, both armed for one deadline, wake the user once: the second path must not leave
// a second value behind.
func TestPreciseTimerDeliversOncePerArming(t *testing.T) {
	c := NewReal()
	tm := c.NewTimer().(*preciseTimer)
	defer tm.Close()
	for i := 0; i < 20; i++ {
		tm.ResetAt(c.Now() + int64(200*time.Microsecond))
		<-tm.C()
		// Wait until both paths have fired: the backup fires no earlier than the deadline,
		// the timerfd likewise; 20 ms is far beyond both on any machine.
		time.Sleep(20 * time.Millisecond)
		select {
		case <-tm.C():
			t.Fatalf("arming %d delivered twice", i)
		default:
		}
	}
}
