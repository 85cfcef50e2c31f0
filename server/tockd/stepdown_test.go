package tockd

import (
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
)

// A durable SUBMIT whose record was written in this node's term, and that reaches the
// engine only after the node stepped down, is the next leader's: it is answered as
// recorded (durable, PENDING), this node's engine does not keep an untracked copy of it
// (one that would run here as if ephemeral, beside the next leader's), and the next
// leader holds it.
func TestSubmitOverlappingAStepDownIsLeftToTheNextLeader(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	ds := startDurable(t, st, nil)
	s := ds.srv
	w := durableTask("late", time.Hour)
	ps := []prepared{s.prepare(&w)}
	s.writeRecords(ps)
	if ps[0].err != nil {
		t.Fatalf("record not written while leading: %v", ps[0].err)
	}
	_, epoch := s.leadership()
	s.stepDown(epoch)
	in, err := s.submitPrepared(&ps[0])
	if err != nil {
		t.Fatalf("submit recorded before the step-down answered %v; want it accepted for the next leader", err)
	}
	if in.Task.ID != "late" || in.Task.Version != w.Version {
		t.Fatalf("reply describes %+v", in.Task)
	}
	if got, err := s.engine.Get("default", "late"); err == nil {
		t.Fatalf("the deposed node's engine holds the task (%v, durable %v): untracked", got.State, s.durabilityOf(got) == protocol.Durable)
	}
	if !storedIDs(t, st)["default/late"] {
		t.Fatal("the record is gone: the next leader would not run the task")
	}
	// The next leader holds it, durable.
	ds.stop(t)
	next := startDurable(t, st, nil)
	defer next.stop(t)
	in, err = next.srv.Engine().Get("default", "late")
	if err != nil || next.srv.durabilityOf(in) != protocol.Durable {
		t.Fatalf("the next leader holds %+v (%v), want the durable task", in, err)
	}
}
