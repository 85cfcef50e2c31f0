// Package tracingtest records the spans a test's tracer provider makes, for the tests
// of tock's tracing (server/tracing) in the server and the client. Only tests import it.
package tracingtest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tock-sched/tock/server/tracing"
)

// Recorder is an SDK tracer provider that keeps every span ended on it (all sampled:
// the SDK's default sampler with a sampled or no parent). Safe for concurrent use.
type Recorder struct {
	*sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

// New returns a Recorder, shut down at tb's cleanup.
func New(tb testing.TB) *Recorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &Recorder{tp, rec}
}

// Ended returns the spans ended so far, in the order they ended.
func (r *Recorder) Ended() []sdktrace.ReadOnlySpan { return r.rec.Ended() }

// OfTask returns the ended spans whose tracing.AttrTaskID is tid, by name (the last
// ended of a name).
func (r *Recorder) OfTask(tid string) map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range r.rec.Ended() {
		if Attr(s, tracing.AttrTaskID) == tid {
			out[s.Name()] = s
		}
	}
	return out
}

// Names lists the ended spans as name/task, for failure messages.
func (r *Recorder) Names() []string {
	var out []string
	for _, s := range r.rec.Ended() {
		out = append(out, s.Name()+"/"+Attr(s, tracing.AttrTaskID))
	}
	return out
}

// Attr returns the value of s's attribute k as text; "" when s has none.
func Attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}
