package protocol

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
)

func TestToTaskFromTask(t *testing.T) {
	for _, w := range []Task{sampleTask(),
		{ID: "a", Type: "b", Schedule: Schedule{Kind: task.KindAt, At: 1_700_000_000_123_456_789}, Durability: Ephemeral},
		{Namespace: "n", ID: "a", Type: "b", Schedule: Schedule{Kind: task.KindEvery, Interval: int64(time.Second), Anchor: task.FixedDelay}, Durability: Durable},
		{ID: "x", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 5}, Durability: Durable, Exclusive: true},
		{ID: "c", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 5}, Durability: Ephemeral, ConcurrencyKey: "db", ConcurrencyLimit: 3},
		{ID: "c", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 5}, Durability: Ephemeral, ConcurrencyKey: "db"},
		{ID: "d", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 5}, Durability: Ephemeral, DependsOn: &task.Deps{On: []string{"a", "b"}}},
		{ID: "e", Type: "b", Schedule: Schedule{Kind: task.KindAt, At: 7}, Durability: Ephemeral, DependsOn: &task.Deps{On: []string{"d"}, OnParentFailure: task.ParentRunAnyway}},
	} {
		ct, err := ToTask(&w)
		if err != nil {
			t.Fatalf("ToTask(%+v): %v", w, err)
		}
		back, err := FromTask(ct, w.Durability)
		if err != nil {
			t.Fatal(err)
		}
		if w.Namespace == "" {
			w.Namespace = task.DefaultNamespace
		}
		if !reflect.DeepEqual(back, w) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", back, w)
		}
	}
}

func TestToTaskErrors(t *testing.T) {
	base := func() Task {
		return Task{ID: "a", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 1}, Durability: Ephemeral}
	}
	cases := []struct {
		name  string
		edit  func(*Task)
		code  Code
		field string
	}{
		{"no durability", func(w *Task) { w.Durability = 0 }, CodeBadField, "durability"},
		{"partition", func(w *Task) { w.Partition = 1 }, CodeBadField, "partition"},
		{"empty id", func(w *Task) { w.ID = "" }, CodeInvalidTask, "tid"},
		{"long id", func(w *Task) { w.ID = string(make([]byte, task.MaxIDLen+1)) }, CodeInvalidTask, "tid"},
		{"bad utf8 ns", func(w *Task) { w.Namespace = "\xff" }, CodeInvalidTask, "ns"},
		{"empty type", func(w *Task) { w.Type = "" }, CodeInvalidTask, "type"},
		{"negative timeout", func(w *Task) { w.Timeout = -1 }, CodeInvalidTask, "timeout_ns"},
		{"huge timeout", func(w *Task) { w.Timeout = math.MaxInt64 }, CodeInvalidTask, "timeout_ns"},
		{"misfire", func(w *Task) { w.Misfire = 9 }, CodeBadField, "misfire"},
		{"kind", func(w *Task) { w.Schedule.Kind = 0 }, CodeBadField, "schedule.kind"},
		{"stray", func(w *Task) { w.Schedule.Cron = "* * * * *" }, CodeBadField, "schedule.cron"},
		{"negative delay", func(w *Task) { w.Schedule.Delay = -5 }, CodeInvalidTask, "schedule.delay"},
		{"short interval", func(w *Task) { w.Schedule = Schedule{Kind: task.KindEvery, Interval: 10} }, CodeInvalidTask, "schedule.interval"},
		{"bad cron", func(w *Task) { w.Schedule = Schedule{Kind: task.KindCron, Cron: "61 * * * *"} }, CodeInvalidTask, "schedule.cron"},
		{"bad tz", func(w *Task) { w.Schedule = Schedule{Kind: task.KindCron, Cron: "@daily", TZ: "Mars/Olympus"} }, CodeBadField, "schedule.tz"},
		{"long concurrency key", func(w *Task) { w.ConcurrencyKey = string(make([]byte, task.MaxConcurrencyKeyLen+1)) }, CodeInvalidTask, "concurrency_key"},
		{"bad utf8 concurrency key", func(w *Task) { w.ConcurrencyKey = "\xff" }, CodeInvalidTask, "concurrency_key"},
		{"huge concurrency limit", func(w *Task) { w.ConcurrencyKey, w.ConcurrencyLimit = "k", task.MaxConcurrencyLimit+1 }, CodeInvalidTask, "concurrency_limit"},
		{"concurrency limit without a key", func(w *Task) { w.ConcurrencyLimit = 2 }, CodeInvalidTask, "concurrency_limit"},
		{"parent policy without parents", func(w *Task) { w.DependsOn = &task.Deps{OnParentFailure: task.ParentRunAnyway} }, CodeInvalidTask, "on_parent_failure"},
		{"parent policy unknown", func(w *Task) { w.DependsOn = &task.Deps{On: []string{"p"}, OnParentFailure: 7} }, CodeBadField, "on_parent_failure"},
		{"empty parent", func(w *Task) { w.DependsOn = &task.Deps{On: []string{"p", ""}} }, CodeInvalidTask, "depends_on[1]"},
		{"long parent", func(w *Task) { w.DependsOn = &task.Deps{On: []string{string(make([]byte, task.MaxIDLen+1))}} }, CodeInvalidTask, "depends_on[0]"},
		{"self parent", func(w *Task) { w.DependsOn = &task.Deps{On: []string{"p", "a"}} }, CodeInvalidTask, "depends_on[1]"},
		{"parent twice", func(w *Task) { w.DependsOn = &task.Deps{On: []string{"p", "q", "p"}} }, CodeInvalidTask, "depends_on[2]"},
		{"parent twice, long list", func(w *Task) { w.DependsOn = &task.Deps{On: append(manyIDs(20), "p3")} }, CodeInvalidTask, "depends_on[20]"},
		{"too many parents", func(w *Task) { w.DependsOn = &task.Deps{On: manyIDs(MaxDependsOn + 1)} }, CodeBadField, "depends_on"},
		{"recurring child", func(w *Task) {
			w.Schedule, w.DependsOn = Schedule{Kind: task.KindEvery, Interval: int64(time.Second)}, &task.Deps{On: []string{"p"}}
		}, CodeInvalidTask, "depends_on"},
		{"local tz", func(w *Task) { w.Schedule = Schedule{Kind: task.KindCron, Cron: "@daily", TZ: "Local"} }, CodeBadField, "schedule.tz"},
		{"traversal tz", func(w *Task) { w.Schedule = Schedule{Kind: task.KindCron, Cron: "@daily", TZ: "../../etc/passwd"} }, CodeBadField, "schedule.tz"},
		{"attempts", func(w *Task) { w.Retry.MaxAttempts = 1001 }, CodeInvalidTask, "retry.max_attempts"},
		{"jitter", func(w *Task) { w.Retry.Jitter = 2 }, CodeInvalidTask, "retry.jitter"},
		{"nan multiplier", func(w *Task) { w.Retry.Multiplier = math.NaN() }, CodeInvalidTask, "retry.multiplier"},
		{"small multiplier", func(w *Task) { w.Retry.Multiplier = 0.5 }, CodeInvalidTask, "retry.multiplier"},
		{"negative initial", func(w *Task) { w.Retry.InitialBackoff = -1 }, CodeInvalidTask, "retry.initial_backoff_ns"},
		{"negative max retry", func(w *Task) { w.Retry.MaxRetry = -1 }, CodeInvalidTask, "retry.max_retry_ns"},
		{"max below initial", func(w *Task) { w.Retry.InitialBackoff, w.Retry.MaxBackoff = int64(time.Hour), int64(time.Minute) }, CodeInvalidTask, "retry.max_backoff_ns"},
		{"max beyond horizon", func(w *Task) { w.Retry.MaxBackoff = math.MaxInt64 }, CodeInvalidTask, "retry.max_backoff_ns"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := base()
			tc.edit(&w)
			_, err := ToTask(&w)
			var pe *Error
			if !errors.As(err, &pe) || pe.Code != tc.code || pe.Field != tc.field {
				t.Fatalf("got %v; want %v on %q", err, tc.code, tc.field)
			}
		})
	}
}

func TestFromTaskErrors(t *testing.T) {
	for name, ct := range map[string]task.Task{
		"year 2":      {ID: "a", Type: "b", Schedule: task.At(time.Date(2, 1, 1, 0, 0, 0, 0, time.UTC))},
		"fixed zone":  {ID: "a", Type: "b", Schedule: task.Cron("@daily", time.FixedZone("X", 3600))},
		"local zone":  {ID: "a", Type: "b", Schedule: task.Cron("@daily", time.Local)},
		"neg attempt": {ID: "a", Type: "b", Schedule: task.After(1), Retry: task.RetryPolicy{MaxAttempts: -1}},
	} {
		if _, err := FromTask(ct, Durable); !errors.Is(err, ErrBadField) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func TestFromInfo(t *testing.T) {
	now := time.Unix(1_700_000_000, 5).UTC()
	in := task.Info{Task: task.Task{ID: "a", Type: "b", Schedule: task.After(time.Second)}, State: task.Failed, Attempts: 1,
		LastError: "x", NextRun: now, Runs: 2, History: []task.AttemptRecord{{Attempt: 1, Start: now, End: now, Err: "x"}}}
	w, err := FromInfo(in, Ephemeral)
	if err != nil || w.NextRun != now.UnixNano() || len(w.History) != 1 || w.History[0].Err != "x" {
		t.Fatalf("%+v %v", w, err)
	}
	dl, err := FromDeadLetter(task.DeadLetter{Task: in.Task, DiedAt: now, Reason: "r"}, Durable)
	if err != nil || dl.DiedAt != now.UnixNano() || dl.Task.Durability != Durable {
		t.Fatalf("%+v %v", dl, err)
	}
}

// The exclusive flag crosses the wire (and is absent when false).
func TestExclusiveOnTheWire(t *testing.T) {
	for _, excl := range []bool{true, false} {
		submitRoundTrip(t, Task{ID: "x", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 5}, Durability: Durable, Exclusive: excl})
	}
}

// submitRoundTrip encodes w in a SUBMIT frame, checks that it decodes back to w, and
// returns the frame.
func submitRoundTrip(t *testing.T, w Task) []byte {
	t.Helper()
	frame, err := AppendFrame(nil, &Submit{ID: 1, Task: w}, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(frame[4:])
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(*Submit).Task; !reflect.DeepEqual(got, w) {
		t.Fatalf("decoded %+v, want %+v", got, w)
	}
	return frame
}

// A task's concurrency key and limit cross the wire, and are absent when not set.
func TestConcurrencyOnTheWire(t *testing.T) {
	for _, w := range []Task{
		{ID: "x", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 5}, Durability: Durable, ConcurrencyKey: "db", ConcurrencyLimit: 3},
		{ID: "x", Type: "b", Schedule: Schedule{Kind: task.KindAfter, Delay: 5}, Durability: Durable},
	} {
		frame := submitRoundTrip(t, w)
		if has := bytes.Contains(frame, []byte("concurrency_")); has != (w.ConcurrencyKey != "") {
			t.Errorf("frame of %+v carries concurrency keys: %v", w, has)
		}
	}
}

// FromTask refuses what the wire would silently change: a Concurrency with no key, or a
// negative limit.
func TestFromTaskRefusesBadConcurrency(t *testing.T) {
	for _, tc := range []struct {
		c     task.Concurrency
		field string
	}{
		{task.Concurrency{Limit: 2}, "concurrency_key"},
		{task.Concurrency{Key: "k", Limit: -1}, "concurrency_limit"},
	} {
		_, err := FromTask(task.Task{ID: "a", Type: "b", Schedule: task.After(0), Concurrency: &tc.c}, Ephemeral)
		var perr *Error
		if !errors.As(err, &perr) || perr.Code != CodeInvalidTask || perr.Field != tc.field {
			t.Errorf("FromTask with %+v: %v; want INVALID_TASK on %s", tc.c, err, tc.field)
		}
	}
}

// manyIDs returns n distinct task IDs: p0, p1, ...
func manyIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "p" + strconv.Itoa(i)
	}
	return out
}
