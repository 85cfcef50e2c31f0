package task

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestWaitQueuePopsInDueThenArrivalOrder pushes and pops at random against a sorted
// model, verifying the heap after every mutation; equal due times leave in arrival order.
func TestWaitQueuePopsInDueThenArrivalOrder(t *testing.T) {
	var q waitQueue
	var model []waiter
	seq := uint64(0)
	for i := range 5000 {
		if len(model) == 0 || rand.IntN(3) > 0 {
			seq++
			w := waiter{dueNs: int64(rand.IntN(50)), seq: seq, item: runItem{runID: seq}}
			q.push(w)
			model = append(model, w)
		} else {
			slices.SortFunc(model, func(a, b waiter) int {
				if a.before(&b) {
					return -1
				}
				return 1
			})
			got, want := q.pop(), model[0]
			model = model[1:]
			if got.item.runID != want.item.runID {
				t.Fatalf("op %d: popped (due %d, seq %d); want (due %d, seq %d)", i, got.dueNs, got.seq, want.dueNs, want.seq)
			}
		}
		if err := q.verify(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if q.len() != len(model) {
			t.Fatalf("op %d: len %d; want %d", i, q.len(), len(model))
		}
	}
}

// TestWaitQueueLetsABurstsMemoryGo: emptied from a backlog past shrinkAbove, the queue
// drops its slice; a small one keeps it for reuse.
func TestWaitQueueLetsABurstsMemoryGo(t *testing.T) {
	for _, n := range []int{shrinkAbove / 2, shrinkAbove * 2} {
		var q waitQueue
		for i := range n {
			q.push(waiter{dueNs: int64(i), seq: uint64(i)})
		}
		for range n {
			q.pop()
		}
		if kept := cap(q) > 0; kept != (n <= shrinkAbove) {
			t.Errorf("emptied from %d waiters: capacity %d kept", n, cap(q))
		}
	}
}

// TestWaitQueueAllocatesNothingOnceGrown pins push and pop at no allocation.
func TestWaitQueueAllocatesNothingOnceGrown(t *testing.T) {
	var q waitQueue
	for i := range 64 {
		q.push(waiter{dueNs: int64(i)})
	}
	if n := testing.AllocsPerRun(100, func() { q.push(q.pop()) }); n != 0 {
		t.Fatalf("pop + push: %v allocs; want 0", n)
	}
}
