package client

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
	"github.com/tock-sched/tock/server/tracing"
	"github.com/tock-sched/tock/server/tracing/tracingtest"
)

// spansOf waits until r holds the spans names of task tid and returns them by name.
func spansOf(t *testing.T, r *tracingtest.Recorder, tid string, names ...string) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	var got map[string]sdktrace.ReadOnlySpan
	tockdtest.Eventually(t, "the spans of "+tid, func() bool {
		got = r.OfTask(tid)
		for _, n := range names {
			if got[n] == nil {
				return false
			}
		}
		return true
	})
	return got
}

// tracedWorker starts a server whose spans go to one recorder and a Worker whose spans
// go to another, handling typ with h; it returns a Client of the server.
func tracedWorker(t *testing.T, typ string, h HandlerFunc) (c *Client, server, worker *tracingtest.Recorder) {
	t.Helper()
	server, worker = tracingtest.New(t), tracingtest.New(t)
	s := tockdtest.Start(t, tockdtest.Options(tockd.Options{TracerProvider: server}))
	c = dialT(t, s.Addr)
	w := newWorkerT(t, s.Addr, WithTracerProvider(worker))
	if err := w.Handle(typ, h); err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	return c, server, worker
}

// The "done when": a task submitted with a trace context produces one trace
// whose spans cover submit, fire, the worker's handler and the ack. A real tockd (its
// spans in one recorder) and a client Worker (its spans in another): the submitter's
// root span is the parent of tock.submit, tock.fire and tock.ack; the fire span is the
// parent of the worker's tock.handle, whose context is the handler's; all share the
// root's trace ID. A failing task's retry and dead letter join its trace too.
func TestOneTraceFromSubmitToAck(t *testing.T) {
	inHandler := make(chan trace.SpanContext, 4)
	c, server, worker := tracedWorker(t, "traced", func(ctx context.Context, f *Fire) error {
		inHandler <- trace.SpanContextFromContext(ctx)
		if f.TaskID == "fails" {
			return errors.New("boom")
		}
		return nil
	})

	rootCtx, root := tracingtest.New(t).Tracer("submitter").Start(bounded(t), "submitter")
	if _, err := c.Submit(rootCtx, oneShot("ok", "traced", 0), protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	fails := oneShot("fails", "traced", 0)
	fails.Retry = task.RetryPolicy{MaxAttempts: 2, InitialBackoff: 1, MaxBackoff: 1}
	if _, err := c.Submit(rootCtx, fails, protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	root.End()
	waitState(t, c, "ok", task.Succeeded)
	waitState(t, c, "fails", task.Dead)
	rootSC := root.SpanContext()

	srv := spansOf(t, server, "ok", tracing.SpanSubmit, tracing.SpanFire, tracing.SpanAck)
	handle := spansOf(t, worker, "ok", tracing.SpanHandle)[tracing.SpanHandle]
	for _, name := range []string{tracing.SpanSubmit, tracing.SpanFire, tracing.SpanAck} {
		sp := srv[name]
		if sp.SpanContext().TraceID() != rootSC.TraceID() || sp.Parent().SpanID() != rootSC.SpanID() {
			t.Errorf("%s: trace %v parent %v; want a child of the submitter's span %v/%v",
				name, sp.SpanContext().TraceID(), sp.Parent().SpanID(), rootSC.TraceID(), rootSC.SpanID())
		}
	}
	fire := srv[tracing.SpanFire]
	if handle.SpanContext().TraceID() != rootSC.TraceID() || handle.Parent().SpanID() != fire.SpanContext().SpanID() || !handle.Parent().IsRemote() {
		t.Errorf("tock.handle: trace %v parent %v; want a child of tock.fire %v/%v",
			handle.SpanContext().TraceID(), handle.Parent().SpanID(), rootSC.TraceID(), fire.SpanContext().SpanID())
	}
	if tracingtest.Attr(handle, tracing.AttrRunID) != tracingtest.Attr(fire, tracing.AttrRunID) || tracingtest.Attr(handle, tracing.AttrAttempt) != "1" {
		t.Errorf("tock.handle attributes %v, tock.fire's %v: want the same run, attempt 1", handle.Attributes(), fire.Attributes())
	}
	// The handler ran in its span: its context's span is a tock.handle (ok's, or one of
	// fails' two), each ended once its handler returned.
	var contexts []trace.SpanContext
	for range 3 {
		contexts = append(contexts, tockdtest.Receive(t, inHandler, "a handler's context"))
	}
	tockdtest.Eventually(t, "three tock.handle spans", func() bool { return len(worker.Ended()) == 3 })
	handles := map[trace.SpanID]bool{}
	for _, s := range worker.Ended() {
		handles[s.SpanContext().SpanID()] = s.Name() == tracing.SpanHandle
	}
	for _, sc := range contexts {
		if !handles[sc.SpanID()] || sc.TraceID() != rootSC.TraceID() {
			t.Errorf("a handler's context has span %v/%v, not one of the worker's tock.handle spans", sc.TraceID(), sc.SpanID())
		}
	}
	if sp := spansOf(t, server, "fails", tracing.SpanRetry, tracing.SpanDeadLetter); sp[tracing.SpanRetry].SpanContext().TraceID() != rootSC.TraceID() ||
		sp[tracing.SpanDeadLetter].SpanContext().TraceID() != rootSC.TraceID() {
		t.Errorf("the failing task's retry and dead letter are not in the submitter's trace")
	}
	for _, s := range worker.Ended() {
		if tracingtest.Attr(s, tracing.AttrTaskID) == "fails" && s.Status().Code.String() != "Error" {
			t.Errorf("tock.handle of a failed run has status %v, want Error", s.Status())
		}
	}
}

// A context without a span submits no trace context: the server and the worker make no
// span, and the handler's context has none.
func TestUntracedSubmitMakesNoSpans(t *testing.T) {
	inHandler := make(chan trace.SpanContext, 1)
	c, server, worker := tracedWorker(t, "plain", func(ctx context.Context, f *Fire) error {
		inHandler <- trace.SpanContextFromContext(ctx)
		return nil
	})
	if _, err := c.Submit(bounded(t), oneShot("p", "plain", 0), protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	if sc := tockdtest.Receive(t, inHandler, "the handler's context"); sc.IsValid() {
		t.Errorf("the handler's context has span %v", sc)
	}
	waitState(t, c, "p", task.Succeeded)
	if n := len(server.Ended()) + len(worker.Ended()); n != 0 {
		t.Errorf("%d spans of an untraced task", n)
	}
}

// SubmitBatch gives every task the trace context of its ctx's span, but a task that
// names its own (task.Trace) keeps it; the server's tock.submit of each is a child of
// the context it was sent with.
func TestSubmitBatchCarriesTheTrace(t *testing.T) {
	c, server, _ := tracedWorker(t, "batch", func(context.Context, *Fire) error { return nil })
	rootCtx, root := tracingtest.New(t).Tracer("submitter").Start(bounded(t), "submitter")
	root.End()
	own := &task.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	mine := oneShot("own", "batch", 0)
	mine.Trace = own
	items, err := c.SubmitBatch(rootCtx, []task.Task{oneShot("b1", "batch", 0), mine}, protocol.Ephemeral)
	if err != nil || items[0].Err != nil || items[1].Err != nil {
		t.Fatalf("SubmitBatch: %+v, %v", items, err)
	}
	for tid, want := range map[string]trace.SpanContext{
		"b1":  root.SpanContext(),
		"own": trace.SpanContextFromContext(tracing.Extract(context.Background(), own.Parent, "")),
	} {
		s := spansOf(t, server, tid, tracing.SpanSubmit)[tracing.SpanSubmit]
		if s.SpanContext().TraceID() != want.TraceID() || s.Parent().SpanID() != want.SpanID() {
			t.Errorf("tock.submit of %s: trace %v parent %v, want a child of %v/%v",
				tid, s.SpanContext().TraceID(), s.Parent().SpanID(), want.TraceID(), want.SpanID())
		}
	}
}
