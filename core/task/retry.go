package task

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// RetryPolicy says whether and when a failed attempt is tried again. The zero value is a
// single attempt with no retry. Every method applies WithDefaults first, so a policy with
// unset fields behaves as documented without being normalised by the caller.
type RetryPolicy struct {
	// MaxAttempts counts every attempt, the first included; 0 means 1 (no retry). At most
	// MaxAttemptsLimit.
	MaxAttempts int
	// InitialBackoff is the delay before the second attempt; 0 means DefaultInitialBackoff.
	InitialBackoff time.Duration
	// MaxBackoff caps every delay, before and after jitter; 0 means DefaultMaxBackoff, or
	// InitialBackoff if that is larger (so setting only InitialBackoff is never invalid).
	MaxBackoff time.Duration
	// Multiplier grows the delay per attempt: attempt n (n >= 2) waits
	// InitialBackoff * Multiplier^(n-2). 0 means DefaultMultiplier; 1 is a constant delay.
	Multiplier float64
	// Jitter in [0, 1] spreads retries of tasks that failed together: the delay is drawn
	// uniformly from [d*(1-Jitter), d*(1+Jitter)] and then capped at MaxBackoff.
	Jitter float64
	// MaxRetryDuration bounds the whole retry sequence: no retry starts later than the
	// first attempt's start plus this. 0 means no limit.
	MaxRetryDuration time.Duration
}

// Defaults and limits of a RetryPolicy.
const (
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 5 * time.Minute
	DefaultMultiplier     = 2.0
	// MaxAttemptsLimit bounds MaxAttempts: a task that fails a thousand times is failing
	// for a reason no further attempt will fix, and each attempt keeps a record.
	MaxAttemptsLimit = 1000
)

// WithDefaults returns p with every unset field given its documented default. O(1).
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 1
	}
	if p.InitialBackoff == 0 {
		p.InitialBackoff = DefaultInitialBackoff
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = max(DefaultMaxBackoff, p.InitialBackoff)
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultMultiplier
	}
	return p
}

// Validate returns nil for a usable policy (unset fields count as their defaults) and
// otherwise an error wrapping ErrInvalidRetry that names the first bad field. O(1).
func (p RetryPolicy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRetry}, args...)...)
	}
	switch {
	case p.MaxAttempts < 0:
		return bad("MaxAttempts %d is negative", p.MaxAttempts)
	case p.MaxAttempts > MaxAttemptsLimit:
		return bad("MaxAttempts %d exceeds %d", p.MaxAttempts, MaxAttemptsLimit)
	case p.InitialBackoff < 0:
		return bad("InitialBackoff %v is negative", p.InitialBackoff)
	case p.MaxBackoff < 0:
		return bad("MaxBackoff %v is negative", p.MaxBackoff)
	case p.MaxRetryDuration < 0:
		return bad("MaxRetryDuration %v is negative", p.MaxRetryDuration)
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0):
		return bad("Multiplier %v is not a finite number", p.Multiplier)
	case p.Multiplier != 0 && p.Multiplier < 1:
		return bad("Multiplier %v is below 1 (delays would shrink)", p.Multiplier)
	case !(p.Jitter >= 0 && p.Jitter <= 1): // also catches NaN
		return bad("Jitter %v is outside [0, 1]", p.Jitter)
	}
	d := p.WithDefaults()
	switch {
	case d.MaxBackoff < d.InitialBackoff:
		return bad("MaxBackoff %v is below InitialBackoff %v", d.MaxBackoff, d.InitialBackoff)
	case d.MaxBackoff > MaxHorizon:
		// The delay goes to the timer core, which accepts nothing beyond MaxHorizon.
		return bad("MaxBackoff %v exceeds MaxHorizon (%v)", d.MaxBackoff, MaxHorizon)
	}
	return nil
}

// NextDelay is the delay before attempt next (2 is the first retry; 1 and below have no
// delay), given u drawn uniformly from [0, 1). It is pure: the caller owns the randomness,
// so tests pin it and the engine keeps its generator off any shared lock.
//
// The base delay InitialBackoff * Multiplier^(next-2) is capped at MaxBackoff, jittered,
// and capped again. It is computed in float64, where overflow becomes +Inf and lands on
// the cap, so no Multiplier or attempt number can overflow or go negative; u outside
// [0, 1] and Jitter outside [0, 1] are clamped. Exact for power-of-two multipliers and
// whole-nanosecond results; otherwise truncated to the nanosecond. O(1), no allocation.
func (p RetryPolicy) NextDelay(next int, u float64) time.Duration {
	if next < 2 {
		return 0
	}
	p = p.WithDefaults()
	limit := float64(p.MaxBackoff)
	d := float64(p.InitialBackoff) * math.Pow(p.Multiplier, float64(next-2))
	if !(d < limit) { // NaN and +Inf included
		d = limit
	}
	j := clamp01(p.Jitter)
	d *= 1 - j + 2*j*clamp01(u)
	if !(d < limit) {
		// Returned as the Duration itself: converting float64(MaxBackoff) back could round
		// past it (and past MaxInt64 for the largest durations).
		return max(p.MaxBackoff, 0)
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(d)
}

// clamp01 limits x to [0, 1]; NaN becomes 0.
func clamp01(x float64) float64 {
	switch {
	case x >= 1:
		return 1
	case x > 0:
		return x
	}
	return 0
}

// Decide says whether the task retries after an attempt failed with err, and after what
// delay. attempts counts the attempts made so far, the failed one included (values below
// 1 count as 1); firstStart is when the first attempt started and now is when this one
// ended; u is as for NextDelay. In order:
//
//   - err == nil: no retry ("no error"); there is nothing to retry.
//   - IsNonRetryable(err): "non-retryable error".
//   - attempts >= MaxAttempts: "attempts exhausted (3 of 3)".
//   - the retry would start (now + delay) later than firstStart + MaxRetryDuration:
//     "max retry duration exceeded (...)". Exactly at the limit still retries.
//   - otherwise retry=true, delay=NextDelay(attempts+1, u), reason "retry 2 of 3 in 1s".
//
// The reason is meant for people (the dead letter records it); its leading words are
// stable. O(1); formatting the reason allocates.
func (p RetryPolicy) Decide(attempts int, err error, firstStart, now time.Time, u float64) (retry bool, delay time.Duration, reason string) {
	p = p.WithDefaults()
	attempts = max(attempts, 1)
	switch {
	case err == nil:
		return false, 0, "no error"
	case IsNonRetryable(err):
		return false, 0, "non-retryable error"
	case attempts >= p.MaxAttempts:
		return false, 0, fmt.Sprintf("attempts exhausted (%d of %d)", attempts, p.MaxAttempts)
	}
	delay = p.NextDelay(attempts+1, u)
	if p.MaxRetryDuration > 0 {
		if at := now.Add(delay).Sub(firstStart); at > p.MaxRetryDuration {
			return false, 0, fmt.Sprintf("max retry duration exceeded (the retry would start %v after the first attempt; limit %v)", at, p.MaxRetryDuration)
		}
	}
	return true, delay, fmt.Sprintf("retry %d of %d in %v", attempts+1, p.MaxAttempts, delay)
}

// nonRetryableError carries a handler's error through the engine unchanged while marking
// it as not worth retrying.
type nonRetryableError struct{ err error }

func (e *nonRetryableError) Error() string { return e.err.Error() }

// Unwrap lets errors.Is and errors.As reach the original error.
func (e *nonRetryableError) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrNonRetryable) true, so one check covers both ways of
// marking an error.
func (e *nonRetryableError) Is(target error) bool { return target == ErrNonRetryable }

// NonRetryable marks err as not worth retrying: a failed attempt that returns it goes
// straight to the dead-letter queue. The message is err's own; errors.Is and errors.As
// still see err. NonRetryable(nil) is nil.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryableError{err: err}
}

// IsNonRetryable reports whether err, or any error it wraps, was marked by NonRetryable or
// wraps ErrNonRetryable.
func IsNonRetryable(err error) bool { return errors.Is(err, ErrNonRetryable) }
