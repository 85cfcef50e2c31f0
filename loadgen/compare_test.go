package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func fakeResult(target string, rate float64, p99 time.Duration) *result {
	return &result{Target: target, EndToEnd: rate, SubmitRate: 2 * rate, RunSecs: 1,
		Counts: Counts{Tasks: 10, Fired: 10, Unique: 10, Lateness: Lateness{P99: int64(p99)}}}
}

func TestCompareRatioLine(t *testing.T) {
	srv := fakeResult("server", 400_000, 3*time.Millisecond)
	bs := fakeResult("beanstalkd", 20_000, 1500*time.Millisecond)
	rs := compare([]*result{srv, bs})
	if len(rs) != 1 || rs[0].Tock != "server" || rs[0].Peer != "beanstalkd" || rs[0].EndToEnd != 20 || rs[0].Submit != 20 || !rs[0].Valid {
		t.Fatalf("ratios %+v", rs)
	}
	var out bytes.Buffer
	if err := report(&out, false, []*result{srv, bs}); err != nil {
		t.Fatal(err)
	}
	want := "ratio server/beanstalkd: end to end 400000/s / 20000/s = 20.00x (submit 20.00x); p99 lateness 3ms (server) vs 1.5s (beanstalkd)\n"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, out.String())
	}
	if strings.Count(out.String(), "loadgen -target ") != 2 {
		t.Fatalf("want both summaries:\n%s", out.String())
	}

	// A failed run makes the ratio not comparable.
	bs.Counts.Lost = 1
	out.Reset()
	_ = report(&out, false, []*result{srv, bs})
	if !strings.Contains(out.String(), "NOT COMPARABLE") {
		t.Fatalf("a failed run's ratio is not flagged:\n%s", out.String())
	}
}

func TestCompareNoPeer(t *testing.T) {
	if rs := compare([]*result{fakeResult("core", 1, 0), fakeResult("server", 1, 0)}); len(rs) != 0 {
		t.Fatalf("ratios without a peer: %+v", rs)
	}
	rs := compare([]*result{fakeResult("core", 100, 0), fakeResult("server", 50, 0), fakeResult("beanstalkd", 10, 0)})
	if len(rs) != 2 || rs[0].Tock != "core" || rs[0].EndToEnd != 10 || rs[1].Tock != "server" || rs[1].EndToEnd != 5 {
		t.Fatalf("ratios %+v", rs)
	}
}

func TestReportJSON(t *testing.T) {
	srv := fakeResult("server", 100, 0)
	bs := fakeResult("beanstalkd", 10, 0)
	var out bytes.Buffer
	if err := report(&out, true, []*result{srv}); err != nil {
		t.Fatal(err)
	}
	var one map[string]any
	if err := json.Unmarshal(out.Bytes(), &one); err != nil || one["target"] != "server" {
		t.Fatalf("one target: %v %s", err, out.String())
	}
	out.Reset()
	if err := report(&out, true, []*result{srv, bs}); err != nil {
		t.Fatal(err)
	}
	var many struct {
		Runs   []result `json:"runs"`
		Ratios []ratio  `json:"ratios"`
	}
	if err := json.Unmarshal(out.Bytes(), &many); err != nil || len(many.Runs) != 2 || len(many.Ratios) != 1 || many.Ratios[0].EndToEnd != 10 {
		t.Fatalf("two targets: %v %s", err, out.String())
	}
}

func TestPeaks(t *testing.T) {
	ticks := []tick{
		{Second: 1, Seconds: 1, Submitted: 10, Fired: 5, Acked: 4},
		{Second: 2, Seconds: 1.0004, Submitted: 3, Fired: 9, Acked: 8},
		{Second: 3, Seconds: 0.2, Submitted: 50, Fired: 50, Acked: 50}, // partial: left out
	}
	if p := peaks(ticks); p != (peak{10, 9, 8}) {
		t.Fatalf("peaks %+v", p)
	}
	// A run shorter than a second: its partial second scaled to a rate.
	if p := peaks([]tick{{Second: 1, Seconds: 0.25, Submitted: 100, Fired: 50, Acked: 25}}); p != (peak{400, 200, 100}) {
		t.Fatalf("peaks %+v", p)
	}
	if p := peaks(nil); p != (peak{}) {
		t.Fatalf("peaks %+v", p)
	}
}
