package tockd

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// deposedStopBound is how soon a leader whose election key went must stop FIREing: the
// watch on its key delivers the deletion within milliseconds on loopback; the rest is
// slack for a loaded 2-core machine running -race (goroutine scheduling, the step-down's
// eviction of workers). Without the watch, the node would FIRE until its session ends,
// which with live keep-alives is never.
const deposedStopBound = 2 * time.Second

// A leader that makes no durable write (here: an ephemeral recurring task) learns its
// term ended the moment its election key is deleted, while its session and keep-alives
// carry on: it stops dispatching and sends its worker away within deposedStopBound.
func TestDeposedLeaderWithoutWritesStopsWhenItsKeyGoes(t *testing.T) {
	n := startTwoNodes(t, Options{})
	every := workTask("tick", 1)
	every.Schedule = protocol.Schedule{Kind: task.KindEvery, Interval: int64(20 * time.Millisecond)}
	c := connect(t, n.leader.addr)
	submit(t, c, 2, every)
	w := connectWorker(t, n.leader.addr, 10, "w")
	for range 2 { // it runs at the leader
		f := w.fire()
		wantOK(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: f.Epoch}))
	}

	deleteLeaderKey(t, n.st1.Client())
	deletedAt := time.Now()
	fired := 0
	for {
		m, err := w.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the deposed leader neither FIREd nor closed its worker's connection within %v", waitBound)
		}
		if err != nil {
			break // evicted
		}
		if f, ok := m.(*protocol.Fire); ok {
			fired++
			if since := time.Since(deletedAt); since > deposedStopBound {
				t.Fatalf("the deposed leader still FIREs %v after its election key was deleted (%d FIREs since; leading %v)",
					since, fired, n.leader.srv.Stats().IsLeader)
			}
			w.send(&protocol.Acks{ID: 1000 + uint64(fired), RunIDs: []uint64{f.RunID}, Epoch: f.Epoch, Credits: 1})
		}
	}
	if since := time.Since(deletedAt); since > deposedStopBound {
		t.Fatalf("the worker was sent away only %v after the key was deleted, want within %v", since, deposedStopBound)
	}
	t.Logf("stepped down %v after the key went, %d FIREs later", time.Since(deletedAt), fired)
	waitLeading(t, n.follower, "the follower was not elected after the leader's key went")
}
