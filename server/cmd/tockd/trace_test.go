package main

import (
	"context"
	"errors"
	"net"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
	"github.com/tock-sched/tock/server/tracing"
	"github.com/tock-sched/tock/server/tracing/tracingtest"
)

// -otlp-endpoint exports over OTLP/HTTP: a traced task run by a Worker reaches the
// collector, once tockd drains, as tock.submit, tock.fire and tock.ack spans of the
// submitter's trace, posted to /v1/traces.
func TestOTLPEndpointExports(t *testing.T) {
	col := tracingtest.NewCollector(t)
	cfg, err := parseConfig([]string{"-addr", "127.0.0.1:0", "-admin-addr", "off", "-log-level", "warn",
		"-drain-timeout", "10s", "-otlp-endpoint", col.URL}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan net.Addr, 1)
	cfg.ready = func(c, _ net.Addr) { addrs <- c }
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	addr := tockdtest.Receive(t, addrs, "tockd's client port").String()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := client.NewWorker(addr)
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan struct{}, 1)
	if err := w.Handle("traced", func(context.Context, *client.Fire) error { handled <- struct{}{}; return nil }); err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()

	rootCtx, root := tracingtest.New(t).Tracer("submitter").Start(ctx, "submitter")
	if _, err := c.Submit(rootCtx, task.Task{ID: "t", Type: "traced", Schedule: task.After(0)}, protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	root.End()
	tockdtest.Receive(t, handled, "the handler's run")
	tockdtest.Eventually(t, "task t SUCCEEDED", func() bool {
		in, err := c.Get(ctx, "", "t")
		return err == nil && in.State == task.Succeeded
	})
	stopWorker()
	if err := tockdtest.Receive(t, workerDone, "the worker's return"); !errors.Is(err, context.Canceled) {
		t.Errorf("Worker.Run: %v", err)
	}
	stop() // the drain's Shutdown flushes the exporter
	if err := tockdtest.Receive(t, done, "tockd's return"); err != nil {
		t.Fatalf("run: %v", err)
	}

	if p := col.Paths(); len(p) != 1 || p["/v1/traces"] == 0 {
		t.Errorf("the collector was posted to %v, want /v1/traces", p)
	}
	want := root.SpanContext().TraceID()
	got := col.Spans()
	for _, name := range []string{tracing.SpanSubmit, tracing.SpanFire, tracing.SpanAck} {
		if ss := got[name]; len(ss) != 1 || trace.TraceID(ss[0].TraceId) != want || ss[0].Service != "tockd" {
			t.Errorf("collector got %s %v, want one in trace %v of service tockd (all: %v)", name, ss, want, got)
		}
	}
}
