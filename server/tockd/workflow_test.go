package tockd

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// child returns wireTask(id, 0) depending on parents.
func child(id string, parents ...string) protocol.Task {
	w := wireTask(id, 0)
	w.DependsOn = &task.Deps{On: parents}
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
	d.DependsOn.OnParentFailure = task.ParentRunAnyway
	res := c.batch(2, d, wireTask("a", time.Hour), wireTask("b", time.Hour))
	for i, want := range []task.State{task.Waiting, task.Pending, task.Pending} {
		if r := res[i]; r.Code != 0 || r.State != want {
			t.Fatalf("result %d: %+v, want %v", i, r, want)
		}
	}
	info := c.waitState(3, "d", task.Waiting)
	if got := info.Task.DependsOn; !reflect.DeepEqual(got, &task.Deps{On: []string{"a", "b"}, OnParentFailure: task.ParentRunAnyway}) {
		t.Fatalf("GET d: depends_on %+v, want [a b] and run", got)
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
	// Durable tasks need a server with etcd: refused whole here too.
	dur := wireTask("p", 0)
	dur.Durability = protocol.Durable
	res = c.batch(4, child("q", "p"), dur)
	if r := res[1]; r.Code != protocol.CodeInvalidTask || r.Field != "durability" {
		t.Fatalf("durable parent: %+v, want INVALID_TASK field durability", r)
	}
	c.wantNotFound(5, "p", "q")
}

// A durable workflow refused (a cycle; a task of the other durability) leaves no record
// and no claim: the same IDs are accepted afterwards.
func TestDurableWorkflowRefusedLeavesNoRecord(t *testing.T) {
	st, ts := startLeader(t)
	c := connect(t, ts.addr)
	res := c.batch(2, durableTask("r", time.Hour), durableChild("x", "r", "y"), durableChild("y", "x"))
	for i, r := range res {
		if r.Code != protocol.CodeInvalidTask || r.Field != "depends_on" || !strings.Contains(r.Message, "x -> y -> x") {
			t.Fatalf("cycle, result %d: %+v", i, r)
		}
	}
	mixed := c.batch(3, durableTask("r", time.Hour), child("x", "r"))
	if r := mixed[1]; r.Code != protocol.CodeInvalidTask || r.Field != "durability" {
		t.Fatalf("mixed durability, result 1: %+v, want INVALID_TASK field durability", r)
	}
	c.wantNotFound(4, "r", "x", "y")
	if ids := storedIDs(t, st); len(ids) != 0 {
		t.Fatalf("records after the refusals: %v, want none", ids)
	}
	for i, r := range c.batch(5, durableTask("r", time.Hour), durableChild("x", "r")) {
		if r.Code != 0 {
			t.Fatalf("the same IDs afterwards, result %d: %+v", i, r)
		}
	}
	if ids := storedIDs(t, st); !ids["default/r"] || !ids["default/x"] || len(ids) != 2 {
		t.Fatalf("records after the accepted workflow: %v, want r and x", ids)
	}
	// Resubmitted whole as recorded (an answer lost): answered as held; in part, EXISTS.
	for i, r := range c.batch(6, durableTask("r", time.Hour), durableChild("x", "r")) {
		if want := []task.State{task.Pending, task.Waiting}[i]; r.Code != 0 || r.State != want {
			t.Fatalf("the workflow again, result %d: %+v, want %v", i, r, want)
		}
	}
	if r := c.batch(7, durableChild("x", "r"), durableChild("z", "x"))[0]; r.Code != protocol.CodeExists {
		t.Fatalf("a held task in a new workflow: %+v, want EXISTS", r)
	}
	c.wantNotFound(8, "z")
	// A durable exclusive task with parents: its run lock would not be waited out at a
	// takeover (the workflow's load holds no run back), so it is refused.
	excl := durableChild("xe", "r")
	excl.Exclusive = true
	wantError(t, c.call(&protocol.Submit{ID: 9, Task: excl}), protocol.CodeInvalidTask, "task.exclusive")
	if ids := storedIDs(t, st); ids["default/xe"] {
		t.Fatalf("records after the exclusive child's refusal: %v, want no xe", ids)
	}
}

// durableChild is durableTask(id, 0) of type "w" depending on parents.
func durableChild(id string, parents ...string) protocol.Task {
	w := durableTask(id, 0)
	w.Type, w.DependsOn = "w", &task.Deps{On: parents}
	return w
}

// A durable diamond survives its leader resigning between the root's end and its
// children's runs: the next leader loads the children from their records, counts the
// root (whose record went with its confirmed ACK) as done, and runs b and c once each,
// then d, once, after both.
func TestDurableWorkflowSurvivesAStepDown(t *testing.T) {
	for _, how := range []string{"submits", "batch"} {
		t.Run(how, func(t *testing.T) { durableDiamondStepDown(t, how == "batch") })
	}
}

func durableDiamondStepDown(t *testing.T, batch bool) {
	n := startTwoNodes(t, Options{})
	c := connect(t, n.leader.addr)
	root := durableTask("a", 0)
	root.Type = "root"
	ws := []protocol.Task{durableChild("d", "c", "b"), durableChild("b", "a"), root, durableChild("c", "a")}
	if batch {
		for i, r := range c.batch(2, ws...) {
			if r.Code != 0 || r.Durability != protocol.Durable {
				t.Fatalf("result %d: %+v", i, r)
			}
		}
	} else {
		for i, w := range []protocol.Task{ws[2], ws[1], ws[3], ws[0]} { // parents first
			submit(t, c, uint64(2+i), w)
		}
	}
	firstEpoch := n.leader.srv.Stats().Epoch
	rw := connectWorker(t, n.leader.addr, 1, "root")
	if f := rw.fire(); f.TaskID != "a" {
		t.Fatalf("FIRE %s, want the root a", f.TaskID)
	} else {
		wantOK(t, rw.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch})) // once a's record is deleted
	}
	// b and c are released; no worker of their type is here, so none runs.
	c.waitState(6, "d", task.Waiting)
	if ids := storedIDs(t, n.st2); ids["default/a"] || !ids["default/b"] || !ids["default/c"] || !ids["default/d"] || len(ids) != 3 {
		t.Fatalf("records before the step-down: %v, want b, c, d", ids)
	}

	n.leader.stop(t) // resigns: the follower takes over
	waitLeading(t, n.follower, "the follower never took over")
	fc := connect(t, n.fd.addr)
	if in := fc.waitState(2, "d", task.Waiting); !reflect.DeepEqual(in.Task.Parents(), []string{"c", "b"}) {
		t.Fatalf("d at the new leader depends on %q, want [c b]", in.Task.Parents())
	}
	w := connectWorker(t, n.fd.addr, 3, "w")
	first, second := w.fire(), w.fire()
	if got := map[string]bool{first.TaskID: true, second.TaskID: true}; !got["b"] || !got["c"] || first.Epoch <= firstEpoch {
		t.Fatalf("first FIREs at the new leader: %s, %s at epoch %d; want b and c above epoch %d", first.TaskID, second.TaskID, first.Epoch, firstEpoch)
	}
	fc.waitState(3, "d", task.Waiting) // its parents have not ended: not run early
	wantOK(t, w.req(&protocol.Ack{RunID: first.RunID, Epoch: first.Epoch}))
	wantOK(t, w.req(&protocol.Ack{RunID: second.RunID, Epoch: second.Epoch}))
	last := w.fire()
	if last.TaskID != "d" {
		t.Fatalf("third FIRE %s, want d", last.TaskID)
	}
	wantOK(t, w.req(&protocol.Ack{RunID: last.RunID, Epoch: last.Epoch}))
	if ids := storedIDs(t, n.st2); len(ids) != 0 {
		t.Fatalf("records after every ACK: %v, want none", ids)
	}
}

// A durable child's write answered UNCERTAIN that did land is accepted when retried:
// its "after" delay is recorded as a delay (it counts from the release), so the stored
// record is the retry's own.
func TestUncertainDurableChildRetried(t *testing.T) {
	st := openStore(t, t.TempDir())
	srv := newServer(t, Options{Store: st})
	var lost atomic.Bool
	lost.Store(true) // no fault until the child's write
	srv.replica.committer.afterPut = func(recs []store.Record, errs []error) []error {
		if lost.Swap(true) {
			return errs
		}
		for i := range errs {
			errs[i] = fmt.Errorf("%w: put txn of %d records: %w", store.ErrUncertain, len(recs), context.DeadlineExceeded)
		}
		return errs
	}
	ds := serve(t, srv)
	waitLeading(t, srv, "the lone node was not elected")
	c := connect(t, ds.addr)
	submit(t, c, 2, durableTask("p", time.Hour))
	lost.Store(false)
	kid := durableChild("kid", "p")
	kid.Schedule.Delay = int64(time.Minute)
	wantError(t, c.call(&protocol.Submit{ID: 3, Task: kid}), protocol.CodeUncertain, "")
	if !storedIDs(t, st)["default/kid"] {
		t.Fatal("the write did not land: the test's premise")
	}
	m := c.call(&protocol.Submit{ID: 4, Task: kid})
	if r, ok := m.(*protocol.TaskStatus); !ok || r.State != task.Waiting || r.Durability != protocol.Durable {
		t.Fatalf("the retry was answered %v %+v, want TASK_STATUS WAITING durable", m.Type(), m)
	}
}
