package tockd

import "testing"

// Waiting for the record of an ACKS's run costs no allocation per run: the batch itself
// is the listener, and the run's ID travels beside it (a closure over each run's ID was
// one allocation per run acknowledged, durable or not). Here the task has no record, so
// there is nothing to wait for, as for every ephemeral task's ACK.
func TestAckBatchWaitsWithoutAllocating(t *testing.T) {
	_, ts := startLeader(t)
	d := ts.srv.replica.dur
	b := &ackBatch{id: 1}
	k := taskKey{"default", "ephemeral"}
	var runID uint64
	allocs := testing.AllocsPerRun(1000, func() {
		runID++
		if d.afterDelete(k, true, b, runID) {
			t.Fatal("a wait for a task with no record")
		}
	})
	if allocs != 0 {
		t.Fatalf("afterDelete with an *ackBatch allocated %v times per run, want 0", allocs)
	}
}
