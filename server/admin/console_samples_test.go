package admin

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// The ring keeps the latest len(ring) samples, oldest first, at every fill level.
func TestSamplesRing(t *testing.T) {
	r := newSamples(3)
	t0 := time.Unix(1000, 0)
	for n := 1; n <= 7; n++ {
		r.add(sample{at: t0.Add(time.Duration(n) * time.Second), submitted: uint64(n)})
		var got []uint64
		for _, s := range r.list() {
			got = append(got, s.submitted)
		}
		first := max(1, n-2)
		if len(got) != n-first+1 || got[0] != uint64(first) || got[len(got)-1] != uint64(n) {
			t.Fatalf("after %d adds: %v, want %d..%d", n, got, first, n)
		}
	}
}

// intervals gives rates per second between samples, and the lateness of the attempts
// started in between: the mean, and the 99th percentile's bucket bound (over the last
// bound: that bound, marked over). A counter that went down gives a zero rate.
func TestIntervals(t *testing.T) {
	bounds := []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	ss := []sample{
		{at: t0, submitted: 100, succeeded: 10, lateBounds: bounds, lateCounts: []uint64{0, 0, 0}},
		// 100 attempts started: 50 within 1 ms, 99 within 10 ms: the p99 is in (1, 10] ms.
		{at: t0.Add(10 * time.Second), submitted: 600, succeeded: 110, failed: 5, lateBounds: bounds,
			lateCounts: []uint64{50, 99, 100}, lateCount: 100, lateSum: 200 * time.Millisecond},
		// 100 more, 70 of them past 100 ms: the p99 is over the last bound.
		{at: t0.Add(20 * time.Second), submitted: 50, succeeded: 110, failed: 5, lateBounds: bounds,
			lateCounts: []uint64{60, 110, 130}, lateCount: 200, lateSum: 10200 * time.Millisecond},
	}
	ivs := intervals(ss)
	if len(ivs) != 2 {
		t.Fatalf("%d intervals from 3 samples", len(ivs))
	}
	a, b := ivs[0], ivs[1]
	if a.submitted != 50 || a.succeeded != 10 || a.failed != 0.5 || a.started != 100 || a.lateMean != 2*time.Millisecond ||
		a.lateP99 != 10*time.Millisecond || a.lateOver {
		t.Errorf("first interval %+v, want 50/s, 10/s, 0.5/s, 100 started, mean 2ms, p99 10ms", a)
	}
	if b.submitted != 0 || b.succeeded != 0 || b.started != 100 || b.lateMean != 100*time.Millisecond ||
		b.lateP99 != 100*time.Millisecond || !b.lateOver {
		t.Errorf("second interval %+v, want rate 0 (the counter went down), mean 100ms, p99 over 100ms", b)
	}
}

// A chart's points lie inside the plot, the highest value at the top of a round scale,
// the first and last intervals at the plot's edges; without intervals it is empty.
func TestChartLayout(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ivs := []interval{{end: t0, submitted: 0}, {end: t0.Add(5 * time.Second), submitted: 40}, {end: t0.Add(10 * time.Second), submitted: 80}}
	c := rateChart(ivs)
	if c.Empty || len(c.Series) != 3 || len(c.Grid) != chartTicks+1 || c.Grid[chartTicks].Label != "100/s" {
		t.Fatalf("chart %+v, want 3 series and a grid up to 100/s", c)
	}
	pts := strings.Fields(c.Series[0].Points)
	if len(pts) != 3 {
		t.Fatalf("submitted's points %q, want 3", c.Series[0].Points)
	}
	xy := func(p string) (float64, int) {
		x, y, _ := strings.Cut(p, ",")
		fx, err1 := strconv.ParseFloat(x, 64)
		iy, err2 := strconv.Atoi(y)
		if err1 != nil || err2 != nil {
			t.Fatalf("point %q", p)
		}
		return fx, iy
	}
	x0, y0 := xy(pts[0])
	x2, y2 := xy(pts[2])
	if x0 != float64(c.Left) || x2 != float64(c.Right) || y0 != c.Bottom {
		t.Errorf("points %v: want the first at (%d, %d) and the last at x %d", pts, c.Left, c.Bottom, c.Right)
	}
	if want := c.Bottom - (c.Bottom-chartTop)*80/100; y2 != want {
		t.Errorf("80 on a 100 scale at y %d, want %d", y2, want)
	}
	if c.Series[0].Latest != "80/s" {
		t.Errorf("latest %q, want 80/s", c.Series[0].Latest)
	}
	if e := rateChart(nil); !e.Empty || e.Series[0].Points != "" {
		t.Errorf("a chart of no intervals: %+v, want empty", e)
	}
	for v, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 7: 10, 12: 20, 2000: 2000, 2001: 5000} {
		if got := roundUp(v); got != want {
			t.Errorf("roundUp(%v) = %v, want %v", v, got, want)
		}
	}
}
