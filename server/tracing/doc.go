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
// Costs: Inject and Extract of a valid context parse or format 55 bytes plus the
// tracestate, with a few small allocations (the otel propagator's); a span costs what
// the provider's SDK makes it cost (a recording SDK span: about 1 KB and a few hundred
// ns), paid only for traced tasks on an enabled Tracer.
package tracing
