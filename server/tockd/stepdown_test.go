package tockd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// A durable SUBMIT whose record was written in this node's term, and that reaches the
// engine only after the node stepped down, is the next leader's: it is answered as
// recorded (durable, PENDING), this node's engine does not keep an untracked copy of it
// (one that would run here as if ephemeral, beside the next leader's), and the next
// leader holds it.
func TestSubmitOverlappingAStepDownIsLeftToTheNextLeader(t *testing.T) {
	st, ds := startLeader(t)
	s := ds.srv
	w := durableTask("late", time.Hour)
	ps := s.requests.prepareOne(&w)
	s.requests.writeRecords(ps)
	if ps[0].err != nil {
		t.Fatalf("record not written while leading: %v", ps[0].err)
	}
	_, epoch := s.leadership()
	s.replica.lead.stepDown(epoch)
	in, err := s.requests.submitPrepared(&ps[0])
	if err != nil {
		t.Fatalf("submit recorded before the step-down answered %v; want it accepted for the next leader", err)
	}
	if in.Task.ID != "late" || in.Task.Version != w.Version {
		t.Fatalf("reply describes %+v", in.Task)
	}
	if got, err := s.engine.Get("default", "late"); err == nil {
		t.Fatalf("the deposed node's engine holds the task (%v, durable %v): untracked", got.State, s.requests.durabilityOf(got) == protocol.Durable)
	}
	if !storedIDs(t, st)["default/late"] {
		t.Fatal("the record is gone: the next leader would not run the task")
	}
	// The next leader holds it, durable.
	ds.stop(t)
	next := startDurable(t, st, nil)
	in, err = next.srv.Engine().Get("default", "late")
	if err != nil || next.srv.requests.durabilityOf(in) != protocol.Durable {
		t.Fatalf("the next leader holds %+v (%v), want the durable task", in, err)
	}
}

// A durable submit claimed in one term is never written in a later one of the same node
// (that term's load may be done already, and would miss it): the write is refused
// NOT_LEADER, nothing recorded, and the claim (dropped at the step-down) is not held.
func TestClaimOfAnEndedTermIsNotWrittenInTheNext(t *testing.T) {
	st, ds := startLeader(t)
	s := ds.srv
	w := durableTask("old-term", time.Hour)
	ps := s.requests.prepareOne(&w)
	if ps[0].err != nil {
		t.Fatal(ps[0].err)
	}
	// The term ends, and a later one of this node begins, as the server sees one: a
	// fresh fence stored at an election (terms are told apart by that pointer, so its
	// values do not matter here).
	old := s.replica.lead.fence.Load()
	_, epoch := s.leadership()
	s.replica.lead.stepDown(epoch)
	next := *old
	s.replica.lead.fence.Store(&next)
	defer s.replica.lead.fence.Store(nil)
	s.requests.writeRecords(ps)
	if e, ok := ps[0].err.(*protocol.Error); !ok || e.Code != protocol.CodeNotLeader {
		t.Fatalf("write of the old term's claim: %v, want NOT_LEADER", ps[0].err)
	}
	if storedIDs(t, st)["default/old-term"] {
		t.Fatal("recorded in the later term")
	}
	if s.replica.dur.held(taskKey{"default", "old-term"}) {
		t.Fatal("the claim was not released")
	}
}

// A write answered with an uncertain error that did land, while the node stepped down,
// was elected again and loaded that record: the failed submit must not undo the claim,
// which is now the new term's entry for the loaded task.
func TestFailedWriteOfAnEndedTermLeavesTheNextTermsEntry(t *testing.T) {
	_, ds := startLeader(t)
	s := ds.srv
	old := s.replica.lead.fence.Load()
	defer s.replica.lead.fence.Store(nil)
	s.replica.committer.afterPut = func(recs []store.Record, errs []error) []error {
		// Between the write and its answer: a step-down, a new term, its load.
		_, epoch := s.leadership()
		s.replica.lead.stepDown(epoch)
		next := *old
		s.replica.lead.fence.Store(&next)
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		if err := s.replica.dur.loadDurable(ctx, epoch+1); err != nil {
			t.Errorf("load: %v", err)
		}
		for i := range errs {
			errs[i] = fmt.Errorf("%w: %w", store.ErrUncertain, context.DeadlineExceeded)
		}
		return errs
	}
	w := durableTask("landed", time.Hour)
	ps := s.requests.prepareOne(&w)
	s.requests.writeRecords(ps)
	if e, ok := ps[0].err.(*protocol.Error); !ok || e.Code != protocol.CodeUncertain {
		t.Fatalf("write answered %v, want UNCERTAIN", ps[0].err)
	}
	in, err := s.engine.Get("default", "landed")
	if err != nil || s.requests.durabilityOf(in) != protocol.Durable {
		t.Fatalf("the new term's loaded task: %+v (%v), want it held durable", in, err)
	}
}
