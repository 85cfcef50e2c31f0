package tockd

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// A durable parent's failed end and its ParentCancel children's cancels are recorded
// together: a term that ends right after the parent's record is deleted leaves no child
// record for the next leader to run.

// holdAfter makes d's deleter stop before each batch that comes after the batch that
// deleted id (id's delete lands first): such a batch is sent on the channel returned, and
// the deleter goes on once release is called. The test's end releases it. And the end
// whose queueing queued id's delete waits (within waitBound) until the deleter has
// taken id's batch, unless id's delete is held for its children's: an end that the same
// engine call emits next (a child cancelled by id's) then comes after id's batch.
func holdAfter(t *testing.T, d *durability, id string) (held <-chan []store.Versioned, release func()) {
	t.Helper()
	batches := make(chan []store.Versioned, 16)
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	passed := false // deleter goroutine only
	taken := make(chan struct{})
	wait := func(k taskKey) {
		d.mu.Lock()
		held := d.queued[k].held // waiting for its children's ends, which come next
		d.mu.Unlock()
		if k.id == id && !held {
			select {
			case <-taken:
			case <-time.After(waitBound):
			}
		}
	}
	d.afterQueue.Store(&wait)
	d.mu.Lock()
	d.beforeDelete = func(keys []store.Versioned) {
		if !passed {
			for _, k := range keys {
				passed = passed || k.ID == id
			}
			if passed {
				close(taken)
			}
			return
		}
		select {
		case <-released:
			return
		case batches <- keys:
		}
		<-released
	}
	d.mu.Unlock()
	t.Cleanup(release) // registered after the server's stop: runs before it
	return batches, release
}

// TestCancelledParentsChildrenNotRunAfterFailover: a durable parent p with three
// ParentCancel children is cancelled; the leader's term ends right after p's record is
// deleted (before any later delete of its term lands). The next leader must find none of
// the children: they were cancelled with p, and with p's record gone a child record left
// would count p as done and run.
func TestCancelledParentsChildrenNotRunAfterFailover(t *testing.T) {
	n := startTwoNodes(t, Options{})
	held, release := holdAfter(t, n.leader.srv.replica.dur, "p")
	c := connect(t, n.leader.addr)
	p := durableTask("p", time.Hour)
	p.Type = "root"
	kids := []string{"k1", "k2", "k3"}
	ws := []protocol.Task{p}
	for _, k := range kids {
		ws = append(ws, durableChild(k, "p"))
	}
	for i, r := range c.batch(2, ws...) {
		if r.Code != 0 || r.Durability != protocol.Durable {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if r, ok := c.call(&protocol.Cancel{ID: 3, TaskRef: protocol.TaskRef{TaskID: "p"}}).(*protocol.TaskStatus); !ok || r.State != task.Cancelled {
		t.Fatalf("CANCEL p answered %+v, want TASK_STATUS CANCELLED", r) // once p's record is deleted
	}
	if ids := storedIDs(t, n.st2); len(ids) != 0 {
		t.Fatalf("records once p's CANCEL is confirmed: %v, want none (its children's go with it)", ids)
	}
	deleteLeaderKey(t, n.st1.Client()) // the term ends; a later batch of it is fenced
	select {
	case keys := <-held:
		t.Logf("a later delete of the ended term: %v", keys)
	default:
	}
	release()
	waitLeading(t, n.follower, "the follower never took over")
	fc := connect(t, n.fd.addr)
	var r protocol.Message
	for _, k := range kids {
		if !waitUntil(func() bool {
			r = fc.call(&protocol.Get{ID: 4, TaskRef: protocol.TaskRef{TaskID: k}})
			e, ok := r.(*protocol.Error)
			return !ok || e.Code != protocol.CodeNotLeader
		}) {
			t.Fatalf("the new leader answered GET %s NOT_LEADER for %v", k, waitBound)
		}
		if e, ok := r.(*protocol.Error); !ok || e.Code != protocol.CodeNotFound {
			t.Errorf("child %s at the new leader: %v %+v, want NOT_FOUND (cancelled with its parent)", k, r.Type(), r)
		}
	}
	if ids := storedIDs(t, n.st2); len(ids) != 0 {
		t.Errorf("records at the new leader: %v, want none", ids)
	}
}

// TestDeadParentsCascadeDeletedAsOneGroup: a durable parent p of 200 ParentCancel
// children, one of which (k0) has a child g, and of one ParentRunAnyway child r, ends
// DEAD (its worker's NACK, not retryable). Its delete and those of the 201 tasks its end
// cancels reach the deleter as one batch, g before k0 and p last, more than one
// transaction holds (124 a transaction): the NACK's OK comes once all are gone. r is not
// in it: it runs, its parent counted as done.
func TestDeadParentsCascadeDeletedAsOneGroup(t *testing.T) {
	st, ds, c, w := startDurableWithWorker(t, 2) // p's FIRE, then r's
	batches := make(chan []store.Versioned, 64)
	d := ds.srv.replica.dur
	d.mu.Lock()
	d.beforeDelete = func(keys []store.Versioned) { batches <- keys }
	d.mu.Unlock()
	const kids = 200
	ws := []protocol.Task{durableWorkTask("p")}
	for i := range kids {
		ws = append(ws, durableChild(fmt.Sprint("k", i), "p"))
	}
	ws = append(ws, durableChild("g", "k0"))
	r := durableChild("r", "p")
	r.DependsOn.OnParentFailure = task.ParentRunAnyway
	ws = append(ws, r)
	for i, res := range c.batch(2, ws...) {
		if res.Code != 0 {
			t.Fatalf("result %d: %+v", i, res)
		}
	}
	f := w.fire()
	if f.TaskID != "p" {
		t.Fatalf("FIRE %s, want p", f.TaskID)
	}
	wantOK(t, w.req(&protocol.Nack{RunID: f.RunID, Epoch: f.Epoch, Err: "boom"})) // once the group is deleted
	var group []store.Versioned
	select {
	case group = <-batches:
	default:
		t.Fatal("the NACK was answered OK with no delete batch taken")
	}
	pos := map[string]int{}
	for i, k := range group {
		pos[k.ID] = i
	}
	if len(group) != kids+2 || pos["p"] != len(group)-1 || pos["g"] > pos["k0"] {
		t.Fatalf("the first delete batch holds %d keys, p at %d, g at %d, k0 at %d; want %d keys, p last, g before k0",
			len(group), pos["p"], pos["g"], pos["k0"], kids+2)
	}
	if _, ok := pos["r"]; ok {
		t.Fatal("r (ParentRunAnyway) was deleted with the group")
	}
	if ids := storedIDs(t, st); len(ids) != 1 || !ids["default/r"] {
		t.Fatalf("records once p's NACK is confirmed: %d (%v), want r alone", len(ids), len(ids) < 10 && len(ids) > 0)
	}
	if f := w.fire(); f.TaskID != "r" {
		t.Fatalf("FIRE %s after p's end, want r", f.TaskID)
	}
}
