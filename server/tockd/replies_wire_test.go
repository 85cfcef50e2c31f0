package tockd

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// listedReply is one (request, code) the replies table lists; code 0 is the success
// reply; item marks a per-item code of BATCH_RESULT or ACKED.
type listedReply struct {
	req  protocol.Type
	code protocol.Code
	item bool
}

func (l listedReply) String() string {
	what := "success"
	if l.code != 0 {
		what = l.code.String()
	}
	if l.item {
		what = "item " + what
	}
	return l.req.String() + " " + what
}

// notProvoked is every listed reply the wire test cannot cause, and why.
func notProvoked() map[listedReply]string {
	m := map[listedReply]string{}
	for req := range replies {
		m[listedReply{req, protocol.CodeInternal, false}] = "a server bug, or a reply that cannot be encoded"
		if req != protocol.TypeSubmit {
			m[listedReply{req, protocol.CodeShuttingDown, false}] = "the drain's SHUTTING_DOWN carries id 0 (TestShutdownGraceful); only SUBMIT meets a closed engine"
		}
	}
	excuse := func(why string, ls ...listedReply) {
		for _, l := range ls {
			m[l] = why
		}
	}
	reply := func(req protocol.Type, code protocol.Code) listedReply { return listedReply{req, code, false} }
	item := func(req protocol.Type, code protocol.Code) listedReply { return listedReply{req, code, true} }
	excuse("a durable write fenced off mid-batch: a leader change between two etcd round trips", item(protocol.TypeSubmitBatch, protocol.CodeNotLeader))
	excuse("an engine error with no mapping: a bug", item(protocol.TypeSubmitBatch, protocol.CodeInternal))
	excuse("etcd failing to delete a cancelled durable task's record (TestDurable* cover the store errors)", reply(protocol.TypeCancel, protocol.CodeOverloaded))
	excuse("etcd losing a cancelled durable task's delete mid-write", reply(protocol.TypeCancel, protocol.CodeUncertain))
	excuse("etcd losing a durable record's write mid-write",
		reply(protocol.TypeSubmit, protocol.CodeUncertain), item(protocol.TypeSubmitBatch, protocol.CodeUncertain))
	excuse("a live task holding the dead letter's key: engine semantics under change (issue 12, item 7)", reply(protocol.TypeDLQRequeue, protocol.CodeExists))
	excuse("the requeued task replaces its own retained record, so no limit is crossed by it alone", reply(protocol.TypeDLQRequeue, protocol.CodeOverloaded))
	excuse("a run of the current epoch turning stale mid-frame: a leader change during the ACKS", item(protocol.TypeAcks, protocol.CodeStaleEpoch))
	excuse("etcd failing to record a durable run's end",
		item(protocol.TypeAcks, protocol.CodeInternal), reply(protocol.TypeAck, protocol.CodeInternal), reply(protocol.TypeNack, protocol.CodeInternal))
	excuse("etcd unreachable for a configuration write (nothing written)", reply(protocol.TypeConfigSet, protocol.CodeOverloaded),
		reply(protocol.TypePause, protocol.CodeOverloaded), reply(protocol.TypeResume, protocol.CodeOverloaded))
	excuse("etcd losing a configuration write mid-write", reply(protocol.TypeConfigSet, protocol.CodeUncertain),
		reply(protocol.TypePause, protocol.CodeUncertain), reply(protocol.TypeResume, protocol.CodeUncertain))
	excuse("a leader change before a carried durable run's end is recorded", item(protocol.TypeCarry, protocol.CodeStaleEpoch))
	excuse("etcd failing to record a carried durable run's end", item(protocol.TypeCarry, protocol.CodeInternal))
	return m
}

// observed collects the (request, code) pairs the server answered.
type observed map[listedReply]bool

func (o observed) add(req protocol.Type, r protocol.Message) {
	switch r := r.(type) {
	case *protocol.Error:
		o[listedReply{req, r.Code, false}] = true
	case *protocol.BatchResult:
		o[listedReply{req, 0, false}] = true
		for _, it := range r.Results {
			o[listedReply{req, it.Code, true}] = true
		}
	case *protocol.Acked:
		o[listedReply{req, 0, false}] = true
		for _, it := range r.Failed {
			o[listedReply{req, it.Code, true}] = true
		}
	default:
		o[listedReply{req, 0, false}] = true
	}
}

// raw sends a hand-made request (fields besides t and id) and returns the reply.
func (c *client) raw(typ protocol.Type, fields map[string]any) protocol.Message {
	c.t.Helper()
	m := map[string]any{"t": uint8(typ), "id": 77}
	for k, v := range fields {
		m[k] = v
	}
	c.write(frame(body(c.t, m)))
	return c.recv()
}

// TestEveryListedReplyOverTheWire provokes, over real sockets, every reply and error code
// the replies table (and so PROTOCOL.md) lists for each request, except those
// notProvoked names with the reason; each must come, and none is left out silently.
func TestEveryListedReplyOverTheWire(t *testing.T) {
	got := observed{}
	ts := startServer(t, Options{Token: "tk", EngineOptions: []task.Option{task.WithWorkers(2),
		task.WithMaxPayloadBytes(4 << 10)}})
	ts.handle(t, "dies", func(ctx context.Context, r *task.Run) error {
		return task.NonRetryable(errors.New("no"))
	})
	hello := func(token string, v uint64, role protocol.Role) *protocol.Hello {
		return &protocol.Hello{ID: 1, Version: v, Name: "t", Token: token, Role: role}
	}
	login := func(addr string, role protocol.Role) *client {
		c := dial(t, addr)
		c.send(hello("tk", protocol.Version, role))
		got.add(protocol.TypeHello, c.recv())
		return c
	}
	// HELLO.
	c := login(ts.addr, protocol.RoleClient)
	got.add(protocol.TypeHello, c.call(hello("tk", protocol.Version, protocol.RoleClient)))
	for _, h := range []*protocol.Hello{hello("tk", 9, protocol.RoleClient), hello("wrong", protocol.Version, protocol.RoleClient)} {
		d := dial(t, ts.addr)
		got.add(protocol.TypeHello, d.call(h))
	}
	got.add(protocol.TypeHello, dial(t, ts.addr).raw(protocol.TypeHello, map[string]any{"v": 1, "name": 5, "role": "client"}))
	one := serveAlso(t, Options{MaxConns: 1})
	first, second := dial(t, one.addr), dial(t, one.addr)
	waitAdmitted(t, one.srv, 2)
	first.hello(hello("", protocol.Version, protocol.RoleClient))
	got.add(protocol.TypeHello, second.call(hello("", protocol.Version, protocol.RoleClient)))

	// Client requests, each with a field of the wrong type for BAD_FIELD.
	bad := map[protocol.Type]map[string]any{
		protocol.TypePing: {"id": "x"}, protocol.TypeStats: {"id": "x"}, protocol.TypePartitions: {"id": "x"},
		protocol.TypeSubmit: {"task": 5}, protocol.TypeSubmitBatch: {"tasks": 5},
		protocol.TypeCancel: {"tid": 5}, protocol.TypeGet: {"tid": 5}, protocol.TypeDLQRequeue: {"tid": 5},
		protocol.TypeList: {"cursor": 5}, protocol.TypeDLQList: {"cursor": 5},
		protocol.TypeDLQPurge: {"tid": "a", "all": true}, protocol.TypePause: {"type": ""}, protocol.TypeResume: {"type": 5},
		protocol.TypeConfigGet: {"key": 5}, protocol.TypeConfigList: {"id": "x"}, protocol.TypeConfigSet: {"key": "log_level"},
	}
	for typ, fields := range bad {
		got.add(typ, c.raw(typ, fields))
	}
	got.add(protocol.TypePing, c.call(&protocol.Ping{ID: 2}))
	got.add(protocol.TypeStats, c.call(&protocol.Stats{ID: 2}))
	got.add(protocol.TypePartitions, c.call(&protocol.Partitions{ID: 2}))
	got.add(protocol.TypeSubmit, c.call(&protocol.Submit{ID: 3, Task: wireTask("a", time.Hour)}))
	got.add(protocol.TypeSubmit, c.call(&protocol.Submit{ID: 3, Task: wireTask("a", time.Hour)})) // EXISTS
	badCron := wireTask("c", 0)
	badCron.Schedule = protocol.Schedule{Kind: task.KindCron, Cron: "no"}
	got.add(protocol.TypeSubmit, c.call(&protocol.Submit{ID: 4, Task: badCron}))
	heavy := wireTask("heavy", time.Hour)
	heavy.Payload = make([]byte, 8<<10) // over the 4 KiB payload budget
	got.add(protocol.TypeSubmit, c.call(&protocol.Submit{ID: 5, Task: heavy}))
	part := wireTask("p", time.Hour)
	part.Partition = 1
	got.add(protocol.TypeSubmitBatch, c.call(&protocol.SubmitBatch{ID: 6, Tasks: []protocol.Task{
		wireTask("b", time.Hour), wireTask("a", time.Hour), badCron, heavy, part}}))
	ref := func(id string) protocol.TaskRef { return protocol.TaskRef{TaskID: id} }
	got.add(protocol.TypeCancel, c.call(&protocol.Cancel{ID: 7, TaskRef: ref("b")}))
	got.add(protocol.TypeCancel, c.call(&protocol.Cancel{ID: 7, TaskRef: ref("none")}))
	got.add(protocol.TypeGet, c.call(&protocol.Get{ID: 8, TaskRef: ref("a")}))
	got.add(protocol.TypeGet, c.call(&protocol.Get{ID: 8, TaskRef: ref("none")}))
	got.add(protocol.TypeList, c.call(&protocol.List{ID: 9}))
	got.add(protocol.TypeDLQList, c.call(&protocol.DLQList{ID: 10}))
	dies := wireTask("d", 0)
	dies.Type = "dies"
	submit(t, c, 11, dies)
	c.waitState(12, "d", task.Dead)
	got.add(protocol.TypeDLQRequeue, c.call(&protocol.DLQRequeue{ID: 13, TaskRef: ref("d")}))
	got.add(protocol.TypeDLQRequeue, c.call(&protocol.DLQRequeue{ID: 13, TaskRef: ref("none")}))
	got.add(protocol.TypeDLQPurge, c.call(&protocol.DLQPurge{ID: 14, All: true}))
	got.add(protocol.TypePause, c.call(&protocol.Pause{ID: 15, TaskType: "w"}))
	got.add(protocol.TypeResume, c.call(&protocol.Resume{ID: 16, TaskType: "w"}))
	got.add(protocol.TypeConfigSet, c.call(&protocol.ConfigSet{ID: 17, Key: "max_waiting_runs", Value: "5"}))
	got.add(protocol.TypeConfigSet, c.call(&protocol.ConfigSet{ID: 17, Key: "max_waiting_runs", Reset: true}))
	got.add(protocol.TypeConfigGet, c.call(&protocol.ConfigGet{ID: 18, Key: "max_waiting_runs"}))
	got.add(protocol.TypeConfigList, c.call(&protocol.ConfigList{ID: 19}))

	// Worker messages: UNEXPECTED on the client connection, then as a worker.
	workerMsgs := []protocol.Message{&protocol.Subscribe{ID: 20, Types: []string{"w"}, Credits: 1},
		&protocol.Credit{ID: 21, Credits: 1}, &protocol.Ack{ID: 22, RunID: 1}, &protocol.Nack{ID: 23, RunID: 1},
		&protocol.Acks{ID: 24, RunIDs: []uint64{1}}, &protocol.Carry{ID: 25}, &protocol.Adopt{ID: 26}}
	for _, m := range workerMsgs {
		got.add(m.Type(), c.call(m))
	}
	wc := login(ts.addr, protocol.RoleWorker)
	w := &wkr{client: wc, id: 1}
	for typ, fields := range map[protocol.Type]map[string]any{protocol.TypeSubscribe: {"types": []string{""}, "credits": 1},
		protocol.TypeCredit: {"credits": "x"}, protocol.TypeAck: {"run": "x", "epoch": 0},
		protocol.TypeNack: {"run": 1, "epoch": 0, "retryable": "x"}, protocol.TypeAcks: {"runs": 5, "epoch": 0},
		protocol.TypeCarry: {"outcomes": 5}, protocol.TypeAdopt: {"runs": 5}} {
		got.add(typ, wc.raw(typ, fields))
	}
	got.add(protocol.TypeSubscribe, w.req(&protocol.Subscribe{Types: []string{"w"}, Credits: 2}))
	got.add(protocol.TypeCredit, w.req(&protocol.Credit{Credits: 1}))
	submit(t, c, 30, workTask("w1", 1))
	submit(t, c, 31, workTask("w2", 1))
	f1, f2 := w.fire(), w.fire()
	got.add(protocol.TypeAck, w.req(&protocol.Ack{RunID: 999}))
	got.add(protocol.TypeAck, w.req(&protocol.Ack{RunID: f1.RunID, Epoch: 5}))
	got.add(protocol.TypeNack, w.req(&protocol.Nack{RunID: 999}))
	got.add(protocol.TypeNack, w.req(&protocol.Nack{RunID: f2.RunID, Epoch: 5, Err: "x", Retryable: true}))
	got.add(protocol.TypeAck, w.req(&protocol.Ack{RunID: f1.RunID}))
	got.add(protocol.TypeNack, w.req(&protocol.Nack{RunID: f2.RunID, Err: "x", Retryable: false}))
	got.add(protocol.TypeAcks, w.req(&protocol.Acks{RunIDs: []uint64{999}}))
	got.add(protocol.TypeAcks, w.req(&protocol.Acks{RunIDs: []uint64{999}, Epoch: 5}))
	got.add(protocol.TypeCarry, w.req(&protocol.Carry{Outcomes: []protocol.Outcome{{RunID: 999, TaskID: "none", Attempt: 1, Due: 1}}}))
	got.add(protocol.TypeAdopt, w.req(&protocol.Adopt{Runs: []protocol.Outcome{{RunID: 999, TaskID: "none", Attempt: 1, Due: 1}}}))
	got.add(protocol.TypeAdopt, w.req(&protocol.Adopt{}))

	// A closed engine: SUBMIT gets SHUTTING_DOWN.
	e, err := task.New(task.WithWorkers(1))
	if err != nil {
		t.Fatal(err)
	}
	closed := serveAlso(t, Options{Engine: e})
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got.add(protocol.TypeSubmit, connect(t, closed.addr).call(&protocol.Submit{ID: 2, Task: wireTask("x", 0)}))

	// A follower: NOT_LEADER for every request it refuses.
	n := startTwoNodes(t, Options{})
	fc := connect(t, n.fd.addr)
	for _, m := range []protocol.Message{&protocol.Submit{ID: 2, Task: wireTask("x", 0)},
		&protocol.SubmitBatch{ID: 3, Tasks: []protocol.Task{wireTask("x", 0)}}, &protocol.Cancel{ID: 4, TaskRef: ref("x")},
		&protocol.Get{ID: 5, TaskRef: ref("x")}, &protocol.List{ID: 6}, &protocol.DLQList{ID: 7},
		&protocol.DLQRequeue{ID: 8, TaskRef: ref("x")}, &protocol.DLQPurge{ID: 9, All: true},
		&protocol.Pause{ID: 10, TaskType: "w"}, &protocol.Resume{ID: 11, TaskType: "w"}} {
		got.add(m.Type(), fc.call(m))
	}
	fw := dial(t, n.fd.addr)
	fw.hello(hello("", protocol.Version, protocol.RoleWorker))
	got.add(protocol.TypeSubscribe, fw.call(&protocol.Subscribe{ID: 2, Types: []string{"w"}, Credits: 1}))
	got.add(protocol.TypeCarry, fw.call(&protocol.Carry{ID: 3}))
	got.add(protocol.TypeAdopt, fw.call(&protocol.Adopt{ID: 4}))

	// Every listed reply was seen or is excused; nothing unlisted came (checkReply
	// panics on that); no excuse is stale.
	skip := notProvoked()
	var missing []string
	for req, spec := range replies {
		want := []listedReply{{req, 0, false}}
		for _, code := range spec.errs.list() {
			want = append(want, listedReply{req, code, false})
		}
		for _, code := range spec.items.list() {
			want = append(want, listedReply{req, code, true})
		}
		if req == protocol.TypeSubmitBatch { // ACKED lists failures only
			want = append(want, listedReply{req, 0, true})
		}
		for _, l := range want {
			_, excused := skip[l]
			delete(skip, l)
			if !got[l] && !excused {
				missing = append(missing, l.String())
			}
			if got[l] && excused {
				t.Logf("%v is excused but was provoked", l)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("listed but not provoked (and not excused): %s", strings.Join(missing, "; "))
	}
	for l, why := range skip {
		t.Errorf("notProvoked names %v (%s), which the table does not list", l, why)
	}
	for l := range got {
		if spec, ok := replies[l.req]; ok && l.code != 0 && !(l.item && spec.items.has(l.code)) && !(!l.item && spec.errs.has(l.code)) {
			t.Errorf("observed %v, which the table does not list", l)
		}
	}
}
