package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// ratio compares one tock target's run with one peer's run of the same workload.
type ratio struct {
	Tock string `json:"tock"`
	Peer string `json:"peer"`
	// EndToEnd is tock's end-to-end rate over the peer's; Submit the same for submits.
	TockRate float64 `json:"tock_per_second"`
	PeerRate float64 `json:"peer_per_second"`
	EndToEnd float64 `json:"end_to_end_ratio"`
	Submit   float64 `json:"submit_ratio"`
	TockP99  int64   `json:"tock_p99_ns"`
	PeerP99  int64   `json:"peer_p99_ns"`
	// Valid is false when either run failed (lost, early, rejected), which makes its
	// rate meaningless.
	Valid bool `json:"valid"`
}

// compare pairs every tock target's result with every peer's, in the order run.
func compare(results []*result) []ratio {
	var out []ratio
	for _, t := range results {
		if slices.Contains(peers, t.Target) {
			continue
		}
		for _, p := range results {
			if !slices.Contains(peers, p.Target) {
				continue
			}
			out = append(out, ratio{
				Tock: t.Target, Peer: p.Target,
				TockRate: t.EndToEnd, PeerRate: p.EndToEnd,
				EndToEnd: div(t.EndToEnd, p.EndToEnd), Submit: div(t.SubmitRate, p.SubmitRate),
				TockP99: t.Counts.Lateness.P99, PeerP99: p.Counts.Lateness.P99,
				Valid: !t.failed() && !p.failed() && !t.TimedOut && !p.TimedOut,
			})
		}
	}
	return out
}

func div(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func (r ratio) print(w io.Writer) {
	d := func(ns int64) time.Duration { return time.Duration(ns).Round(time.Microsecond) }
	fmt.Fprintf(w, "ratio %s/%s: end to end %.0f/s / %.0f/s = %.2fx (submit %.2fx); p99 lateness %v (%s) vs %v (%s)",
		r.Tock, r.Peer, r.TockRate, r.PeerRate, r.EndToEnd, r.Submit, d(r.TockP99), r.Tock, d(r.PeerP99), r.Peer)
	if !r.Valid {
		fmt.Fprint(w, "  [NOT COMPARABLE: a run failed or timed out]")
	}
	fmt.Fprintln(w)
}
