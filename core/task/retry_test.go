package task

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// justBelowOne is the largest u NextDelay can be given: rand's Float64 never returns 1.
var justBelowOne = math.Nextafter(1, 0)

func TestNextDelayExact(t *testing.T) {
	capped := RetryPolicy{InitialBackoff: time.Second, Multiplier: 2, MaxBackoff: 60 * time.Second}
	tests := []struct {
		name string
		p    RetryPolicy
		next int
		want time.Duration
	}{
		{"first attempt has no delay", capped, 1, 0},
		{"below 1 has no delay", capped, -5, 0},
		{"first retry", capped, 2, time.Second},
		{"x2", capped, 3, 2 * time.Second},
		{"x4", capped, 4, 4 * time.Second},
		{"x8", capped, 5, 8 * time.Second},
		{"x16", capped, 6, 16 * time.Second},
		{"cap-1: 32s", capped, 7, 32 * time.Second},
		{"cap: 64s capped to 60s", capped, 8, 60 * time.Second},
		{"cap+1", capped, 9, 60 * time.Second},
		{"far past the cap", capped, 1000, 60 * time.Second},

		// The cap reached exactly: 2^5 s == MaxBackoff.
		{"exact cap-1", RetryPolicy{InitialBackoff: time.Second, MaxBackoff: 32 * time.Second}, 6, 16 * time.Second},
		{"exact cap", RetryPolicy{InitialBackoff: time.Second, MaxBackoff: 32 * time.Second}, 7, 32 * time.Second},
		{"exact cap+1", RetryPolicy{InitialBackoff: time.Second, MaxBackoff: 32 * time.Second}, 8, 32 * time.Second},

		// Multiplier 3 from 100ms, cap 10s: 0.1, 0.3, 0.9, 2.7, 8.1, then 24.3 -> 10.
		{"x3 a", RetryPolicy{InitialBackoff: 100 * time.Millisecond, Multiplier: 3, MaxBackoff: 10 * time.Second}, 2, 100 * time.Millisecond},
		{"x3 b", RetryPolicy{InitialBackoff: 100 * time.Millisecond, Multiplier: 3, MaxBackoff: 10 * time.Second}, 3, 300 * time.Millisecond},
		{"x3 c", RetryPolicy{InitialBackoff: 100 * time.Millisecond, Multiplier: 3, MaxBackoff: 10 * time.Second}, 4, 900 * time.Millisecond},
		{"x3 d", RetryPolicy{InitialBackoff: 100 * time.Millisecond, Multiplier: 3, MaxBackoff: 10 * time.Second}, 5, 2700 * time.Millisecond},
		{"x3 cap-1", RetryPolicy{InitialBackoff: 100 * time.Millisecond, Multiplier: 3, MaxBackoff: 10 * time.Second}, 6, 8100 * time.Millisecond},
		{"x3 cap", RetryPolicy{InitialBackoff: 100 * time.Millisecond, Multiplier: 3, MaxBackoff: 10 * time.Second}, 7, 10 * time.Second},

		{"multiplier 1 is constant", RetryPolicy{InitialBackoff: 3 * time.Second, Multiplier: 1}, 50, 3 * time.Second},
		{"multiplier 1.5", RetryPolicy{InitialBackoff: time.Second, Multiplier: 1.5}, 5, 3375 * time.Millisecond},

		// The zero policy: 1s doubling, capped at 5m (256s at attempt 10, 512s -> 300s at 11).
		{"defaults first retry", RetryPolicy{}, 2, time.Second},
		{"defaults cap-1", RetryPolicy{}, 10, 256 * time.Second},
		{"defaults cap", RetryPolicy{}, 11, 5 * time.Minute},
		{"defaults cap+1", RetryPolicy{}, 12, 5 * time.Minute},
		// Only InitialBackoff set above the default cap: the cap follows it.
		{"initial above default cap", RetryPolicy{InitialBackoff: 10 * time.Minute}, 3, 10 * time.Minute},
	}
	for _, tc := range tests {
		for _, u := range []float64{0, 0.5, justBelowOne} { // Jitter 0: u must not matter
			if got := tc.p.NextDelay(tc.next, u); got != tc.want {
				t.Errorf("%s: NextDelay(%d, %v) = %v, want %v", tc.name, tc.next, u, got, tc.want)
			}
		}
	}
}

func TestNextDelayJitterBounds(t *testing.T) {
	p := RetryPolicy{InitialBackoff: 10 * time.Second, MaxBackoff: time.Hour, Jitter: 0.5}
	tests := []struct {
		name     string
		p        RetryPolicy
		next     int
		u        float64
		min, max time.Duration // inclusive
	}{
		{"u=0 is the low bound", p, 2, 0, 5 * time.Second, 5 * time.Second},
		{"u=0.5 is the base", p, 2, 0.5, 10 * time.Second, 10 * time.Second},
		// The interval is closed: float rounding may land u->1 on the bound itself.
		{"u->1 approaches the high bound", p, 2, justBelowOne, 15*time.Second - time.Microsecond, 15 * time.Second},
		{"second retry scales", p, 3, 0, 10 * time.Second, 10 * time.Second},
		{"jitter 1, u=0 is zero", RetryPolicy{InitialBackoff: time.Second, Jitter: 1}, 2, 0, 0, 0},
		{"jitter 1, u->1 nearly doubles", RetryPolicy{InitialBackoff: time.Second, Jitter: 1}, 2, justBelowOne, 2*time.Second - time.Microsecond, 2 * time.Second},
		// Capped after jitter: 10s*1.4 = 14s > 12s.
		{"capped after jitter", RetryPolicy{InitialBackoff: 10 * time.Second, MaxBackoff: 12 * time.Second, Jitter: 0.5}, 2, 0.9, 12 * time.Second, 12 * time.Second},
		// Capped before jitter: base 80s -> 12s, then jitter down to 6s.
		{"capped before jitter", RetryPolicy{InitialBackoff: 10 * time.Second, MaxBackoff: 12 * time.Second, Jitter: 0.5}, 5, 0, 6 * time.Second, 6 * time.Second},
		{"u above 1 is clamped", p, 2, 7, 15 * time.Second, 15 * time.Second},
		{"negative u is clamped", p, 2, -3, 5 * time.Second, 5 * time.Second},
		{"NaN u counts as 0", p, 2, math.NaN(), 5 * time.Second, 5 * time.Second},
	}
	for _, tc := range tests {
		if got := tc.p.NextDelay(tc.next, tc.u); got < tc.min || got > tc.max {
			t.Errorf("%s: NextDelay(%d, %v) = %v, want in [%v, %v]", tc.name, tc.next, tc.u, got, tc.min, tc.max)
		}
	}

	// Seeded draws stay inside [d*(1-J), min(d*(1+J), MaxBackoff)] at every attempt.
	rng := rand.New(rand.NewPCG(1, 2))
	q := RetryPolicy{InitialBackoff: 100 * time.Millisecond, Multiplier: 2, MaxBackoff: 30 * time.Second, Jitter: 0.3}
	for next := 2; next <= 20; next++ {
		base := min(float64(q.InitialBackoff)*math.Pow(2, float64(next-2)), float64(q.MaxBackoff))
		lo, hi := time.Duration(base*0.7)-1, min(time.Duration(base*1.3)+1, q.MaxBackoff)
		for range 1000 {
			u := rng.Float64()
			if got := q.NextDelay(next, u); got < lo || got > hi {
				t.Fatalf("NextDelay(%d, %v) = %v outside [%v, %v]", next, u, got, lo, hi)
			}
		}
	}
}

func TestNextDelayOverflow(t *testing.T) {
	tests := []struct {
		name string
		p    RetryPolicy
		next int
		want time.Duration
	}{
		{"multiplier 10, attempt 1000", RetryPolicy{InitialBackoff: time.Second, Multiplier: 10, MaxBackoff: time.Hour}, 1000, time.Hour},
		{"multiplier 1e308", RetryPolicy{InitialBackoff: time.Second, Multiplier: 1e308, MaxBackoff: time.Hour}, 3, time.Hour},
		{"attempt MaxInt", RetryPolicy{InitialBackoff: time.Second, MaxBackoff: time.Hour}, math.MaxInt, time.Hour},
		{"cap at MaxHorizon", RetryPolicy{InitialBackoff: MaxHorizon, MaxBackoff: MaxHorizon, Jitter: 1}, 1000, MaxHorizon},
		// Beyond what Validate allows, NextDelay still must not wrap: the cap is returned
		// as the Duration itself, not via float64 (which would round past MaxInt64).
		{"cap at MaxInt64", RetryPolicy{InitialBackoff: time.Second, MaxBackoff: math.MaxInt64}, 100, math.MaxInt64},
		{"cap at MaxInt64 with jitter", RetryPolicy{InitialBackoff: math.MaxInt64, MaxBackoff: math.MaxInt64, Jitter: 1}, 2, math.MaxInt64},
	}
	for _, tc := range tests {
		for _, u := range []float64{0.5, justBelowOne} {
			if got := tc.p.NextDelay(tc.next, u); got != tc.want {
				t.Errorf("%s: NextDelay(%d, %v) = %v, want %v", tc.name, tc.next, u, got, tc.want)
			}
		}
	}
	// Invalid policies (which Validate rejects) still give a delay in [0, max(MaxBackoff, 0)].
	for _, p := range []RetryPolicy{
		{InitialBackoff: -time.Second},
		{MaxBackoff: -time.Second, InitialBackoff: time.Second},
		{Multiplier: math.NaN()},
		{Multiplier: math.Inf(1)},
		{Multiplier: -2},
		{Multiplier: 0.5},
		{Jitter: math.NaN()},
		{Jitter: -1},
		{Jitter: 5},
	} {
		for _, next := range []int{2, 3, 60, 1000} {
			for _, u := range []float64{0, 0.5, justBelowOne} {
				if got := p.NextDelay(next, u); got < 0 || got > max(p.WithDefaults().MaxBackoff, 0) {
					t.Errorf("%+v: NextDelay(%d, %v) = %v", p, next, u, got)
				}
			}
		}
	}
}

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	three := RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second}
	limited := RetryPolicy{MaxAttempts: 10, InitialBackoff: 2 * time.Second, MaxRetryDuration: 10 * time.Second}
	failure := errors.New("boom")
	tests := []struct {
		name       string
		p          RetryPolicy
		attempts   int
		err        error
		now        time.Time
		retry      bool
		delay      time.Duration
		reasonHead string
	}{
		{"first failure retries", three, 1, failure, t0, true, time.Second, "retry 2 of 3 in 1s"},
		{"second failure retries longer", three, 2, failure, t0, true, 2 * time.Second, "retry 3 of 3 in 2s"},
		{"third failure is the last", three, 3, failure, t0, false, 0, "attempts exhausted (3 of 3)"},
		{"beyond the last", three, 7, failure, t0, false, 0, "attempts exhausted (7 of 3)"},
		{"attempts 0 counts as 1", three, 0, failure, t0, true, time.Second, "retry 2 of 3"},
		{"zero policy never retries", RetryPolicy{}, 1, failure, t0, false, 0, "attempts exhausted (1 of 1)"},
		{"nil error", three, 1, nil, t0, false, 0, "no error"},
		{"non-retryable", three, 1, NonRetryable(failure), t0, false, 0, "non-retryable error"},
		{"non-retryable wrapped by %w", three, 1, fmt.Errorf("handler: %w", NonRetryable(failure)), t0, false, 0, "non-retryable error"},
		{"ErrNonRetryable wrapped by %w", three, 1, fmt.Errorf("%w: bad payload", ErrNonRetryable), t0, false, 0, "non-retryable error"},
		{"non-retryable inside errors.Join", three, 1, errors.Join(failure, NonRetryable(io.EOF)), t0, false, 0, "non-retryable error"},
		{"non-retryable wins over exhaustion", three, 3, NonRetryable(failure), t0, false, 0, "non-retryable error"},
		// The retry after attempt 1 starts at now + 2s; the limit is t0 + 10s.
		{"within max retry duration", limited, 1, failure, t0.Add(7 * time.Second), true, 2 * time.Second, "retry 2 of 10"},
		{"exactly at max retry duration", limited, 1, failure, t0.Add(8 * time.Second), true, 2 * time.Second, "retry 2 of 10"},
		{"1ns past max retry duration", limited, 1, failure, t0.Add(8*time.Second + 1), false, 0, "max retry duration exceeded (the retry would start 10.000000001s after the first attempt; limit 10s)"},
		{"later attempts measure from the first start", limited, 2, failure, t0.Add(6 * time.Second), true, 4 * time.Second, "retry 3 of 10"},
		{"later attempts past the limit", limited, 2, failure, t0.Add(6*time.Second + 1), false, 0, "max retry duration exceeded"},
	}
	for _, tc := range tests {
		retry, delay, reason := tc.p.Decide(tc.attempts, tc.err, t0, tc.now, 0.5)
		if retry != tc.retry || delay != tc.delay || !strings.HasPrefix(reason, tc.reasonHead) {
			t.Errorf("%s: Decide = (%v, %v, %q), want (%v, %v, %q...)", tc.name, retry, delay, reason, tc.retry, tc.delay, tc.reasonHead)
		}
	}
}

func TestNonRetryable(t *testing.T) {
	if NonRetryable(nil) != nil {
		t.Fatal("NonRetryable(nil) != nil")
	}
	if IsNonRetryable(nil) || IsNonRetryable(io.EOF) || IsNonRetryable(fmt.Errorf("x: %w", io.EOF)) {
		t.Fatal("plain errors reported non-retryable")
	}
	orig := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
	for _, err := range []error{
		NonRetryable(orig),
		fmt.Errorf("handler: %w", NonRetryable(orig)),
		NonRetryable(fmt.Errorf("handler: %w", orig)),
		fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", NonRetryable(orig))),
	} {
		if !IsNonRetryable(err) || !errors.Is(err, ErrNonRetryable) {
			t.Errorf("%v: not seen as non-retryable", err)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v: errors.Is no longer sees the original", err)
		}
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe != orig {
			t.Errorf("%v: errors.As no longer finds the original", err)
		}
	}
	if got := NonRetryable(orig).Error(); got != orig.Error() {
		t.Errorf("message %q, want the original's %q", got, orig.Error())
	}
}

func TestRetryValidate(t *testing.T) {
	valid := []RetryPolicy{
		{},
		{MaxAttempts: 1},
		{MaxAttempts: MaxAttemptsLimit, InitialBackoff: time.Millisecond, MaxBackoff: time.Hour, Multiplier: 1, Jitter: 1, MaxRetryDuration: time.Hour},
		{InitialBackoff: 10 * time.Minute}, // MaxBackoff defaults up to it
		{InitialBackoff: time.Second, MaxBackoff: time.Second},
		{MaxBackoff: MaxHorizon},
		{Jitter: 0.25},
		{Multiplier: 1e300},
	}
	for _, p := range valid {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	invalid := []struct {
		p     RetryPolicy
		field string
	}{
		{RetryPolicy{MaxAttempts: -1}, "MaxAttempts -1 is negative"},
		{RetryPolicy{MaxAttempts: MaxAttemptsLimit + 1}, "MaxAttempts 1001 exceeds 1000"},
		{RetryPolicy{InitialBackoff: -time.Second}, "InitialBackoff -1s"},
		{RetryPolicy{MaxBackoff: -time.Second}, "MaxBackoff -1s"},
		{RetryPolicy{MaxRetryDuration: -time.Second}, "MaxRetryDuration -1s"},
		{RetryPolicy{Multiplier: 0.5}, "Multiplier 0.5 is below 1"},
		{RetryPolicy{Multiplier: -1}, "Multiplier -1"},
		{RetryPolicy{Multiplier: math.NaN()}, "Multiplier NaN"},
		{RetryPolicy{Multiplier: math.Inf(1)}, "Multiplier +Inf"},
		{RetryPolicy{Jitter: -0.1}, "Jitter -0.1 is outside [0, 1]"},
		{RetryPolicy{Jitter: 1.5}, "Jitter 1.5"},
		{RetryPolicy{Jitter: math.NaN()}, "Jitter NaN"},
		{RetryPolicy{InitialBackoff: 2 * time.Second, MaxBackoff: time.Second}, "MaxBackoff 1s is below InitialBackoff 2s"},
		{RetryPolicy{MaxBackoff: MaxHorizon + 1}, "MaxBackoff"},
	}
	for _, tc := range invalid {
		err := tc.p.Validate()
		if !errors.Is(err, ErrInvalidRetry) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: Validate() = %v, want ErrInvalidRetry naming %q", tc.p, err, tc.field)
		}
	}
}

func TestRetryWithDefaults(t *testing.T) {
	tests := []struct{ in, want RetryPolicy }{
		{RetryPolicy{}, RetryPolicy{MaxAttempts: 1, InitialBackoff: time.Second, MaxBackoff: 5 * time.Minute, Multiplier: 2}},
		{RetryPolicy{InitialBackoff: time.Hour}, RetryPolicy{MaxAttempts: 1, InitialBackoff: time.Hour, MaxBackoff: time.Hour, Multiplier: 2}},
		{
			RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: time.Second, Multiplier: 1.5, Jitter: 0.2, MaxRetryDuration: time.Minute},
			RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: time.Second, Multiplier: 1.5, Jitter: 0.2, MaxRetryDuration: time.Minute},
		},
	}
	for _, tc := range tests {
		if got := tc.in.WithDefaults(); got != tc.want {
			t.Errorf("%+v.WithDefaults() = %+v, want %+v", tc.in, got, tc.want)
		}
		if got := tc.in.WithDefaults().WithDefaults(); got != tc.want {
			t.Errorf("WithDefaults is not idempotent for %+v", tc.in)
		}
	}
}

func TestRetryNoAllocs(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 5, Jitter: 0.2}
	if n := testing.AllocsPerRun(100, func() { p.NextDelay(4, 0.3); p.WithDefaults() }); n != 0 {
		t.Errorf("NextDelay: %v allocations", n)
	}
	err := NonRetryable(io.EOF)
	if n := testing.AllocsPerRun(100, func() { IsNonRetryable(err); IsNonRetryable(io.EOF) }); n != 0 {
		t.Errorf("IsNonRetryable: %v allocations", n)
	}
}
