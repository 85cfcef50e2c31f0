package bench

import (
	"testing"
	"time"
)

// Size is a sub-benchmark parameter: its name as it appears in the benchmark name
// (pending=1e6) and its value.
type Size struct {
	Name string
	N    int
}

// Sizes returns full, or only short under -short.
func Sizes(short Size, full ...Size) []Size {
	if testing.Short() {
		return []Size{short}
	}
	return full
}

// Window is the span of FireWindow and Lateness deadlines and Idle's measuring window:
// 1 s, or 50 ms under -short.
func Window() time.Duration {
	if testing.Short() {
		return 50 * time.Millisecond
	}
	return time.Second
}
