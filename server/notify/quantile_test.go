package notify

import (
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
)

const ms = time.Millisecond

// hist is a hand-made cumulative histogram over bounds 10, 20, 40 ms.
func hist(counts [3]uint64, total uint64) task.Histogram {
	return task.Histogram{Bounds: []time.Duration{10 * ms, 20 * ms, 40 * ms}, Counts: counts[:], Count: total}
}

func TestQuantile(t *testing.T) {
	for _, c := range []struct {
		name string
		h    task.Histogram
		q    float64
		want time.Duration
		ok   bool
	}{
		// 10 in (0,10], 20 in (10,20], 10 in (20,40].
		{"median interpolated", hist([3]uint64{10, 30, 40}, 40), 0.5, 15 * ms, true},     // rank 20: 10 + 10*(10/20)
		{"p95 in last bucket", hist([3]uint64{10, 30, 40}, 40), 0.95, 36 * ms, true},     // rank 38: 20 + 20*(8/10)
		{"first bucket from 0", hist([3]uint64{10, 30, 40}, 40), 0.1, 4 * ms, true},      // rank 4: 0 + 10*(4/10)
		{"rank on a bound", hist([3]uint64{10, 30, 40}, 40), 0.25, 10 * ms, true},        // rank 10: top of bucket 0
		{"p100", hist([3]uint64{10, 30, 40}, 40), 1, 40 * ms, true},                      // rank 40: top of bucket 2
		{"in +Inf: highest bound", hist([3]uint64{10, 30, 40}, 50), 0.95, 40 * ms, true}, // rank 47.5 > 40
		{"empty buckets skipped", hist([3]uint64{0, 0, 8}, 8), 0.5, 30 * ms, true},       // rank 4: 20 + 20*(4/8)
		{"non-monotonic raised", hist([3]uint64{10, 5, 40}, 40), 0.2, 8 * ms, true},      // counts read as 10,10,40
		{"no observations", hist([3]uint64{}, 0), 0.95, 0, false},
		{"q zero", hist([3]uint64{10, 30, 40}, 40), 0, 0, false},
		{"q above 1", hist([3]uint64{10, 30, 40}, 40), 1.5, 0, false},
		{"no bounds", task.Histogram{Count: 3}, 0.5, 0, false},
	} {
		got, ok := Quantile(c.q, c.h)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: Quantile(%v) = %v, %v; want %v, %v", c.name, c.q, got, ok, c.want, c.ok)
		}
	}
}

func TestDelta(t *testing.T) {
	prev := hist([3]uint64{100, 100, 100}, 100)
	cur := hist([3]uint64{100, 130, 140}, 150)
	d := delta(cur, prev)
	if want := hist([3]uint64{0, 30, 40}, 50); !equalHist(d, want) {
		t.Errorf("delta = %+v, want %+v", d, want)
	}
	// Counters reset (fewer than before): the new snapshot is all new.
	reset := hist([3]uint64{1, 2, 3}, 3)
	if d := delta(reset, prev); !equalHist(d, reset) {
		t.Errorf("delta after a reset = %+v", d)
	}
	// A bucket lower than before with a higher total is a reset too.
	odd := hist([3]uint64{50, 200, 200}, 200)
	if d := delta(odd, prev); !equalHist(d, odd) {
		t.Errorf("delta of an inconsistent pair = %+v", d)
	}
	// No previous snapshot: all of cur.
	if d := delta(cur, task.Histogram{}); !equalHist(d, cur) {
		t.Errorf("delta from nothing = %+v", d)
	}
}

func equalHist(a, b task.Histogram) bool {
	if a.Count != b.Count || len(a.Counts) != len(b.Counts) {
		return false
	}
	for i := range a.Counts {
		if a.Counts[i] != b.Counts[i] || a.Bounds[i] != b.Bounds[i] {
			return false
		}
	}
	return true
}
