package tockd

import (
	"testing"

	"github.com/tock-sched/tock/server/protocol"
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
