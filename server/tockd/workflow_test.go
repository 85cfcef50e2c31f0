package tockd

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// child returns wireTask(id, 0) depending on parents.
func child(id string, parents ...string) protocol.Task {
	w := wireTask(id, 0)
	w.DependsOn = parents
	return w
}

// batch sends SUBMIT_BATCH of ws and returns its results.
func (c *client) batch(id uint64, ws ...protocol.Task) []protocol.ItemResult {
	c.t.Helper()
	r, ok := c.call(&protocol.SubmitBatch{ID: id, Tasks: ws}).(*protocol.BatchResult)
	if !ok || len(r.Results) != len(ws) {
		c.t.Fatalf("SUBMIT_BATCH answered %+v, want %d results", r, len(ws))
	}
	return r.Results
}

// wantNotFound requires that GET of each tid is NOT_FOUND: a refused workflow left none.
func (c *client) wantNotFound(id uint64, tids ...string) {
	c.t.Helper()
	for _, tid := range tids {
		wantError(c.t, c.call(&protocol.Get{ID: id, TaskRef: protocol.TaskRef{TaskID: tid}}), protocol.CodeNotFound, "")
	}
}

func TestWorkflowBatchAccepted(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr)
	// The child comes first: a parent may be anywhere in the batch. "b" is held an hour,
	// so "d" stays WAITING while the test looks.
	d := child("d", "a", "b")
	d.OnParentFailure = task.ParentRunAnyway
	res := c.batch(2, d, wireTask("a", time.Hour), wireTask("b", time.Hour))
	for i, want := range []task.State{task.Waiting, task.Pending, task.Pending} {
		if r := res[i]; r.Code != 0 || r.State != want {
			t.Fatalf("result %d: %+v, want %v", i, r, want)
		}
	}
	info := c.waitState(3, "d", task.Waiting)
	if !reflect.DeepEqual(info.Task.DependsOn, []string{"a", "b"}) || info.Task.OnParentFailure != task.ParentRunAnyway {
		t.Fatalf("GET d: depends_on %q on_parent_failure %v, want [a b] run", info.Task.DependsOn, info.Task.OnParentFailure)
	}
	// A SUBMIT with parents is a workflow of one; its missing parent names the field.
	wantError(t, c.call(&protocol.Submit{ID: 4, Task: child("e", "d", "nope")}), protocol.CodeInvalidTask, "task.depends_on")
	st, ok := c.call(&protocol.Submit{ID: 5, Task: child("e", "d")}).(*protocol.TaskStatus)
	if !ok || st.State != task.Waiting {
		t.Fatalf("SUBMIT e after d: %+v, want TASK_STATUS WAITING", st)
	}
}

func TestWorkflowCycleRefusedAsAWhole(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr)
	res := c.batch(2, wireTask("root", 0), child("x", "root", "z"), child("y", "x"), child("z", "y"))
	for i, r := range res {
		if r.Code != protocol.CodeInvalidTask || r.Field != "depends_on" || r.State != 0 {
			t.Fatalf("result %d: %+v, want INVALID_TASK field depends_on", i, r)
		}
		if !strings.Contains(r.Message, "x -> z -> y -> x") {
			t.Fatalf("result %d names no cycle path: %q", i, r.Message)
		}
	}
	c.wantNotFound(3, "root", "x", "y", "z")
}

func TestWorkflowBadTaskRefusesTheRest(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr)
	bad := child("b", "a", "a")
	res := c.batch(2, wireTask("a", 0), bad, child("c", "b"))
	if r := res[1]; r.Code != protocol.CodeInvalidTask || r.Field != "depends_on[1]" {
		t.Fatalf("the bad task's result %+v, want INVALID_TASK field depends_on[1]", r)
	}
	for _, i := range []int{0, 2} {
		if r := res[i]; r.Code != protocol.CodeInvalidTask || r.Field != "" || !strings.HasPrefix(r.Message, `workflow refused: tasks[1] (tid "b"): `) {
			t.Fatalf("result %d: %+v, want INVALID_TASK naming tasks[1]", i, r)
		}
	}
	c.wantNotFound(3, "a", "b", "c")
	// A durable task in a workflow is refused (durable workflows are not supported yet).
	dur := wireTask("p", 0)
	dur.Durability = protocol.Durable
	res = c.batch(4, dur, child("q", "p"))
	if r := res[0]; r.Code != protocol.CodeInvalidTask || r.Field != "durability" {
		t.Fatalf("durable parent: %+v, want INVALID_TASK field durability", r)
	}
	c.wantNotFound(5, "p", "q")
}
