package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/common/expfmt"
)

const (
	// serverCPUMetric is the process collector's counter of the CPU the process has used
	// (user and system, in seconds; read from /proc, so in steps of 1/USER_HZ, 10 ms on
	// Linux).
	serverCPUMetric = "process_cpu_seconds_total"
	// serverCPUTimeout bounds one scrape of the admin port's /metrics.
	serverCPUTimeout = 10 * time.Second
	// maxMetricsBytes bounds the /metrics body read: tockd's is tens of KB.
	maxMetricsBytes = 16 << 20
)

// scrapeServerCPU GETs http://admin/metrics and returns the process's CPU seconds so far
// (serverCPUMetric). A tockd process reports it; the difference of two scrapes is the CPU
// it spent between them.
func scrapeServerCPU(ctx context.Context, admin string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, serverCPUTimeout)
	defer cancel()
	u := url.URL{Scheme: "http", Host: admin, Path: "/metrics"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("server CPU: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("server CPU: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return 0, fmt.Errorf("server CPU: GET %s: %s: %s", u.String(), resp.Status, body)
	}
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return 0, fmt.Errorf("server CPU: GET %s: %w", u.String(), err)
	}
	mf := families[serverCPUMetric]
	if mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetCounter() == nil {
		return 0, fmt.Errorf("server CPU: GET %s: no counter %s (is it tockd's admin port?)", u.String(), serverCPUMetric)
	}
	return mf.GetMetric()[0].GetCounter().GetValue(), nil
}

// serverCPU measures the CPU a tockd spends over a run, from its admin port: begin scrapes
// the counter at the start, end at the end. The zero serverCPU (no admin port) measures
// nothing.
type serverCPU struct {
	admin string
	start float64
	err   error
}

func (s *serverCPU) begin(ctx context.Context) {
	if s.admin != "" {
		s.start, s.err = scrapeServerCPU(ctx, s.admin)
	}
}

// end returns the CPU seconds spent since begin (0 and nil without an admin port).
func (s *serverCPU) end(ctx context.Context) (float64, error) {
	if s.admin == "" || s.err != nil {
		return 0, s.err
	}
	now, err := scrapeServerCPU(ctx, s.admin)
	if err != nil {
		return 0, err
	}
	return now - s.start, nil
}

// cpuUse is the CPU a server spent over a run: user and system seconds (from
// process_cpu_seconds_total, so in 10 ms steps), and that over the unique tasks run.
type cpuUse struct {
	Seconds       float64 `json:"seconds"`
	MicrosPerTask float64 `json:"us_per_task"`
}

func newCPUUse(secs float64, tasks int64) *cpuUse {
	u := &cpuUse{Seconds: secs}
	if tasks > 0 {
		u.MicrosPerTask = secs / float64(tasks) * 1e6
	}
	return u
}
