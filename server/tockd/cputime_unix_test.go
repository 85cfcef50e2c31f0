//go:build unix

package tockd

import (
	"syscall"
	"time"
)

// processCPU returns the process's user + system CPU time (getrusage), and false where
// it cannot be read.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
