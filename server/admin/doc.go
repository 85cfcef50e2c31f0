// Package admin is tockd's admin HTTP port: Prometheus metrics at /metrics, pprof at
// /debug/pprof/, a health check at /healthz, the operators' web console at /console/
// (with Options.Console) and an index of them at /. It also carries the alerting rules
// for those metrics (AlertRules, alerts.yml).
//
// Security: the port listens on loopback by default. With Options.Token, /metrics,
// /debug/pprof/ and / need "Authorization: Bearer <token>" (401 otherwise); /healthz is
// always open. pprof's /debug/pprof/cmdline is never served (404): a command line holds
// secrets passed as flags. The other profiles show memory and stacks, not the flags'
// values, but they are still the process's internals: set a Token on any address other
// hosts or users can reach.
//
// # The console
//
// Server-rendered pages (html/template, files embedded in the binary, no script, no
// external fetch; the Content-Security-Policy allows only the port's own style sheet):
//   - /console/ the overview: this node and who leads, the nodes campaigning in the
//     election (the leader first, with its epoch), the workers subscribed with their
//     credits and runs in flight, the figures of Stats, and two SVG charts of the last
//     minutes (task rates; lateness p99 and mean), drawn from a ring of
//     ConsoleSamples snapshots taken every ConsoleSampleInterval (10 minutes at 5 s);
//   - /console/tasks tasks by state, ConsolePageSize a page (the engine's List cursor),
//     and search by namespace and ID; /console/task one task: schedule, retry policy,
//     payload, the occurrence's attempts history and errors;
//   - /console/dlq the dead-letter queue with requeue and purge (one, or all after a
//     confirmation); /console/types the types served or paused, with pause/resume.
//
// Access rule:
//   - Without Options.Token the console is open (as the port is: loopback by default)
//     and read-only: no page offers an action and every action is 403.
//   - With a Token every page but /console/login and the style sheet needs a session,
//     or "Authorization: Bearer <Token>" (a browser without either is sent to the login,
//     which, like a refusal, names no node and says nothing of the leadership).
//     /console/login takes the token in a form and sets a session cookie (tock_console:
//     HttpOnly, SameSite=Strict, Path=/console/, for ConsoleSessionTTL). Sessions are
//     stateless, MACed with a key drawn at New: a restart ends them all. After
//     ConsoleLoginFailures failed logins within a minute (all clients together) the form
//     refuses every login, 429 with Retry-After, until that minute is over.
//   - Actions are POSTs that need the session cookie and the CSRF token bound to it
//     (HMAC of the cookie; every form carries it); the bearer header alone does not
//     allow them (tockctl is the scripting interface). A node that does not lead
//     refuses them (409 naming the leader): its engine holds no tasks. Each action is
//     logged at Info with the client's address.
//
// Usage, beside a tockd.Server srv:
//
//	adm, err := admin.New(admin.WithAddr(addr), admin.WithSnapshot(srv.Stats), admin.WithConsole(srv), admin.WithLogger(log))
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
//   - Shutdown leaves nothing running: when it returns every Serve has returned, the
//     console's sampler (started by the first Serve) has stopped, and every connection
//     is closed (gracefully within its context, then forcibly).
//   - The console costs nothing per task: its sampler takes one Stats snapshot per
//     ConsoleSampleInterval, and its pages read the engine (List is O(tasks) a page: an
//     administrative query, as LIST is).
//
// The metric names (tock_ prefix, base units, _total on counters) are a public
// interface: alerts.yml and dashboards use them. The tests check alerts.yml against a
// real scrape, so a renamed metric fails them until the rules follow.
package admin
