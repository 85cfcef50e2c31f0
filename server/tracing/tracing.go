package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Span names: one per step of a task's life (see the package doc).
const (
	SpanSubmit     = "tock.submit"      // the server accepted the task (SUBMIT, an item of SUBMIT_BATCH)
	SpanFire       = "tock.fire"        // the server dispatched a run to a worker (FIRE, a run of FIRES)
	SpanHandle     = "tock.handle"      // a worker ran the run's handler
	SpanAck        = "tock.ack"         // an attempt succeeded (its ACK, or a carried outcome)
	SpanRetry      = "tock.retry"       // an attempt failed (NACK, time to run passed) and will be retried
	SpanDeadLetter = "tock.dead_letter" // an attempt failed for good: the task went to the dead-letter queue
)

// Attribute keys of tock's spans.
const (
	AttrNamespace = attribute.Key("tock.task.namespace")
	AttrTaskID    = attribute.Key("tock.task.id")
	AttrType      = attribute.Key("tock.task.type")
	AttrRunID     = attribute.Key("tock.run.id")      // a string: the run ID in decimal (a uint64); fire, handle, ack, retry, dead_letter
	AttrAttempt   = attribute.Key("tock.run.attempt") // fire, handle, ack, retry, dead_letter
)

// ScopeName is the instrumentation scope of tock's tracers.
const ScopeName = "github.com/tock-sched/tock"

// ErrOptions is wrapped by New's errors for options it cannot use.
var ErrOptions = errors.New("tracing: invalid options")

// Options say where a Tracer's spans go. The zero value is a Tracer that is off.
type Options struct {
	// Endpoint is an OTLP/HTTP collector: "host:port" (plain HTTP, path /v1/traces), or
	// a URL "http://host:port" or "https://host:port", with a path of its own or, without
	// one, /v1/traces. Empty: no export. Not with Provider.
	Endpoint string
	// Provider, when set, makes the spans (tests: an SDK provider with a span recorder;
	// embedders: their own). Not with Endpoint.
	Provider trace.TracerProvider
	// ServiceName is the service.name of the resource an Endpoint's provider states;
	// default "tock".
	ServiceName string
}

// Tracer makes tock's spans, or nothing when it is off. Safe for concurrent use.
type Tracer struct {
	tracer   trace.Tracer             // nil: off
	provider *sdktrace.TracerProvider // made from Endpoint: shut down by Shutdown; nil otherwise
}

// New returns the Tracer o describes: off without Endpoint and Provider; with Endpoint,
// an OTLP/HTTP exporter behind a batch span processor (nothing is sent until spans are
// made; an unreachable collector costs dropped spans, never a blocked caller).
func New(o Options) (*Tracer, error) {
	switch {
	case o.Endpoint != "" && o.Provider != nil:
		return nil, fmt.Errorf("%w: Endpoint and Provider are exclusive", ErrOptions)
	case o.Provider != nil:
		return &Tracer{tracer: o.Provider.Tracer(ScopeName)}, nil
	case o.Endpoint == "":
		return &Tracer{}, nil
	}
	opts, err := endpointOptions(o.Endpoint)
	if err != nil {
		return nil, err
	}
	// The client is created without a connection: New does no I/O.
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	name := o.ServiceName
	if name == "" {
		name = "tock"
	}
	res := resource.NewSchemaless(attribute.String("service.name", name))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{tracer: tp.Tracer(ScopeName), provider: tp}, nil
}

// endpointOptions turns Options.Endpoint into the exporter's options.
func endpointOptions(ep string) ([]otlptracehttp.Option, error) {
	if !strings.Contains(ep, "://") {
		if strings.ContainsAny(ep, "/?#") || !strings.Contains(ep, ":") {
			return nil, fmt.Errorf("%w: Endpoint %q: want host:port or an http(s) URL", ErrOptions, ep)
		}
		return []otlptracehttp.Option{otlptracehttp.WithEndpoint(ep), otlptracehttp.WithInsecure()}, nil
	}
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: Endpoint %q: want host:port or an http(s) URL", ErrOptions, ep)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.String())}, nil
}

// CheckEndpoint returns the error New would return for Options.Endpoint ep, or nil.
func CheckEndpoint(ep string) error {
	_, err := endpointOptions(ep)
	return err
}

// Enabled reports whether t makes spans. A nil Tracer is off.
func (t *Tracer) Enabled() bool { return t != nil && t.tracer != nil }

// Start starts the span name, a child of the span context in ctx, with attrs; opts may
// set its start time (trace.WithTimestamp). It must be called only when Enabled.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs []attribute.KeyValue, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	opts = append(opts, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return t.tracer.Start(ctx, name, opts...)
}

// Shutdown flushes the spans an Endpoint's exporter holds and stops it, until ctx ends;
// it does nothing for a Tracer that is off or made from a Provider. Idempotent.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// propagator reads and writes the W3C traceparent and tracestate.
var propagator = propagation.TraceContext{}

// Inject returns the span context of ctx as W3C traceparent and tracestate; "", "" when
// ctx holds no valid one.
func Inject(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	var c carrier
	propagator.Inject(ctx, &c)
	return c.parent, c.state
}

// Extract returns ctx with the remote span context that traceparent and tracestate
// state; ctx itself when traceparent is empty or malformed.
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, &carrier{parent: traceparent, state: tracestate})
}

// carrier is the two headers as a propagation.TextMapCarrier, without a map.
type carrier struct{ parent, state string }

const (
	headerParent = "traceparent"
	headerState  = "tracestate"
)

func (c *carrier) Get(key string) string {
	switch key {
	case headerParent:
		return c.parent
	case headerState:
		return c.state
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case headerParent:
		c.parent = value
	case headerState:
		c.state = value
	}
}

func (c *carrier) Keys() []string { return []string{headerParent, headerState} }
