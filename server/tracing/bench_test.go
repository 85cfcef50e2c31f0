package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/server/tracing"
)

// BenchmarkExtractInject: what passing a trace context through costs, per run: Extract
// of the FIRE's strings, Inject of the result.
func BenchmarkExtractInject(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		ctx := tracing.Extract(context.Background(), w3cParent, w3cState)
		if p, _ := tracing.Inject(ctx); p == "" {
			b.Fatal("no traceparent")
		}
	}
}

// BenchmarkSpan: one of the server's spans of a traced task, as spans.go makes it
// (Extract of the task's context, Start with the task's attributes, End), on an SDK
// provider that samples every span and exports none (no span processor).
func BenchmarkSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	tr, err := tracing.New(tracing.Options{Provider: tp})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, span := tr.Start(tracing.Extract(context.Background(), w3cParent, w3cState), tracing.SpanFire, trace.SpanKindProducer,
			nil)
		span.End()
	}
}
