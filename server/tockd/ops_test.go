package tockd

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

func TestSubmitGetCancelList(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr)

	w := wireTask("job-1", time.Hour)
	w.Payload = []byte("hi")
	st, ok := c.call(&protocol.Submit{ID: 2, Task: w}).(*protocol.TaskStatus)
	if !ok || st.TaskID != "job-1" || st.Namespace != task.DefaultNamespace || st.State != task.Pending ||
		st.Durability != protocol.Ephemeral || st.NextRun <= time.Now().UnixNano() {
		t.Fatalf("SUBMIT reply %+v", st)
	}
	wantError(t, c.call(&protocol.Submit{ID: 3, Task: w}), protocol.CodeExists, "")
	w.Version = 2 // a higher version replaces it
	if st := c.call(&protocol.Submit{ID: 4, Task: w}).(*protocol.TaskStatus); st.Version != 2 {
		t.Fatalf("replacement reply %+v", st)
	}

	info := c.call(&protocol.Get{ID: 5, TaskRef: protocol.TaskRef{TaskID: "job-1"}}).(*protocol.TaskInfo).Info
	if info.State != task.Pending || string(info.Task.Payload) != "hi" || info.Task.Durability != protocol.Ephemeral ||
		info.Task.Schedule.Delay != int64(time.Hour) || info.NextRun == 0 {
		t.Fatalf("GET %+v", info)
	}

	c.send(&protocol.Submit{ID: 6, Task: wireTask("job-2", time.Hour)})
	c.recv()
	page := c.call(&protocol.List{ID: 7, Limit: 1}).(*protocol.TaskPage)
	if len(page.Items) != 1 || page.Items[0].Task.ID != "job-1" || page.Next == "" {
		t.Fatalf("LIST page 1 %+v", page)
	}
	page = c.call(&protocol.List{ID: 8, Cursor: page.Next}).(*protocol.TaskPage)
	if len(page.Items) != 1 || page.Items[0].Task.ID != "job-2" || page.Next != "" {
		t.Fatalf("LIST page 2 %+v", page)
	}

	st = c.call(&protocol.Cancel{ID: 9, TaskRef: protocol.TaskRef{TaskID: "job-1"}}).(*protocol.TaskStatus)
	if st.State != task.Cancelled {
		t.Fatalf("CANCEL reply %+v", st)
	}
	// Cancelling a finished task changes nothing and answers its final state, like the
	// first cancel: UNEXPECTED is for protocol misuse, and this is none.
	if r, ok := c.call(&protocol.Cancel{ID: 10, TaskRef: protocol.TaskRef{TaskID: "job-1"}}).(*protocol.TaskStatus); !ok ||
		r.State != task.Cancelled || r.TaskID != "job-1" || r.Durability != protocol.Ephemeral {
		t.Fatalf("second CANCEL: %+v, want TASK_STATUS CANCELLED", r)
	}
	page = c.call(&protocol.List{ID: 11, State: task.Cancelled}).(*protocol.TaskPage)
	if len(page.Items) != 1 || page.Items[0].Task.ID != "job-1" {
		t.Fatalf("LIST CANCELLED %+v", page)
	}
	wantError(t, c.call(&protocol.List{ID: 12, Cursor: "not-a-cursor"}), protocol.CodeBadField, "cursor")
}

// TestCancelFinishedTask: CANCEL of a task that already SUCCEEDED or went DEAD changes
// nothing and answers TASK_STATUS with that final state (as a second CANCEL answers
// CANCELLED). UNEXPECTED is for protocol misuse; this is a well-formed request.
func TestCancelFinishedTask(t *testing.T) {
	ts := startServer(t, Options{})
	ts.handle(t, "t", func(ctx context.Context, r *task.Run) error {
		if r.Task.ID == "doomed" {
			return task.NonRetryable(errors.New("no"))
		}
		return nil
	})
	c := connect(t, ts.addr)
	for i, want := range map[string]task.State{"fine": task.Succeeded, "doomed": task.Dead} {
		c.call(&protocol.Submit{ID: 2, Task: wireTask(i, 0)})
		c.waitState(3, i, want)
		r := c.call(&protocol.Cancel{ID: 4, TaskRef: protocol.TaskRef{TaskID: i}})
		st, ok := r.(*protocol.TaskStatus)
		if !ok || st.State != want || st.TaskID != i {
			t.Fatalf("CANCEL of %s (%v): %v %+v, want TASK_STATUS %v", i, want, r.Type(), r, want)
		}
		c.waitState(5, i, want) // and it stays so
	}
}

func TestTaskRunsInEngine(t *testing.T) {
	ts := startServer(t, Options{})
	ran := make(chan string, 1)
	ts.handle(t, "t", func(ctx context.Context, r *task.Run) error {
		ran <- string(r.Task.Payload)
		return nil
	})
	c := connect(t, ts.addr)
	w := wireTask("now", 0)
	w.Payload = []byte("run me")
	if st := c.call(&protocol.Submit{ID: 2, Task: w}).(*protocol.TaskStatus); st.State != task.Pending && st.State != task.Due {
		t.Fatalf("SUBMIT %+v", st)
	}
	select {
	case p := <-ran:
		if p != "run me" {
			t.Fatalf("handler got payload %q", p)
		}
	case <-time.After(waitBound):
		t.Fatalf("the handler did not run within %v", waitBound)
	}
	info := c.waitState(3, "now", task.Succeeded)
	if info.Runs != 1 {
		t.Fatalf("runs %d, want 1", info.Runs)
	}
	st := c.call(&protocol.Stats{ID: 4}).(*protocol.StatsReply)
	if st.Counters["submitted"] != 1 || st.Counters["succeeded"] != 1 || st.Counters["started"] != 1 ||
		st.Gauges["connections"] != 1 || st.Gauges["is_leader"] != 1 {
		t.Fatalf("STATS %+v", st)
	}
	for _, name := range []string{"submitted", "started", "succeeded", "failed", "retried", "dead", "cancelled", "timed_out", "misfired", "redelivered",
		"carried", "durable_commits", "carry_refused_not_held", "carry_refused_changed", "carry_refused_started",
		"carry_refused_expired", "carry_refused_stopped_leading", "carry_refused_ended", "carry_refused_twice", "limit_waits"} {
		if _, ok := st.Counters[name]; !ok {
			t.Errorf("counter %q missing", name)
		}
	}
	for _, name := range []string{"tasks", "queued", "running", "dead_letters", "connections", "workers", "is_leader", "waiting_on_limit"} {
		if _, ok := st.Gauges[name]; !ok {
			t.Errorf("gauge %q missing", name)
		}
	}
}

func TestDeadLetters(t *testing.T) {
	ts := startServer(t, Options{})
	var fail atomic.Bool
	fail.Store(true)
	ts.handle(t, "t", func(ctx context.Context, r *task.Run) error {
		if fail.Load() {
			return task.NonRetryable(errors.New("boom"))
		}
		return nil
	})
	c := connect(t, ts.addr)
	c.call(&protocol.Submit{ID: 2, Task: wireTask("d1", 0)})
	c.call(&protocol.Submit{ID: 3, Task: wireTask("d2", 0)})
	c.waitState(4, "d1", task.Dead)
	c.waitState(5, "d2", task.Dead)
	page := c.call(&protocol.DLQList{ID: 6}).(*protocol.DLQPage)
	if len(page.Items) != 2 || page.Items[0].Task.Durability != protocol.Ephemeral || page.Items[0].DiedAt == 0 {
		t.Fatalf("DLQ_PAGE %+v", page)
	}
	wantError(t, c.call(&protocol.DLQList{ID: 7, Cursor: "x"}), protocol.CodeBadField, "cursor")
	wantError(t, c.call(&protocol.DLQRequeue{ID: 8, TaskRef: protocol.TaskRef{TaskID: "nope"}}), protocol.CodeNotFound, "")
	if n := c.call(&protocol.DLQPurge{ID: 9, TaskID: "nope"}).(*protocol.Purged).Count; n != 0 {
		t.Fatalf("purge of an unknown dead letter: %d", n)
	}
	if n := c.call(&protocol.DLQPurge{ID: 10, TaskID: "d2"}).(*protocol.Purged).Count; n != 1 {
		t.Fatalf("purge d2: %d", n)
	}
	fail.Store(false)
	st := c.call(&protocol.DLQRequeue{ID: 11, TaskRef: protocol.TaskRef{TaskID: "d1"}}).(*protocol.TaskStatus)
	if st.TaskID != "d1" || st.Durability != protocol.Ephemeral {
		t.Fatalf("DLQ_REQUEUE %+v", st)
	}
	c.waitState(12, "d1", task.Succeeded)
	if n := c.call(&protocol.DLQPurge{ID: 13, All: true}).(*protocol.Purged).Count; n != 0 {
		t.Fatalf("purge all after requeue and purge: %d left", n)
	}
}

func TestSubmitBatch(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr)
	bad := wireTask("b2", 0)
	bad.Schedule = protocol.Schedule{Kind: task.KindCron, Cron: "61 * * * *"}
	durable := wireTask("b3", time.Hour)
	durable.Durability = protocol.Durable
	res := c.call(&protocol.SubmitBatch{ID: 2, Tasks: []protocol.Task{
		wireTask("b1", time.Hour), bad, durable, wireTask("b1", time.Hour), wireTask("b4", time.Hour),
	}}).(*protocol.BatchResult).Results
	want := []struct {
		code  protocol.Code
		field string
	}{{0, ""}, {protocol.CodeInvalidTask, "schedule.cron"}, {protocol.CodeInvalidTask, "durability"}, {protocol.CodeExists, ""}, {0, ""}}
	if len(res) != len(want) {
		t.Fatalf("%d results, want %d", len(res), len(want))
	}
	for i, w := range want {
		r := res[i]
		if r.Code != w.code || r.Field != w.field || r.ID == "" || r.Durability == 0 || (r.Code == 0) != (r.State == task.Pending) {
			t.Errorf("result %d: %+v, want code %v field %q", i, r, w.code, w.field)
		}
	}
	if res[2].Durability != protocol.Durable {
		t.Errorf("the refused durable task's result says %v", res[2].Durability)
	}
	// A wire-level error anywhere rejects the whole frame, naming the item.
	b := body(t, map[string]any{"t": 17, "id": 3, "tasks": []any{
		map[string]any{"tid": "ok", "type": "t", "durability": "ephemeral", "schedule": map[string]any{"kind": "after", "delay": 0}},
		map[string]any{"tid": 5, "type": "t", "durability": "ephemeral", "schedule": map[string]any{"kind": "after", "delay": 0}},
	}})
	c.write(frame(b))
	e := wantError(t, c.recv(), protocol.CodeBadField, "tasks[1].tid")
	if e.ID != 3 {
		t.Fatalf("error id %d, want 3", e.ID)
	}
	if _, ok := c.call(&protocol.Get{ID: 4, TaskRef: protocol.TaskRef{TaskID: "ok"}}).(*protocol.Error); !ok {
		t.Fatal("a rejected batch frame must submit nothing")
	}
}

func TestOverloaded(t *testing.T) {
	// 64 tasks in all means one per engine shard: 100 distinct IDs must collide somewhere.
	e, err := task.New(task.WithWorkers(1), task.WithMaxTasks(64))
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{Engine: e})
	c := connect(t, ts.addr)
	tasks := make([]protocol.Task, 100)
	for i := range tasks {
		tasks[i] = wireTask(fmt.Sprint("o", i), time.Hour)
	}
	over := 0
	for _, r := range c.call(&protocol.SubmitBatch{ID: 2, Tasks: tasks}).(*protocol.BatchResult).Results {
		if r.Code == protocol.CodeOverloaded {
			over++
		} else if r.Code != 0 {
			t.Fatalf("result %+v", r)
		}
	}
	if over == 0 {
		t.Fatal("no OVERLOADED result")
	}
	for i := range 100 {
		r := c.call(&protocol.Submit{ID: uint64(3 + i), Task: wireTask(fmt.Sprint("p", i), time.Hour)})
		if e, ok := r.(*protocol.Error); ok {
			wantError(t, e, protocol.CodeOverloaded, "")
			return
		}
	}
	t.Fatal("SUBMIT never OVERLOADED")
}

func TestPipelining(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr)
	// Write every request before reading any reply, in one Write.
	var buf []byte
	const n = 200
	for i := range uint64(n) {
		var m protocol.Message
		switch i % 3 {
		case 0:
			m = &protocol.Submit{ID: 1000 + i, Task: wireTask(fmt.Sprint("p", i), time.Hour)}
		case 1:
			m = &protocol.Get{ID: 1000 + i, TaskRef: protocol.TaskRef{TaskID: fmt.Sprint("p", i-1)}}
		default:
			m = &protocol.Ping{ID: 1000 + i}
		}
		var err error
		if buf, err = protocol.AppendFrame(buf, m, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.write(buf)
	seen := map[uint64]bool{}
	for range n {
		r := c.recv()
		id := r.RequestID()
		if id < 1000 || id >= 1000+n || seen[id] {
			t.Fatalf("unexpected reply id %d", id)
		}
		seen[id] = true
		var want protocol.Type
		switch (id - 1000) % 3 {
		case 0:
			want = protocol.TypeTaskStatus
		case 1:
			want = protocol.TypeTaskInfo
		default:
			want = protocol.TypePong
		}
		if r.Type() != want {
			t.Fatalf("reply %d is %v %+v, want %v", id, r.Type(), r, want)
		}
	}
}

func TestEngineClosed(t *testing.T) {
	e, err := task.New(task.WithWorkers(1))
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{Engine: e})
	good := connect(t, ts.addr)
	c := connect(t, ts.addr)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantError(t, c.call(&protocol.Submit{ID: 2, Task: wireTask("x", 0)}), protocol.CodeShuttingDown, "")
	c.wantClosed()
	good.ping(3) // queries that do not need a live engine still work
}

func TestEngineErrorCodes(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("task %q: %w", "x", err) }
	cases := []struct {
		err   error
		code  protocol.Code
		field string
	}{
		{wrap(task.ErrExists), protocol.CodeExists, ""},
		{wrap(task.ErrNotFound), protocol.CodeNotFound, ""},
		{fmt.Errorf("%w: payload of 9 bytes exceeds Options.MaxPayload (1)", task.ErrInvalidTask), protocol.CodeInvalidTask, "task.payload"},
		{fmt.Errorf("%w: DependsOn: dependency cycle: a -> b -> a", task.ErrInvalidTask), protocol.CodeInvalidTask, "task.depends_on"},
		{wrap(task.ErrInvalidSchedule), protocol.CodeInvalidTask, "task.schedule"},
		{wrap(task.ErrInvalidRetry), protocol.CodeInvalidTask, "task.retry"},
		{wrap(task.ErrOverloaded), protocol.CodeOverloaded, ""},
		{task.ErrClosed, protocol.CodeShuttingDown, ""},
		{wrap(task.ErrIllegalTransition), protocol.CodeInternal, ""}, // no request can cause it but CANCEL, which answers it
		{errors.New("surprise"), protocol.CodeInternal, ""},
	}
	for _, c := range cases {
		e := mapEngineError(c.err, "task")
		if e.Code != c.code || e.Field != c.field {
			t.Errorf("%v -> %v %q, want %v %q", c.err, e.Code, e.Field, c.code, c.field)
		}
	}
	if e := mapEngineError(task.ErrBadCursor, "cursor"); e.Code != protocol.CodeBadField || e.Field != "cursor" {
		t.Errorf("ErrBadCursor -> %v %q", e.Code, e.Field)
	}
}
