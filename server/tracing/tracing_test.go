package tracing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/server/internal/leaktest"
	"github.com/tock-sched/tock/server/tracing"
	"github.com/tock-sched/tock/server/tracing/tracingtest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// W3C Trace Context's example.
const (
	w3cParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	w3cState  = "congo=t61rcWkgMzE"
)

// Extract then Inject gives the same two strings; a context without a valid span gives
// none; a malformed traceparent leaves the context as it was.
func TestInjectExtract(t *testing.T) {
	ctx := tracing.Extract(context.Background(), w3cParent, w3cState)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
		t.Fatalf("Extract: %+v", sc)
	}
	if p, s := tracing.Inject(ctx); p != w3cParent || s != w3cState {
		t.Fatalf("Inject after Extract: %q, %q; want %q, %q", p, s, w3cParent, w3cState)
	}
	if p, s := tracing.Inject(context.Background()); p != "" || s != "" {
		t.Fatalf("Inject of no span: %q, %q", p, s)
	}
	for _, bad := range []string{"", "00-xyz", strings.ToUpper(w3cParent), "ff" + w3cParent[2:]} {
		if sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), bad, w3cState)); sc.IsValid() {
			t.Errorf("Extract(%q) gave a valid %+v", bad, sc)
		}
	}
}

// A Tracer without Endpoint or Provider is off, and shuts down as a no-op; one with a
// Provider makes its spans there; both at once, or a bad Endpoint, is ErrOptions.
func TestNewOptions(t *testing.T) {
	off, err := tracing.New(tracing.Options{})
	if err != nil || off.Enabled() || off.Shutdown(context.Background()) != nil {
		t.Fatalf("New(zero): %+v, %v; want a Tracer that is off", off, err)
	}
	var none *tracing.Tracer
	if none.Enabled() || none.Shutdown(context.Background()) != nil {
		t.Fatal("a nil Tracer is not off")
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	on, err := tracing.New(tracing.Options{Provider: tp})
	if err != nil || !on.Enabled() {
		t.Fatalf("New(Provider): %v", err)
	}
	_, span := on.Start(context.Background(), tracing.SpanSubmit, trace.SpanKindServer, []attribute.KeyValue{tracing.AttrTaskID.String("t")})
	span.End()
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Name() != tracing.SpanSubmit || ended[0].SpanKind() != trace.SpanKindServer {
		t.Fatalf("spans recorded: %v", ended)
	}
	for _, o := range []tracing.Options{
		{Endpoint: "127.0.0.1:4318", Provider: tp},
		{Endpoint: "collector"},        // no port
		{Endpoint: "collector:4318/x"}, // a path without a scheme
		{Endpoint: "ftp://collector:4318"},
		{Endpoint: "http://"},
	} {
		if _, err := tracing.New(o); !errors.Is(err, tracing.ErrOptions) {
			t.Errorf("New(%+v): %v, want ErrOptions", o, err)
		}
	}
}

// endpointOptions: host:port and a URL without a path post to /v1/traces; a URL's own
// path is kept. Checked by where an exporter's request arrives.
func TestEndpointPaths(t *testing.T) {
	for _, tc := range []struct{ endpoint, path string }{
		{"HOSTPORT", "/v1/traces"},
		{"http://HOSTPORT", "/v1/traces"},
		{"http://HOSTPORT/", "/v1/traces"},
		{"http://HOSTPORT/custom/traces", "/custom/traces"},
	} {
		col := tracingtest.NewCollector(t)
		ep := strings.ReplaceAll(tc.endpoint, "HOSTPORT", strings.TrimPrefix(col.URL, "http://"))
		tr, err := tracing.New(tracing.Options{Endpoint: ep})
		if err != nil {
			t.Fatalf("New(%q): %v", ep, err)
		}
		_, span := tr.Start(context.Background(), tracing.SpanFire, trace.SpanKindProducer, nil)
		span.End()
		if err := tr.Shutdown(context.Background()); err != nil { // flushes: the request has been answered
			t.Fatalf("Shutdown (%q): %v", ep, err)
		}
		if p := col.Paths(); len(p) != 1 || p[tc.path] != 1 {
			t.Errorf("endpoint %q posts to %v, want %q once", tc.endpoint, p, tc.path)
		}
	}
}

// A Tracer with an Endpoint exports its spans over OTLP/HTTP: the collector receives
// protobuf ExportTraceServiceRequests at /v1/traces holding each span, with its name,
// attributes, parent, scope and the service name.
func TestExportOverOTLPHTTP(t *testing.T) {
	col := tracingtest.NewCollector(t)
	tr, err := tracing.New(tracing.Options{Endpoint: col.URL, ServiceName: "tockd-test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := tracing.Extract(context.Background(), w3cParent, w3cState)
	_, submit := tr.Start(ctx, tracing.SpanSubmit, trace.SpanKindServer, []attribute.KeyValue{tracing.AttrTaskID.String("t1")})
	submit.End()
	_, fire := tr.Start(ctx, tracing.SpanFire, trace.SpanKindProducer, []attribute.KeyValue{tracing.AttrTaskID.String("t1"), tracing.AttrRunID.String("7")},
		trace.WithTimestamp(time.Now()))
	fire.End()
	ctxS, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctxS); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := tr.Shutdown(ctxS); err != nil {
		t.Fatalf("a second Shutdown: %v", err)
	}
	if p := col.Paths(); len(p) != 1 || p["/v1/traces"] == 0 {
		t.Errorf("requests by path %v, want /v1/traces only", p)
	}
	got := col.Spans()
	if len(got) != 2 || len(got[tracing.SpanSubmit]) != 1 || len(got[tracing.SpanFire]) != 1 {
		t.Fatalf("the collector received %v, want one %s and one %s", got, tracing.SpanSubmit, tracing.SpanFire)
	}
	for name, ss := range got {
		s := ss[0]
		if s.Service != "tockd-test" || s.Scope != tracing.ScopeName {
			t.Errorf("span %s of service %q, scope %q", name, s.Service, s.Scope)
		}
		if trace.TraceID(s.TraceId).String() != "4bf92f3577b34da6a3ce929d0e0e4736" || trace.SpanID(s.ParentSpanId).String() != "00f067aa0ba902b7" {
			t.Errorf("span %s: trace %x parent %x, want the W3C example's", name, s.TraceId, s.ParentSpanId)
		}
		if len(s.Attributes) == 0 || s.Attributes[0].Key != string(tracing.AttrTaskID) || s.Attributes[0].GetValue().GetStringValue() != "t1" {
			t.Errorf("span %s attributes %v", name, s.Attributes)
		}
	}
}
