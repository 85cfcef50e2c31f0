package tockd

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/tracing"
)

// spans makes the server's spans of traced tasks (server/tracing): tock.submit when a
// submit is accepted, tock.fire when a run is handed to the router (its context goes
// out in the FIRE), and tock.ack, tock.retry and tock.dead_letter from the engine's
// events that end an attempt. Each is a child of the task's trace context (task.Trace):
// a task submitted without one gets none.
//
// Invariants: with the tracer off (Options.TracerProvider and OTLPEndpoint unset) no
// method does more than one branch, and a FIRE carries the task's own trace context;
// with it on, a FIRE of a traced task carries its tock.fire span's context. No lock:
// the tracer is safe for concurrent use, and spans is never written after New.
type spans struct{ tracer *tracing.Tracer }

// on reports whether spans are made.
func (sp spans) on() bool { return sp.tracer.Enabled() }

// taskAttrs are the attributes of every span of t.
func taskAttrs(ns, id, typ string, extra ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{tracing.AttrNamespace.String(ns), tracing.AttrTaskID.String(id), tracing.AttrType.String(typ)}, extra...)
}

// runAttrs adds a run's attributes.
func runAttrs(ns, id, typ string, runID uint64, attempt int) []attribute.KeyValue {
	// A run ID as a decimal string: OpenTelemetry has no uint64, and half of all run IDs
	// would read negative as an int64.
	return taskAttrs(ns, id, typ, tracing.AttrRunID.String(strconv.FormatUint(runID, 10)), tracing.AttrAttempt.Int(attempt))
}

// parent is the context of t's trace context.
func parent(tr *task.Trace) context.Context {
	return tracing.Extract(context.Background(), tr.Parent, tr.State)
}

// submitted makes the tock.submit span of t, whose submit began at start and ended with
// err (nil: accepted). For a traced task only, with spans on.
func (sp spans) submitted(t *task.Task, start time.Time, err error) {
	if t.Trace == nil || !sp.on() {
		return
	}
	_, span := sp.tracer.Start(parent(t.Trace), tracing.SpanSubmit, trace.SpanKindServer,
		taskAttrs(t.Namespace, t.ID, t.Type), trace.WithTimestamp(start))
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}

// fire returns the trace context a FIRE of run carries (empty for an untraced task),
// and the tock.fire span to end once the run is handed on (nil when none was started).
func (sp spans) fire(run *task.Run) (traceparent, tracestate string, span trace.Span) {
	t := run.Task
	tr := t.Trace
	if tr == nil {
		return "", "", nil
	}
	if !sp.on() {
		return tr.Parent, tr.State, nil // passed on, for the worker's handler
	}
	ctx, span := sp.tracer.Start(parent(tr), tracing.SpanFire, trace.SpanKindProducer,
		runAttrs(t.Namespace, t.ID, t.Type, run.RunID, run.Attempt))
	if traceparent, tracestate = tracing.Inject(ctx); traceparent == "" {
		traceparent, tracestate = tr.Parent, tr.State
	}
	return traceparent, tracestate, span
}

// endSpan ends span, if there is one.
func endSpan(span trace.Span) {
	if span != nil {
		span.End()
	}
}

// eventSpans names the span of each event kind that ends an attempt.
var eventSpans = map[task.EventKind]string{
	task.EventSucceeded: tracing.SpanAck,
	task.EventRetrying:  tracing.SpanRetry,
	task.EventDead:      tracing.SpanDeadLetter,
}

// onEvent is the engine's OnEvent hook while spans are on: the span of an event that
// ends a traced task's attempt. It runs on engine goroutines (and an ACK's reader).
func (sp spans) onEvent(ev task.Event) {
	if ev.Trace == nil {
		return
	}
	name, ok := eventSpans[ev.Kind]
	if !ok {
		return
	}
	_, span := sp.tracer.Start(parent(ev.Trace), name, trace.SpanKindInternal,
		runAttrs(ev.Namespace, ev.ID, ev.Type, ev.RunID, ev.Attempt))
	if ev.Err != nil {
		span.SetStatus(otelcodes.Error, ev.Err.Error())
	}
	span.End()
}
