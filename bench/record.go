package bench

import (
	"slices"
	"sync/atomic"
)

// recorder collects one burst of fires: each callback claims the next index with one
// atomic add and writes its lateness and clock reading there, so recording costs every
// implementation the same and allocates nothing.
type recorder struct {
	now  func() int64
	late []int64 // late[k]: the k-th callback's clock reading minus its deadline
	at   []int64 // at[k]: the k-th callback's clock reading
	n    atomic.Int64
	done chan struct{} // closed by the callback that completes the burst
}

func newRecorder(n int) *recorder {
	return &recorder{late: make([]int64, n), at: make([]int64, n)}
}

// reset readies r for the next burst; no callback may be running.
func (r *recorder) reset() {
	r.n.Store(0)
	r.done = make(chan struct{})
}

// fire is the callback of every timer in a burst.
func (r *recorder) fire(_ int, due int64) {
	now := r.now()
	k := r.n.Add(1) - 1
	if k >= int64(len(r.late)) {
		return // a timer fired twice: summary shows too few distinct fires
	}
	r.late[k], r.at[k] = now-due, now
	if k == int64(len(r.late))-1 {
		close(r.done)
	}
}

// burstStats summarises one burst.
type burstStats struct {
	firesPerSec             float64
	p50, p99, p999, maxLate float64 // nanoseconds
	early                   int
}

// summary computes the burst's statistics; start is the first deadline.
func (r *recorder) summary(start int64) burstStats {
	late := slices.Clone(r.late)
	slices.Sort(late)
	early, _ := slices.BinarySearch(late, 0) // entries < 0
	last := slices.Max(r.at)
	n := len(late)
	q := func(p float64) float64 { return float64(late[int(p*float64(n-1))]) }
	return burstStats{
		firesPerSec: float64(n) / (float64(last-start) / 1e9),
		p50:         q(0.50),
		p99:         q(0.99),
		p999:        q(0.999),
		maxLate:     float64(late[n-1]),
		early:       early,
	}
}
