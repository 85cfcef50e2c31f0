// Package admin is tockd's admin HTTP port: Prometheus metrics at /metrics, pprof at
// /debug/pprof/, a health check at /healthz and an index of them at /. It also carries
// the alerting rules for those metrics (AlertRules, alerts.yml).
//
// Security: the port listens on loopback by default. With Options.Token, /metrics,
// /debug/pprof/ and / need "Authorization: Bearer <token>" (401 otherwise); /healthz is
// always open. pprof's /debug/pprof/cmdline is never served (404): a command line holds
// secrets passed as flags. The other profiles show memory and stacks, not the flags'
// values, but they are still the process's internals: set a Token on any address other
// hosts or users can reach.
//
// Usage, beside a tockd.Server srv:
//
//	adm, err := admin.New(admin.WithAddr(addr), admin.WithSnapshot(srv.Stats), admin.WithLogger(log))
//	go adm.ListenAndServe() // or net.Listen, then go adm.Serve(ln)
//	...
//	adm.Shutdown(ctx)
//
// Invariants:
//   - One snapshot per scrape. The Collector calls Options.Snapshot exactly once per
//     Collect and derives every tock_* metric from that one tockd.Stats, so the values
//     of a scrape are mutually consistent (tock_queue_depth and the counters come from
//     the same instant) and a scrape costs one snapshot (a pass over the engine's shards
//     and workers) plus O(metrics + buckets) allocations.
//   - Nothing on the hot path. The metrics are constant metrics built at scrape time
//     from counters tockd and core/task keep anyway; no Prometheus counter or histogram
//     is updated per task, so serving tasks costs the same with or without this port.
//   - A private mux and a private registry. Handlers are mounted one by one on the
//     Server's own http.ServeMux (pprof's too: net/http/pprof registers itself on
//     http.DefaultServeMux when imported, but that mux is never served here), and
//     /metrics gathers a prometheus.Registry of the Server's own (the Collector, Go
//     runtime and process collectors, promhttp's own counters), never
//     prometheus.DefaultRegisterer. Two Servers in one process do not collide.
//   - Bounded: every http.Server timeout and the header size are set (Options, with
//     named defaults); at most MetricsMaxInFlight scrapes run at once, each within
//     MetricsTimeout (else 503).
//   - Shutdown leaves nothing running: when it returns every Serve has returned and
//     every connection is closed (gracefully within its context, then forcibly).
//
// The metric names (tock_ prefix, base units, _total on counters) are a public
// interface: alerts.yml and dashboards use them. The tests check alerts.yml against a
// real scrape, so a renamed metric fails them until the rules follow.
package admin
