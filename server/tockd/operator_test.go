package tockd

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tock-sched/tock/core/task"
)

// Workers lists each subscribed worker with its credits left and its runs in flight:
// after one FIRE, the worker that had 3 credits has 2 and one run in flight.
func TestWorkersListsCreditsAndRuns(t *testing.T) {
	ts := startServer(t, Options{})
	w := connectNamedWorker(t, ts.addr, "alpha", 3, "w", "x")
	c := connect(t, ts.addr)
	submit(t, c, 2, workTask("one", 1))
	f := w.fire()
	ws := ts.srv.Workers()
	if len(ws) != 1 {
		t.Fatalf("Workers() = %+v, want one worker", ws)
	}
	got := ws[0]
	if got.Name != "alpha" || got.Remote != w.nc.LocalAddr().String() || !reflect.DeepEqual(got.Types, []string{"w", "x"}) ||
		got.Credits != 2 || got.InFlight != 1 || got.Since.IsZero() {
		t.Fatalf("Workers()[0] = %+v, want alpha at %s serving [w x] with 2 credits and 1 run in flight",
			got, w.nc.LocalAddr())
	}
	wantOK(t, w.ack(f.RunID))
	c.waitState(3, "one", task.Succeeded)
	if got := ts.srv.Workers()[0]; got.Credits != 2 || got.InFlight != 0 {
		t.Fatalf("after the ACK: %+v, want 2 credits (the worker has not sent CREDIT) and none in flight", got)
	}
}

// SetPaused is PAUSE and RESUME: a paused type's run waits and PausedTypes names it;
// resumed, the run is fired. An empty type is refused, naming the field.
func TestSetPausedPausesAndResumes(t *testing.T) {
	ts := startServer(t, Options{})
	w := connectWorker(t, ts.addr, 10, "w")
	c := connect(t, ts.addr)
	if err := ts.srv.SetPaused("w", true); err != nil {
		t.Fatalf("SetPaused(w, true): %v", err)
	}
	if err := ts.srv.SetPaused("b", true); err != nil {
		t.Fatalf("SetPaused(b, true): %v", err)
	}
	if got := ts.srv.PausedTypes(); !reflect.DeepEqual(got, []string{"b", "w"}) {
		t.Fatalf("PausedTypes() = %q, want [b w]", got)
	}
	submit(t, c, 2, workTask("held", 1))
	waitWaiting(t, ts.srv, 1)
	if err := ts.srv.SetPaused("w", false); err != nil {
		t.Fatalf("SetPaused(w, false): %v", err)
	}
	if f := w.fire(); f.TaskID != "held" {
		t.Fatalf("FIRE of %s, want the resumed type's run", f.TaskID)
	}
	if got := ts.srv.PausedTypes(); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("PausedTypes() after RESUME of w = %q, want [b]", got)
	}
	if err := ts.srv.SetPaused("", true); !errors.Is(err, ErrInvalidArgument) || err.Error() != "tockd: invalid argument: type is empty" {
		t.Fatalf("SetPaused of an empty type: %v, want ErrInvalidArgument naming type", err)
	}
}

// Without a Store the node is alone: it leads, at epoch 0, and is the only node.
func TestLeaderAndNodesAlone(t *testing.T) {
	ts := startServer(t, Options{NodeName: "solo"})
	connect(t, ts.addr) // answered: Serve has its listener, whose address the node advertises
	got := ts.srv.Leader()
	if want := (LeaderView{Node: "solo", Leading: true}); got != want {
		t.Fatalf("Leader() = %+v, want %+v", got, want)
	}
	nodes, err := ts.srv.Nodes(t.Context())
	if err != nil || len(nodes) != 1 || nodes[0] != (Node{Addr: ts.addr, Leads: true, Self: true}) {
		t.Fatalf("Nodes() = %+v, %v, want this node alone, leading", nodes, err)
	}
}

// With a Store, both nodes list the two of them, the leader first with its epoch; the
// follower's Leader names the leader's address.
func TestLeaderAndNodesOfTwo(t *testing.T) {
	n := startTwoNodes(t, Options{})
	if !waitUntil(func() bool { return n.follower.Leader().LeaderAddr != "" }) {
		t.Fatalf("the follower never learnt the leader: %+v", n.follower.Leader())
	}
	lv := n.leader.srv.Leader()
	if !lv.Leading || !lv.Clustered || lv.Epoch == 0 || lv.LeaderAddr != n.leader.addr {
		t.Fatalf("leader's Leader() = %+v, want leading at an epoch, at %s", lv, n.leader.addr)
	}
	if fv := n.follower.Leader(); fv.Leading || !fv.Clustered || fv.Epoch != lv.Epoch || fv.LeaderAddr != n.leader.addr {
		t.Fatalf("follower's Leader() = %+v, want following %s at epoch %d", fv, n.leader.addr, lv.Epoch)
	}
	var nodes []Node
	if !waitUntil(func() bool {
		var err error
		nodes, err = n.follower.Nodes(t.Context())
		return err == nil && len(nodes) == 2
	}) {
		t.Fatalf("the follower's Nodes() = %+v, want both nodes", nodes)
	}
	want := []Node{{Addr: n.leader.addr, Leads: true, Epoch: lv.Epoch}, {Addr: n.fd.addr, Self: true}}
	if nodes[1].Epoch <= lv.Epoch {
		t.Fatalf("the follower's candidacy has epoch %d, want newer than the leader's %d", nodes[1].Epoch, lv.Epoch)
	}
	want[1].Epoch = nodes[1].Epoch
	if !reflect.DeepEqual(nodes, want) {
		t.Fatalf("Nodes() = %+v, want %+v", nodes, want)
	}
}
