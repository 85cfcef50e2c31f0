package protocol

import (
	"strings"
	"testing"

	"github.com/tock-sched/tock/core/task"
)

// TestValidTraceparent: the W3C form is accepted, and every way of breaking it, one
// field at a time, is not.
func TestValidTraceparent(t *testing.T) {
	const ok = sampleTraceparent // 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{ok, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true}, // not sampled: still a context
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true}, // a later version, 55 bytes
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz", true},
		{"", false},
		{ok[:54], false},                                     // one byte short
		{ok + "-", false},                                    // version 00 is exactly 55 bytes
		{"01" + ok[2:] + "x", false},                         // a later version: a "-" must follow the flags
		{"ff" + ok[2:], false},                               // version ff is invalid
		{strings.ToUpper(ok), false},                         // upper case
		{"0g" + ok[2:], false},                               // not hex
		{ok[:2] + "_" + ok[3:], false},                       // separators
		{ok[:35] + "_" + ok[36:], false},                     //
		{ok[:52] + "_" + ok[53:], false},                     //
		{ok[:3] + strings.Repeat("0", 32) + ok[35:], false},  // all-zero trace ID
		{ok[:36] + strings.Repeat("0", 16) + ok[52:], false}, // all-zero parent ID
		{ok[:53] + "0x", false},                              // flags not hex
	} {
		if got := ValidTraceparent(tc.s); got != tc.want {
			t.Errorf("ValidTraceparent(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// TestTraceContextThroughToTask: ToTask keeps a valid trace context as task.Trace and
// FromTask gives it back; a malformed traceparent is dropped with its tracestate, the
// task accepted; a tracestate alone is dropped.
func TestTraceContextThroughToTask(t *testing.T) {
	base := Task{ID: "t", Type: "x", Schedule: Schedule{Kind: task.KindAfter}, Durability: Ephemeral}
	for _, tc := range []struct {
		name       string
		parent, st string
		want       *task.Trace
	}{
		{"valid", sampleTraceparent, "congo=t61rcWkgMzE", &task.Trace{Parent: sampleTraceparent, State: "congo=t61rcWkgMzE"}},
		{"valid without state", sampleTraceparent, "", &task.Trace{Parent: sampleTraceparent}},
		{"malformed", "00-xyz", "congo=t61rcWkgMzE", nil},
		{"state alone", "", "congo=t61rcWkgMzE", nil},
		{"none", "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := base
			w.Traceparent, w.Tracestate = tc.parent, tc.st
			got, err := ToTask(&w)
			if err != nil {
				t.Fatalf("ToTask: %v", err)
			}
			if (got.Trace == nil) != (tc.want == nil) || got.Trace != nil && *got.Trace != *tc.want {
				t.Fatalf("Trace %+v, want %+v", got.Trace, tc.want)
			}
			back, err := FromTask(got, Ephemeral)
			if err != nil {
				t.Fatal(err)
			}
			var wantParent, wantState string
			if tc.want != nil {
				wantParent, wantState = tc.want.Parent, tc.want.State
			}
			if back.Traceparent != wantParent || back.Tracestate != wantState {
				t.Fatalf("FromTask gives %q, %q; want %q, %q", back.Traceparent, back.Tracestate, wantParent, wantState)
			}
		})
	}
}

// TestTraceFieldLimits: a traceparent or tracestate over its limit is BAD_FIELD, naming
// it; at the limit it decodes.
func TestTraceFieldLimits(t *testing.T) {
	for _, tc := range []struct {
		key   string
		limit int
	}{{"traceparent", MaxTraceparentLen}, {"tracestate", MaxTracestateLen}} {
		for _, n := range []int{tc.limit, tc.limit + 1} {
			w := Task{ID: "t", Type: "x", Schedule: Schedule{Kind: task.KindAfter}, Durability: Ephemeral}
			f := &Fire{Namespace: "default", TaskID: "t", TaskType: "x", RunID: 1, Attempt: 1, Durability: Ephemeral}
			v := strings.Repeat("a", n)
			if tc.key == "traceparent" {
				w.Traceparent, f.Traceparent = v, v
			} else {
				w.Tracestate, f.Tracestate = v, v
			}
			for _, m := range []Message{&Submit{ID: 1, Task: w}, f} {
				frame, err := AppendFrame(nil, m, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, err = Decode(frame[headerLen:])
				field := tc.key
				if m.Type() == TypeSubmit {
					field = "task." + tc.key
				}
				switch e, _ := err.(*Error); {
				case n <= tc.limit && err != nil:
					t.Errorf("%v with a %s of %d bytes (the limit): %v", m.Type(), tc.key, n, err)
				case n > tc.limit && (e == nil || e.Code != CodeBadField || e.Field != field):
					t.Errorf("%v with a %s of %d bytes (over %d): %v, want BAD_FIELD %s", m.Type(), tc.key, n, tc.limit, err, field)
				}
			}
		}
	}
}
