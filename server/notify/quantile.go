package notify

import (
	"math"
	"sort"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// Quantile estimates the q-quantile (0 < q <= 1) of the observations in h the way
// Prometheus's histogram_quantile does: find the bucket holding the rank q*Count, then
// interpolate linearly between its lower and upper bounds (the first bucket's lower bound
// is 0). When the rank falls above every finite bound, the highest finite bound is the
// answer. ok is false when h has no observations, no bounds, or q is out of range.
// Counts that are not monotonic are raised to their running maximum first (as Prometheus
// does). Cost: O(len(h.Bounds)).
func Quantile(q float64, h task.Histogram) (d time.Duration, ok bool) {
	if !(q > 0 && q <= 1) || h.Count == 0 || len(h.Bounds) == 0 || len(h.Counts) != len(h.Bounds) {
		return 0, false
	}
	counts := make([]float64, len(h.Counts))
	running := 0.0
	for i, c := range h.Counts {
		running = math.Max(running, float64(c))
		counts[i] = running
	}
	total := math.Max(running, float64(h.Count)) // the +Inf bucket
	rank := q * total
	b := sort.Search(len(counts), func(i int) bool { return counts[i] >= rank })
	if b == len(counts) { // in the +Inf bucket
		return h.Bounds[len(h.Bounds)-1], true
	}
	if b == 0 && h.Bounds[0] <= 0 {
		return h.Bounds[0], true
	}
	var start, below float64
	if b > 0 {
		start, below = float64(h.Bounds[b-1]), counts[b-1]
	}
	end := float64(h.Bounds[b])
	in := counts[b] - below // > 0: counts[b] >= rank > 0 and counts[b-1] < rank
	return time.Duration(start + (end-start)*((rank-below)/in)), true
}

// delta is cur minus prev, bucket by bucket: the observations between two snapshots of
// a cumulative histogram. A snapshot with other bounds, or with any count lower than
// before (the counters were reset), is taken as all new. Cost: O(len(cur.Bounds)).
func delta(cur, prev task.Histogram) task.Histogram {
	if len(prev.Counts) != len(cur.Counts) || cur.Count < prev.Count {
		return cur
	}
	d := task.Histogram{Bounds: cur.Bounds, Counts: make([]uint64, len(cur.Counts)), Count: cur.Count - prev.Count, Sum: cur.Sum - prev.Sum}
	for i := range cur.Counts {
		if cur.Counts[i] < prev.Counts[i] || cur.Bounds[i] != prev.Bounds[i] {
			return cur
		}
		d.Counts[i] = cur.Counts[i] - prev.Counts[i]
	}
	return d
}
