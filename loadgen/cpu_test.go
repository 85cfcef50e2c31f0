package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// processCPU is this process's user and system CPU so far (getrusage: the same counters
// /proc reports, which the process collector reads).
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The real process collector behind a real HTTP server, as tockd's admin port has it:
// the CPU this process burns between begin and end is what serverCPU measures.
func TestServerCPUMeasuresTheProcess(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	cpu := serverCPU{admin: strings.TrimPrefix(srv.URL, "http://")}
	ctx := context.Background()
	cpu.begin(ctx)
	const burn = 300 * time.Millisecond
	from := processCPU(t)
	x := uint64(1)
	for processCPU(t)-from < burn {
		for range 100_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	_ = x
	secs, err := cpu.end(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// At least the burn less one 10 ms step at each end; the HTTP scrapes and the test's
	// other goroutines add a little, so the upper bound is loose (a 2-core box under load
	// still spends the burn as CPU, not as wall time).
	if lo := burn.Seconds() - 0.02; secs < lo || secs > 5 {
		t.Fatalf("measured %.3fs of CPU for a burn of %v", secs, burn)
	}
	if u := newCPUUse(secs, 1000); u.MicrosPerTask != secs/1000*1e6 {
		t.Fatalf("per task %.3f µs for %.3fs over 1000 tasks", u.MicrosPerTask, secs)
	}
}

func TestServerCPUErrors(t *testing.T) {
	for _, c := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"not tockd", "some_other_metric 1\n", http.StatusOK, "no counter process_cpu_seconds_total"},
		{"token needed", "unauthorized", http.StatusUnauthorized, "401"},
		{"not metrics", "{not: prometheus", http.StatusOK, "server CPU"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			cpu := serverCPU{admin: strings.TrimPrefix(srv.URL, "http://")}
			cpu.begin(context.Background())
			_, err := cpu.end(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	var none serverCPU // no admin port: nothing measured, no error
	none.begin(context.Background())
	if secs, err := none.end(context.Background()); secs != 0 || err != nil {
		t.Fatalf("without an admin port: %v, %v", secs, err)
	}
}
