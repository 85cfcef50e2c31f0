package task

import (
	"fmt"
	"testing"
	"time"
)

// runIDs submits n one-shot tasks due at once to h's engine, whose handler defers every
// attempt, and returns the run IDs of their first attempts.
func runIDs(t *testing.T, h *harness, n int) []uint64 {
	t.Helper()
	runs := deferring(h, "remote")
	for i := range n {
		h.submit(Task{ID: fmt.Sprintf("t%d", i), Type: "remote", Schedule: After(0)})
	}
	h.fake.Advance(0)
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = recv(t, runs)
	}
	return ids
}

// Two engines (two server starts, or two leaders of a cluster) never issue the same run
// ID, even for the same tasks submitted in the same order: a worker deduplicating on run
// IDs must never take a new run for one it already did. Each engine still resolves its
// own run IDs (Complete), and refuses the other's (ErrUnknownRun).
func TestRunIDsDifferAcrossEngines(t *testing.T) {
	const n = 200
	a, b := newHarness(t, WithWorkers(2)), newHarness(t, WithWorkers(2))
	idsA, idsB := runIDs(t, a, n), runIDs(t, b, n)
	seen := make(map[uint64]bool, 2*n)
	for _, id := range idsA {
		if id == 0 || seen[id] {
			t.Fatalf("engine A issued run ID %#x twice (or zero)", id)
		}
		seen[id] = true
	}
	for _, id := range idsB {
		if seen[id] {
			t.Fatalf("engines A and B both issued run ID %#x", id)
		}
		seen[id] = true
	}
	for i := range n {
		if err := b.e.Complete(idsA[i], nil); err == nil {
			t.Fatalf("engine B accepted engine A's run %#x", idsA[i])
		}
		if err := a.e.Complete(idsA[i], nil); err != nil {
			t.Fatalf("engine A's Complete of its own run %#x: %v", idsA[i], err)
		}
	}
}

// Finding an attempt from its run ID alone (Complete, HoldTimeout, StartTimeout) undoes
// the engine's base with one XOR: no allocation.
func TestRunIDLookupAllocatesNothing(t *testing.T) {
	h := newHarness(t, WithWorkers(1))
	runs := deferring(h, "remote")
	id := h.startDeferred(runs, Task{ID: "r", Type: "remote", Schedule: After(0), Timeout: time.Hour})
	if n := testing.AllocsPerRun(100, func() {
		if err := h.e.HoldTimeout(id); err != nil {
			t.Fatal(err)
		}
		if err := h.e.StartTimeout(id); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("HoldTimeout + StartTimeout by run ID: %v allocs, want 0", n)
	}
	if err := h.e.Complete(id, nil); err != nil {
		t.Fatal(err)
	}
}
