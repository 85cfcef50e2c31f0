package task

import (
	"testing"
	"time"
)

// TestHistogramBucketsAtEveryBound checks bound-1, bound and bound+1 for every bucket:
// a value equal to a bound belongs to that bound's bucket (Prometheus's le).
func TestHistogramBucketsAtEveryBound(t *testing.T) {
	for i, b := range latencyBounds {
		for _, c := range []struct {
			d    time.Duration
			want int
		}{{b - 1, i}, {b, i}, {b + 1, i + 1}} {
			if i > 0 && c.d == latencyBounds[i-1] {
				continue
			}
			var h histogram
			h.observe(c.d)
			if h.counts[c.want].Load() != 1 {
				t.Fatalf("%v: not in bucket %d", c.d, c.want)
			}
		}
	}
	var h histogram
	h.observe(0)
	h.observe(time.Hour)
	var snap Histogram
	snap.add(&h)
	if snap.Count != 2 || snap.Counts[0] != 1 || snap.Counts[len(snap.Counts)-1] != 1 || snap.Sum != time.Hour {
		t.Fatalf("snapshot %+v", snap)
	}
}
