package tockd

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// The store commits a durable submit's record and then reports a timeout (as etcd does
// when the reply is lost): the submit is answered UNCERTAIN, not OVERLOADED, and the
// client's retry of the same "after" task is accepted, once: one task in the engine,
// one record in etcd, both due at the same time. A retry at the next leader, which
// loaded the record, is accepted too.
func TestUncertainWriteRetriedOnce(t *testing.T) {
	st := openStore(t, t.TempDir())
	srv := newServer(t, Options{Store: st, EngineOptions: []task.Option{task.WithWorkers(2)}})
	var lost atomic.Bool
	srv.replica.committer.afterPut = func(recs []store.Record, errs []error) []error {
		if lost.Swap(true) {
			return errs
		}
		for i := range errs {
			if errs[i] != nil {
				t.Errorf("the write itself failed: %v", errs[i])
			}
			errs[i] = fmt.Errorf("%w: put txn of %d records: %w", store.ErrUncertain, len(recs), context.DeadlineExceeded)
		}
		return errs
	}
	ds := serve(t, srv)
	waitLeading(t, srv, "the lone node was not elected")

	c := connect(t, ds.addr)
	w := durableTask("once", time.Hour)
	wantError(t, c.call(&protocol.Submit{ID: 2, Task: w}), protocol.CodeUncertain, "")
	if !storedIDs(t, st)["default/once"] {
		t.Fatal("the write did not land: the test's premise")
	}
	m := c.call(&protocol.Submit{ID: 3, Task: w})
	r, ok := m.(*protocol.TaskStatus)
	if !ok || r.Durability != protocol.Durable {
		t.Fatalf("the retry was answered %v %+v, want TASK_STATUS durable", m.Type(), m)
	}
	// Once more: the engine holds it, as recorded: the same answer, nothing new. Another
	// task at the same version is refused.
	if m := c.call(&protocol.Submit{ID: 4, Task: w}); m.Type() != protocol.TypeTaskStatus {
		t.Fatalf("a second retry was answered %v %+v, want TASK_STATUS", m.Type(), m)
	}
	other := w
	other.Payload = []byte("other")
	wantError(t, c.call(&protocol.Submit{ID: 5, Task: other}), protocol.CodeExists, "")
	if n := srv.Stats().Engine.Tasks; n != 1 {
		t.Fatalf("%d tasks in the engine, want 1", n)
	}
	var recs []store.Record
	if _, err := st.Records().Load(context.Background(), func(r store.Record) error { recs = append(recs, r); return nil }); err != nil || len(recs) != 1 {
		t.Fatalf("records %v (%v), want one", recs, err)
	}
	stored, err := decodeTask(recs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	in, err := srv.Engine().Get("default", "once")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Schedule.Kind != task.KindAt || stored.Schedule.At != in.NextRun.UnixNano() || in.NextRun.UnixNano() != r.NextRun {
		t.Fatalf("record due %v, engine due %v, reply's next_run %v: want one due time",
			time.Unix(0, stored.Schedule.At), in.NextRun, time.Unix(0, r.NextRun))
	}
}

// The write that was answered UNCERTAIN landed, and the leader stepped down before the
// client retried: the next leader loaded the record, and the retry there is accepted
// (not EXISTS), with the task as loaded.
func TestUncertainWriteRetriedAtTheNextLeader(t *testing.T) {
	st1 := openStore(t, t.TempDir())
	st2 := openPeerStore(t, st1, "n2")
	a := newServer(t, Options{Store: st1, EngineOptions: []task.Option{task.WithWorkers(2)}})
	a.replica.committer.afterPut = func(recs []store.Record, errs []error) []error {
		for i := range errs {
			errs[i] = fmt.Errorf("%w: put txn of %d records: %w", store.ErrUncertain, len(recs), context.DeadlineExceeded)
		}
		return errs
	}
	ad := serve(t, a)
	waitLeading(t, a, "the first node was not elected")
	b := newServer(t, Options{Store: st2})
	bd := serve(t, b)

	w := durableTask("once", time.Hour)
	wantError(t, connect(t, ad.addr).call(&protocol.Submit{ID: 2, Task: w}), protocol.CodeUncertain, "")
	ad.stop(t) // resigns
	waitLeading(t, b, "the second node was not elected")
	m := connect(t, bd.addr).call(&protocol.Submit{ID: 2, Task: w})
	if r, ok := m.(*protocol.TaskStatus); !ok || r.Durability != protocol.Durable {
		t.Fatalf("the retry at the next leader was answered %v %+v, want TASK_STATUS durable", m.Type(), m)
	}
	if n := b.Stats().Engine.Tasks; n != 1 {
		t.Fatalf("%d tasks at the next leader, want 1", n)
	}
	if n := len(storedIDs(t, st2)); n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
}
