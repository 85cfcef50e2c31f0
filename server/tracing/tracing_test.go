package tracing

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tock-sched/tock/server/internal/leaktest"
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
	ctx := Extract(context.Background(), w3cParent, w3cState)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
		t.Fatalf("Extract: %+v", sc)
	}
	if p, s := Inject(ctx); p != w3cParent || s != w3cState {
		t.Fatalf("Inject after Extract: %q, %q; want %q, %q", p, s, w3cParent, w3cState)
	}
	if p, s := Inject(context.Background()); p != "" || s != "" {
		t.Fatalf("Inject of no span: %q, %q", p, s)
	}
	for _, bad := range []string{"", "00-xyz", strings.ToUpper(w3cParent), "ff" + w3cParent[2:]} {
		if sc := trace.SpanContextFromContext(Extract(context.Background(), bad, w3cState)); sc.IsValid() {
			t.Errorf("Extract(%q) gave a valid %+v", bad, sc)
		}
	}
}

// A Tracer without Endpoint or Provider is off, and shuts down as a no-op; one with a
// Provider makes its spans there; both at once, or a bad Endpoint, is ErrOptions.
func TestNewOptions(t *testing.T) {
	off, err := New(Options{})
	if err != nil || off.Enabled() || off.Shutdown(context.Background()) != nil {
		t.Fatalf("New(zero): %+v, %v; want a Tracer that is off", off, err)
	}
	var none *Tracer
	if none.Enabled() || none.Shutdown(context.Background()) != nil {
		t.Fatal("a nil Tracer is not off")
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	on, err := New(Options{Provider: tp})
	if err != nil || !on.Enabled() {
		t.Fatalf("New(Provider): %v", err)
	}
	_, span := on.Start(context.Background(), SpanSubmit, trace.SpanKindServer, []attribute.KeyValue{AttrTaskID.String("t")})
	span.End()
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Name() != SpanSubmit || ended[0].SpanKind() != trace.SpanKindServer {
		t.Fatalf("spans recorded: %v", ended)
	}
	for _, o := range []Options{
		{Endpoint: "127.0.0.1:4318", Provider: tp},
		{Endpoint: "collector"},        // no port
		{Endpoint: "collector:4318/x"}, // a path without a scheme
		{Endpoint: "ftp://collector:4318"},
		{Endpoint: "http://"},
	} {
		if _, err := New(o); !errors.Is(err, ErrOptions) {
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
		got := make(chan string, 16)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			got <- r.URL.Path
		}))
		ep := strings.ReplaceAll(tc.endpoint, "HOSTPORT", strings.TrimPrefix(srv.URL, "http://"))
		tr, err := New(Options{Endpoint: ep})
		if err != nil {
			t.Fatalf("New(%q): %v", ep, err)
		}
		_, span := tr.Start(context.Background(), SpanFire, trace.SpanKindProducer, nil)
		span.End()
		if err := tr.Shutdown(context.Background()); err != nil { // flushes: the request has been answered
			t.Fatalf("Shutdown (%q): %v", ep, err)
		}
		srv.Close()
		if p := <-got; p != tc.path {
			t.Errorf("endpoint %q posts to %q, want %q", tc.endpoint, p, tc.path)
		}
	}
}

// A Tracer with an Endpoint exports its spans over OTLP/HTTP: the collector receives a
// protobuf ExportTraceServiceRequest at /v1/traces holding each span, with its name,
// attributes, parent and the service name.
func TestExportOverOTLPHTTP(t *testing.T) {
	reqs := make(chan *collectortrace.ExportTraceServiceRequest, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("collector got %s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		reqs <- &req
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	tr, err := New(Options{Endpoint: srv.URL, ServiceName: "tockd-test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := Extract(context.Background(), w3cParent, w3cState)
	_, submit := tr.Start(ctx, SpanSubmit, trace.SpanKindServer, []attribute.KeyValue{AttrTaskID.String("t1")})
	submit.End()
	_, fire := tr.Start(ctx, SpanFire, trace.SpanKindProducer, []attribute.KeyValue{AttrTaskID.String("t1"), AttrRunID.String("7")},
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
	close(reqs)
	got := map[string]bool{}
	for req := range reqs {
		for _, rs := range req.ResourceSpans {
			var service string
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				if ss.GetScope().GetName() != ScopeName {
					t.Errorf("scope %q, want %q", ss.GetScope().GetName(), ScopeName)
				}
				for _, s := range ss.Spans {
					got[s.Name] = true
					if service != "tockd-test" {
						t.Errorf("span %s of service %q", s.Name, service)
					}
					if trace.TraceID(s.TraceId).String() != "4bf92f3577b34da6a3ce929d0e0e4736" || trace.SpanID(s.ParentSpanId).String() != "00f067aa0ba902b7" {
						t.Errorf("span %s: trace %x parent %x, want the W3C example's", s.Name, s.TraceId, s.ParentSpanId)
					}
					if len(s.Attributes) == 0 || s.Attributes[0].Key != string(AttrTaskID) || s.Attributes[0].GetValue().GetStringValue() != "t1" {
						t.Errorf("span %s attributes %v", s.Name, s.Attributes)
					}
				}
			}
		}
	}
	if !got[SpanSubmit] || !got[SpanFire] || len(got) != 2 {
		t.Fatalf("the collector received spans %v, want %s and %s", got, SpanSubmit, SpanFire)
	}
}
