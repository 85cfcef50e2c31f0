//go:build !linux

package clock

// newPreciseTimer has no precise implementation off Linux: Real uses runtime timers.
func newPreciseTimer(*Real) Timer { return nil }
