// Package tracing is tock's OpenTelemetry tracing: the tracer from options (New), the
// W3C Trace Context propagation between a context and the two strings a task and a
// FIRE carry (Inject, Extract), and the names of tock's spans and their attributes.
// The server (server/tockd) and the Go client (server/client) use it; the protocol
// codec knows only the strings (server/protocol: "traceparent", "tracestate").
//
// The trace of one task: the submitter's span (the client's context at Submit) is the
// parent of the server's tock.submit, of each run's tock.fire and of the tock.ack,
// tock.retry and tock.dead_letter that end attempts; each FIRE carries its tock.fire
// span's context, the parent of the worker's tock.handle, whose context is the
// handler's. A task submitted without a trace context gets no spans.
//
// Invariants:
//   - A Tracer made without an endpoint or a provider is off: Enabled is false, and its
//     callers skip all tracing work, so a server that exports nothing pays one branch
//     per task event and allocates nothing for it.
//   - A Tracer made from an endpoint owns its provider (an OTLP/HTTP exporter behind a
//     batch span processor): Shutdown flushes and stops it. One made from a provider
//     leaves the provider to its owner.
//   - Inject and Extract never fail: an absent or malformed context gives "" and an
//     unchanged context.
//
// Costs, paid only for traced tasks on an enabled Tracer (BenchmarkExtractInject,
// BenchmarkSpan; measured on a shared 2-core machine under load, so the times are
// rough): Extract then Inject of a context, 7 allocations, 312 B, about 1 µs; one of the
// server's spans (Extract, Start, End, on an SDK provider that exports nothing), 8
// allocations, 768 B, about 2 µs, before what its exporter adds.
package tracing
