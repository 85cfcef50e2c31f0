package client

import (
	"errors"
	"net"
	"slices"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// partFake starts a fake named node whose WELCOME states 16 partitions at map revision 5.
func partFake(t *testing.T, node string) *fake {
	t.Helper()
	return listenFake(t, "127.0.0.1:0", &fake{max: fakeMaxFrame, node: node, parts: 16, prev: 5})
}

func (f *fake) addr() string { return f.ln.Addr().String() }

// nextAs returns the next request at f, which must be a T, and its connection.
func nextAs[T protocol.Message](t *testing.T, f *fake) (T, net.Conn) {
	t.Helper()
	r := f.next(t)
	m, ok := r.m.(T)
	if !ok {
		t.Fatalf("the fake got %v, want a %T", r.m.Type(), m)
	}
	return m, r.nc
}

// answerMap expects PARTITIONS at f and answers it with m.
func answerMap(t *testing.T, f *fake, m PartitionMap) {
	t.Helper()
	p, nc := nextAs[*protocol.Partitions](t, f)
	w := &protocol.PartitionMap{ID: p.ID, Count: uint64(m.Count), Rev: uint64(m.Rev)}
	for _, n := range m.Nodes {
		w.Nodes = append(w.Nodes, protocol.PartitionNode{Name: n.Name, Addr: n.Addr})
	}
	for _, o := range m.Owners {
		w.Owners = append(w.Owners, uint64(o))
	}
	send(t, f, nc, w)
}

// answerSubmit expects a SUBMIT of task id at f and accepts it.
func answerSubmit(t *testing.T, f *fake, id string) {
	t.Helper()
	s, nc := nextAs[*protocol.Submit](t, f)
	if s.Task.ID != id {
		t.Fatalf("SUBMIT of %q at the fake, want %q", s.Task.ID, id)
	}
	send(t, f, nc, &protocol.TaskStatus{ID: s.ID, Namespace: "default", TaskID: id, Durability: protocol.Ephemeral, State: task.Pending})
}

// send sends m at f's connection nc, failing the test if m does not encode (f.send
// would drop it).
func send(t *testing.T, f *fake, nc net.Conn, m protocol.Message) {
	t.Helper()
	if _, err := protocol.AppendFrame(nil, m, 0); err != nil {
		t.Fatalf("the fake's %v does not encode: %v", m.Type(), err)
	}
	f.send(nc, m)
}

// async runs fn and delivers its error.
func async(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

func submitAsync(t *testing.T, c *Client, tk task.Task) <-chan error {
	ctx := bounded(t)
	return async(func() error {
		_, err := c.Submit(ctx, tk, protocol.Ephemeral)
		return err
	})
}

func mustReturn(t *testing.T, ch <-chan error, want error) {
	t.Helper()
	if err := tockdtest.Receive(t, ch, "the call's return"); !errors.Is(err, want) {
		t.Fatalf("the call returned %v, want %v", err, want)
	}
}

// expectIdle fails if any fake holds a request nobody read: a call that returned sends
// nothing more, so this is checked without waiting.
func expectIdle(t *testing.T, fs ...*fake) {
	t.Helper()
	for _, f := range fs {
		if n := len(f.reqs); n > 0 {
			t.Fatalf("the fake at %s got %d more requests (first %v)", f.addr(), n, (<-f.reqs).m.Type())
		}
	}
}

// TestRoutedToOwner: with a WELCOME that states partitions, the first call about a task
// fetches the map (PARTITIONS, at the node dialled), and each task's SUBMIT, GET and
// CANCEL goes to its partition's owner: over a connection of its own to another node,
// over the current one for the node dialled or an owner with no address. The map is
// fetched once.
func TestRoutedToOwner(t *testing.T) {
	a, b := partFake(t, "a"), partFake(t, "b")
	c := dialT(t, a.addr())
	done := submitAsync(t, c, oneShot("task-1", "job", 0)) // partition 6: b's
	answerMap(t, a, vectorMap(a.addr(), b.addr()))
	answerSubmit(t, b, "task-1")
	mustReturn(t, done, nil)

	done = async(func() error { _, err := c.Get(bounded(t), "billing", "invoice/42"); return err }) // 14: c's, no address
	g, nc := nextAs[*protocol.Get](t, a)
	send(t, a, nc, &protocol.TaskInfo{ID: g.ID, Info: protocol.Info{Task: protocol.Task{Namespace: "billing", ID: "invoice/42", Type: "job",
		Schedule: protocol.Schedule{Kind: task.KindAfter}, Durability: protocol.Ephemeral}, State: task.Pending}})
	mustReturn(t, done, nil)

	done = async(func() error { _, err := c.Cancel(bounded(t), "ns", "ключ"); return err }) // 12: b's
	cl, nc := nextAs[*protocol.Cancel](t, b)
	send(t, b, nc, &protocol.TaskStatus{ID: cl.ID, Namespace: "ns", TaskID: "ключ", Durability: protocol.Ephemeral, State: task.Cancelled})
	mustReturn(t, done, nil)
	expectIdle(t, a, b)
}

// TestNotOwnerFollowsTheNamedOwner: a NOT_OWNER with a newer map revision refreshes the
// map and sends the request again to the owner it names; a second NOT_OWNER in the
// same call is returned (Options.OwnerRetries, default 1), and nothing more is sent.
func TestNotOwnerFollowsTheNamedOwner(t *testing.T) {
	a, b, d := partFake(t, "a"), partFake(t, "b"), partFake(t, "d")
	c := dialT(t, a.addr())
	done := submitAsync(t, c, oneShot("task-1", "job", 0))
	answerMap(t, a, vectorMap(a.addr(), b.addr()))
	s, nc := nextAs[*protocol.Submit](t, b)
	send(t, b, nc, &protocol.Error{ID: s.ID, Code: protocol.CodeNotOwner, Leader: d.addr(), PartitionRev: 6})
	moved := vectorMap(a.addr(), b.addr())
	moved.Rev = 6
	moved.Nodes = append(moved.Nodes, PartitionNode{Name: "d", Addr: d.addr()})
	moved.Owners[6] = 3
	answerMap(t, a, moved)
	answerSubmit(t, d, "task-1")
	mustReturn(t, done, nil)

	done = submitAsync(t, c, oneShot("task-1", "job", 0)) // now d's, by the map of revision 6
	s, nc = nextAs[*protocol.Submit](t, d)
	send(t, d, nc, &protocol.Error{ID: s.ID, Code: protocol.CodeNotOwner, Leader: b.addr(), PartitionRev: 6})
	s, nc = nextAs[*protocol.Submit](t, b) // no fetch: the map is at revision 6 already
	send(t, b, nc, &protocol.Error{ID: s.ID, Code: protocol.CodeNotOwner, Leader: d.addr(), PartitionRev: 6})
	mustReturn(t, done, protocol.ErrNotOwner)
	expectIdle(t, a, b, d)
}

// TestOwnerThatDoesNotLeadIsDeclined: today one leader does everything, so an owner that
// does not lead answers NOT_LEADER: the request goes the default way (the node dialled)
// and later requests for that owner's partitions go there at once.
func TestOwnerThatDoesNotLeadIsDeclined(t *testing.T) {
	a, b := partFake(t, "a"), partFake(t, "b")
	c := dialT(t, a.addr())
	done := submitAsync(t, c, oneShot("task-1", "job", 0))
	answerMap(t, a, vectorMap(a.addr(), b.addr()))
	s, nc := nextAs[*protocol.Submit](t, b)
	send(t, b, nc, &protocol.Error{ID: s.ID, Code: protocol.CodeNotLeader, Leader: a.addr()})
	answerSubmit(t, a, "task-1")
	mustReturn(t, done, nil)

	done = submitAsync(t, c, task.Task{Namespace: "ns", ID: "ключ", Type: "job", Schedule: task.After(0)}) // b's too
	answerSubmit(t, a, "ключ")
	mustReturn(t, done, nil)
	expectIdle(t, a, b)
}

// batchItem answers one task of a SUBMIT_BATCH: accepted, or refused with code.
func batchItem(w protocol.Task, code protocol.Code) protocol.ItemResult {
	if code != 0 {
		return protocol.ItemResult{Namespace: w.Namespace, ID: w.ID, Durability: w.Durability, Code: code, Message: "refused"}
	}
	return protocol.ItemResult{Namespace: w.Namespace, ID: w.ID, Durability: w.Durability, State: task.Pending}
}

// answerBatch expects a SUBMIT_BATCH of the tasks ids at f and answers each with codes.
func answerBatch(t *testing.T, f *fake, ids []string, codes ...protocol.Code) {
	t.Helper()
	sb, nc := nextAs[*protocol.SubmitBatch](t, f)
	var got []string
	r := &protocol.BatchResult{ID: sb.ID}
	for i, w := range sb.Tasks {
		got = append(got, w.ID)
		var code protocol.Code
		if i < len(codes) {
			code = codes[i]
		}
		r.Results = append(r.Results, batchItem(w, code))
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("SUBMIT_BATCH of %q at %s, want %q", got, f.addr(), ids)
	}
	send(t, f, nc, r)
}

// vectorTasks are tasks of the PROTOCOL.md test vectors: b's, a's (via c, which has no
// address: the default way), b's.
func vectorTasks() []task.Task {
	return []task.Task{
		{ID: "task-1", Type: "job", Schedule: task.After(0)},
		{Namespace: "billing", ID: "invoice/42", Type: "job", Schedule: task.After(0)},
		{Namespace: "ns", ID: "ключ", Type: "job", Schedule: task.After(0)},
	}
}

func batchAsync(t *testing.T, c *Client, ts []task.Task) (<-chan error, *[]BatchItem) {
	ctx := bounded(t)
	var out []BatchItem
	return async(func() (err error) {
		out, err = c.SubmitBatch(ctx, ts, protocol.Ephemeral)
		return err
	}), &out
}

// TestBatchSplitPerOwner: a batch whose tasks have two owners goes as one frame to each,
// each frame in the tasks' order, and the results come back in the batch's order; an
// item refused with NOT_OWNER is routed again after a refresh of the map.
func TestBatchSplitPerOwner(t *testing.T) {
	a, b := partFake(t, "a"), partFake(t, "b")
	c := dialT(t, a.addr())
	done, out := batchAsync(t, c, vectorTasks())
	answerMap(t, a, vectorMap(a.addr(), b.addr()))
	answerBatch(t, a, []string{"invoice/42"})
	answerBatch(t, b, []string{"task-1", "ключ"}, 0, protocol.CodeExists)
	mustReturn(t, done, nil)
	if r := *out; len(r) != 3 || r[0].Err != nil || r[0].Status.TaskID != "task-1" || r[1].Err != nil ||
		r[1].Status.TaskID != "invoice/42" || !errors.Is(r[2].Err, protocol.ErrExists) {
		t.Fatalf("results %+v, want task-1 and invoice/42 accepted, ключ EXISTS, in that order", r)
	}

	done, out = batchAsync(t, c, vectorTasks())
	answerBatch(t, a, []string{"invoice/42"})
	answerBatch(t, b, []string{"task-1", "ключ"}, 0, protocol.CodeNotOwner)
	moved := vectorMap(a.addr(), b.addr())
	moved.Rev, moved.Owners[12] = 6, 0
	answerMap(t, a, moved)
	answerBatch(t, a, []string{"ключ"})
	mustReturn(t, done, nil)
	if r := *out; len(r) != 3 || r[0].Err != nil || r[1].Err != nil || r[2].Err != nil || r[2].Status.TaskID != "ключ" {
		t.Fatalf("results %+v, want all three accepted, ключ at its new owner", r)
	}
	expectIdle(t, a, b)
}

// TestWorkflowBatchIsNotSplit: a batch with parents goes whole to its first task's owner.
func TestWorkflowBatchIsNotSplit(t *testing.T) {
	a, b := partFake(t, "a"), partFake(t, "b")
	c := dialT(t, a.addr())
	ts := vectorTasks()
	ts[1].DependsOn = &task.Deps{On: []string{"task-1"}}
	done, out := batchAsync(t, c, ts)
	answerMap(t, a, vectorMap(a.addr(), b.addr()))
	answerBatch(t, b, []string{"task-1", "invoice/42", "ключ"})
	mustReturn(t, done, nil)
	if len(*out) != 3 {
		t.Fatalf("results %+v, want 3", *out)
	}
	expectIdle(t, a, b)
}

// TestNoOwnerRetries: with Options.OwnerRetries negative, a NOT_OWNER is returned at
// once: no fetch of the map, nothing sent again.
func TestNoOwnerRetries(t *testing.T) {
	a, b := partFake(t, "a"), partFake(t, "b")
	c := dialT(t, a.addr(), WithOwnerRetries(-1))
	done := submitAsync(t, c, oneShot("task-1", "job", 0))
	answerMap(t, a, vectorMap(a.addr(), b.addr()))
	s, nc := nextAs[*protocol.Submit](t, b)
	send(t, b, nc, &protocol.Error{ID: s.ID, Code: protocol.CodeNotOwner, Leader: a.addr(), PartitionRev: 9})
	mustReturn(t, done, protocol.ErrNotOwner)
	expectIdle(t, a, b)
}
