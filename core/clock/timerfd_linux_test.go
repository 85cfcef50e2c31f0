//go:build linux

package clock

import "testing"

func TestRealUsesTimerfdOnLinux(t *testing.T) {
	tm := NewReal().NewTimer()
	defer tm.Close()
	if _, ok := tm.(*preciseTimer); !ok {
		t.Fatalf("NewTimer returned %T, want the timerfd-backed timer", tm)
	}
}
