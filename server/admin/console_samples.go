package admin

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tock-sched/tock/server/tockd"
)

// sample is what the console's charts need of one Stats snapshot.
type sample struct {
	at                           time.Time
	submitted, succeeded, failed uint64 // engine counters (cumulative)
	lateCounts                   []uint64
	lateBounds                   []time.Duration // shared with the snapshot's: never written
	lateCount                    uint64
	lateSum                      time.Duration
}

func sampleOf(at time.Time, s *tockd.Stats) sample {
	return sample{at: at, submitted: s.Engine.Submitted, succeeded: s.Engine.Succeeded, failed: s.Engine.Failed,
		lateCounts: slices.Clone(s.Engine.Lateness.Counts), lateBounds: s.Engine.Lateness.Bounds,
		lateCount: s.Engine.Lateness.Count, lateSum: s.Engine.Lateness.Sum}
}

// samples is a ring of the latest samples, oldest first: the console's memory of the
// last minutes. Invariant: 0 <= n <= len(ring); the samples are ring[(head+i) %
// len(ring)] for i in [0, n), in the order added. Memory: len(ring) samples of about
// 40 words (the lateness buckets) each. Concurrency: guarded by mu.
type samples struct {
	mu   sync.Mutex
	ring []sample
	head int
	n    int
}

func newSamples(size int) *samples { return &samples{ring: make([]sample, size)} }

// add appends s, dropping the oldest sample when the ring is full. Cost: O(1).
func (r *samples) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n < len(r.ring) {
		r.ring[(r.head+r.n)%len(r.ring)] = s
		r.n++
		return
	}
	r.ring[r.head] = s
	r.head = (r.head + 1) % len(r.ring)
}

// list returns the samples, oldest first. Cost: O(len(ring)), one allocation.
func (r *samples) list() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]sample, r.n)
	for i := range out {
		out[i] = r.ring[(r.head+i)%len(r.ring)]
	}
	return out
}

// interval is what happened between two consecutive samples: rates per second, and the
// lateness (start minus due time) of the attempts started in between.
type interval struct {
	end                          time.Time
	submitted, succeeded, failed float64 // per second
	started                      uint64  // attempts whose lateness was observed
	lateMean                     time.Duration
	// lateP99 is the upper bound of the histogram bucket holding the 99th percentile;
	// lateOver marks one beyond the last bound (lateP99 is then that bound).
	lateP99  time.Duration
	lateOver bool
}

// intervals turns samples (oldest first) into the intervals between them. A counter
// that went down (the engine was replaced) gives that interval zero rates rather than a
// negative one. Cost: O(samples × buckets).
func intervals(ss []sample) []interval {
	var out []interval
	for i := 1; i < len(ss); i++ {
		a, b := &ss[i-1], &ss[i]
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0 {
			continue
		}
		iv := interval{end: b.at,
			submitted: rate(a.submitted, b.submitted, dt), succeeded: rate(a.succeeded, b.succeeded, dt),
			failed: rate(a.failed, b.failed, dt)}
		if b.lateCount > a.lateCount && len(a.lateCounts) == len(b.lateCounts) {
			iv.started = b.lateCount - a.lateCount
			iv.lateMean = (b.lateSum - a.lateSum) / time.Duration(iv.started)
			iv.lateP99, iv.lateOver = p99(a, b, iv.started)
		}
		out = append(out, iv)
	}
	return out
}

func rate(a, b uint64, dt float64) float64 {
	if b < a {
		return 0
	}
	return float64(b-a) / dt
}

// p99 is the upper bound of the first bucket whose count (cumulative, between a and b)
// reaches 99% of n; past every bound, the last bound and over.
func p99(a, b *sample, n uint64) (time.Duration, bool) {
	want := (n*99 + 99) / 100 // ceil(0.99 n)
	for i, c := range b.lateCounts {
		if c-a.lateCounts[i] >= want {
			return b.lateBounds[i], false
		}
	}
	if len(b.lateBounds) == 0 {
		return 0, true
	}
	return b.lateBounds[len(b.lateBounds)-1], true
}

// sampleLoop adds a sample of snapshot every interval until ctx ends, the first at once.
// It calls snapshot once per tick: the cost of one /metrics scrape per interval.
func sampleLoop(ctx context.Context, r *samples, every time.Duration, snapshot func() tockd.Stats) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		st := snapshot()
		r.add(sampleOf(time.Now(), &st))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
