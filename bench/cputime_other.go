//go:build !unix

package bench

import "time"

// cpuTime is not available here; Idle skips.
func cpuTime() (time.Duration, bool) { return 0, false }
