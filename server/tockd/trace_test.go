package tockd

import (
	"context"
	"errors"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tracing"
	"github.com/tock-sched/tock/server/tracing/tracingtest"
)

// W3C Trace Context's example traceparent, and a tracestate.
const (
	testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testTracestate  = "congo=t61rcWkgMzE"
)

func tracedTask(tk protocol.Task) protocol.Task {
	tk.Traceparent, tk.Tracestate = testTraceparent, testTracestate
	return tk
}

// A server that exports no traces still passes a task's trace context on: its FIRE
// carries the submitted traceparent and tracestate, and GET shows them; a malformed
// traceparent is dropped with its tracestate (PROTOCOL.md, Trace context), the task
// accepted.
func TestTraceContextReachesTheFire(t *testing.T) {
	_, c, w := startWithWorker(t, Options{}, 10)
	bad := workTask("bad", 1)
	bad.Traceparent, bad.Tracestate = "00-not-a-traceparent", testTracestate
	submit(t, c, 2, tracedTask(workTask("traced", 1)))
	submit(t, c, 3, bad)
	submit(t, c, 4, workTask("plain", 1))
	want := map[string][2]string{"traced": {testTraceparent, testTracestate}, "bad": {}, "plain": {}}
	for range 3 {
		f := w.fire()
		exp, ok := want[f.TaskID]
		if !ok {
			t.Fatalf("FIRE of %q, which was not submitted or fired twice", f.TaskID)
		}
		delete(want, f.TaskID)
		if got := [2]string{f.Traceparent, f.Tracestate}; got != exp {
			t.Errorf("FIRE of %s carries trace context %q, want %q", f.TaskID, got, exp)
		}
		if ti, ok := c.call(&protocol.Get{ID: 10, TaskRef: protocol.TaskRef{TaskID: f.TaskID}}).(*protocol.TaskInfo); !ok ||
			ti.Info.Task.Traceparent != exp[0] || ti.Info.Task.Tracestate != exp[1] {
			t.Errorf("GET %s: %+v, want trace context %q", f.TaskID, ti, exp)
		}
		wantOK(t, w.ack(f.RunID))
	}
}

// A durable task's trace context is in its record: the next leader's FIRE carries it.
func TestDurableTraceContextSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	ds := startDurable(t, st, nil)
	c := connect(t, ds.addr)
	if r, ok := c.call(&protocol.Submit{ID: 2, Task: tracedTask(durableWorkTask("kept"))}).(*protocol.TaskStatus); !ok || r.Durability != protocol.Durable {
		t.Fatalf("durable submit answered %+v", r)
	}
	ds.stop(t) // no worker yet: the task waits, its record stays
	if err := st.Close(); err != nil {
		t.Fatalf("store Close: %v", err)
	}

	st = openStore(t, dir)
	ds = startDurable(t, st, nil)
	w := connectWorker(t, ds.addr, 1, "w")
	f := w.fire()
	if f.TaskID != "kept" || f.Traceparent != testTraceparent || f.Tracestate != testTracestate {
		t.Fatalf("FIRE after the restart: %+v, want task kept with trace context %q, %q", f, testTraceparent, testTracestate)
	}
}

// span waits for the ended span name of task tid and returns it.
func span(t *testing.T, r *tracingtest.Recorder, name, tid string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	if !waitUntil(func() bool { found = r.OfTask(tid)[name]; return found != nil }) {
		t.Fatalf("no %s span of task %s within %v; ended: %v", name, tid, waitBound, r.Names())
	}
	return found
}

// rootSpan is the submitter's span: a root of its own, exported by no one.
func rootSpan(t *testing.T) (traceparent string, root trace.SpanContext) {
	t.Helper()
	ctx, sp := tracingtest.New(t).Tracer("test").Start(context.Background(), "submitter")
	sp.End()
	p, _ := tracing.Inject(ctx)
	return p, sp.SpanContext()
}

// With a TracerProvider, a traced task's submit, fire and ack, and a failing task's
// retry and dead letter, are spans of the submitter's trace, children of its span, with
// the task's attributes; each FIRE carries its fire span's context; an untraced task
// makes no span.
func TestServerSpansOfATracedTask(t *testing.T) {
	rec := tracingtest.New(t)
	// The engine New makes (the spans that end attempts come from its events).
	_, c, w := startWithWorker(t, Options{TracerProvider: rec, EngineOptions: []task.Option{task.WithWorkers(2)}}, 10)
	tp, root := rootSpan(t)
	ok, fails := workTask("ok", 1), workTask("fails", 2)
	ok.Traceparent, fails.Traceparent = tp, tp
	submit(t, c, 2, ok)
	submit(t, c, 3, fails)
	submit(t, c, 4, workTask("plain", 1))

	fires := map[string][]*protocol.Fire{}
	for range 3 {
		f := w.fire()
		fires[f.TaskID] = append(fires[f.TaskID], f)
		if f.TaskID == "fails" {
			wantOK(t, w.req(&protocol.Nack{RunID: f.RunID, Err: "boom", Retryable: true}))
		} else {
			wantOK(t, w.ack(f.RunID))
		}
	}
	f := w.fire() // the retry of "fails"
	if f.TaskID != "fails" || f.Attempt != 2 {
		t.Fatalf("FIRE %+v, want the retry of fails", f)
	}
	fires[f.TaskID] = append(fires[f.TaskID], f)
	wantOK(t, w.req(&protocol.Nack{RunID: f.RunID, Err: "boom", Retryable: true}))

	check := func(name, tid string) sdktrace.ReadOnlySpan {
		t.Helper()
		s := span(t, rec, name, tid)
		if s.SpanContext().TraceID() != root.TraceID() || s.Parent().SpanID() != root.SpanID() || !s.Parent().IsRemote() {
			t.Errorf("%s of %s: trace %v parent %v, want a child of the submitter's span %v/%v",
				name, tid, s.SpanContext().TraceID(), s.Parent().SpanID(), root.TraceID(), root.SpanID())
		}
		if tracingtest.Attr(s, tracing.AttrNamespace) != task.DefaultNamespace || tracingtest.Attr(s, tracing.AttrType) != "w" {
			t.Errorf("%s of %s: attributes %v", name, tid, s.Attributes())
		}
		return s
	}
	check(tracing.SpanSubmit, "ok")
	check(tracing.SpanSubmit, "fails")
	check(tracing.SpanAck, "ok")
	check(tracing.SpanRetry, "fails")
	check(tracing.SpanDeadLetter, "fails")
	for tid, fs := range map[string][]*protocol.Fire{"ok": fires["ok"], "fails": fires["fails"]} {
		for _, f := range fs {
			var fire sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == tracing.SpanFire && tracingtest.Attr(s, tracing.AttrRunID) == strconv.FormatUint(f.RunID, 10) {
					fire = s
				}
			}
			if fire == nil {
				t.Fatalf("no fire span of run %d (%s); ended: %v", f.RunID, tid, rec.Names())
			}
			check(tracing.SpanFire, tid)
			sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), f.Traceparent, f.Tracestate))
			if sc.SpanID() != fire.SpanContext().SpanID() || sc.TraceID() != root.TraceID() {
				t.Errorf("FIRE of run %d carries %q, want the fire span's context %v/%v", f.RunID, f.Traceparent, root.TraceID(), fire.SpanContext().SpanID())
			}
			if tracingtest.Attr(fire, tracing.AttrAttempt) != strconv.FormatUint(f.Attempt, 10) {
				t.Errorf("fire span of run %d: attempt %s, want %d", f.RunID, tracingtest.Attr(fire, tracing.AttrAttempt), f.Attempt)
			}
		}
	}
	if fs := fires["plain"]; len(fs) != 1 || fs[0].Traceparent != "" {
		t.Errorf("the untraced task's FIREs: %+v", fs)
	}
	c.waitState(20, "plain", task.Succeeded)
	for _, s := range rec.Ended() {
		if tracingtest.Attr(s, tracing.AttrTaskID) == "plain" {
			t.Errorf("the untraced task made span %s", s.Name())
		}
	}
}

// A bad OTLPEndpoint, or one beside a TracerProvider, fails New with ErrInvalidOption.
func TestTracingOptionsRefused(t *testing.T) {
	for _, o := range []Options{
		{OTLPEndpoint: "ftp://collector:4318"},
		{OTLPEndpoint: "collector"},
		{OTLPEndpoint: "127.0.0.1:4318", TracerProvider: tracingtest.New(t)},
	} {
		if _, err := New(WithOptions(o)); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("New(%+v): %v, want ErrInvalidOption", o, err)
		}
	}
}

// The trace context is not part of a durable task's content: a resubmit of the same
// task under another span is the same task's retry (answered with its status, as held:
// its first trace context), not EXISTS.
func TestDurableRetryUnderAnotherSpanIsARetry(t *testing.T) {
	_, ds := startLeader(t)
	c := connect(t, ds.addr)
	first := tracedTask(durableWorkTask("again"))
	if r, ok := c.call(&protocol.Submit{ID: 2, Task: first}).(*protocol.TaskStatus); !ok || r.Durability != protocol.Durable {
		t.Fatalf("durable submit answered %+v", r)
	}
	retry := first
	retry.Traceparent, retry.Tracestate = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""
	if r := c.call(&protocol.Submit{ID: 3, Task: retry}); r.Type() != protocol.TypeTaskStatus || r.(*protocol.TaskStatus).Durability != protocol.Durable {
		t.Fatalf("the same durable task under another span answered %v %+v, want its TASK_STATUS", r.Type(), r)
	}
	ti, ok := c.call(&protocol.Get{ID: 4, TaskRef: protocol.TaskRef{TaskID: "again"}}).(*protocol.TaskInfo)
	if !ok || ti.Info.Task.Traceparent != testTraceparent {
		t.Fatalf("GET after the retry: %+v, want the first submit's trace context", ti)
	}
}
