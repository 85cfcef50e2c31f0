package quadheap

import (
	"math/rand/v2"
	"testing"
)

// populated returns a heap holding ids 0..n-1 with random deadlines, sized
// by Grow for one more entry and ids up to n.
func populated(n int, seed uint64) (*Heap, *rand.Rand) {
	r := rand.New(rand.NewPCG(seed, 1))
	h := new(Heap)
	h.Grow(n+1, uint32(n))
	for id := range n {
		h.Push(uint32(id), r.Int64N(1e9))
	}
	return h, r
}

// assertNoAllocs fails if f allocates on average.
func assertNoAllocs(t *testing.T, name string, f func()) {
	t.Helper()
	if got := testing.AllocsPerRun(1000, f); got != 0 {
		t.Errorf("%s: %v allocs per run, want 0", name, got)
	}
}

func TestNoAllocsAfterGrow(t *testing.T) {
	const n = 4096 // more than the 1001 runs AllocsPerRun makes
	h, r := populated(n, 7)
	free := uint32(n)
	assertNoAllocs(t, "Push+Pop", func() {
		h.Push(free, r.Int64N(1e9))
		free, _, _ = h.Pop()
	})
	assertNoAllocs(t, "Update", func() {
		h.Update(r.Uint32N(n+1), r.Int64N(1e9))
	})
	next := uint32(0)
	assertNoAllocs(t, "Remove", func() {
		for !h.Remove(next) {
			next++ // skip the one id that is free
		}
		next++
	})
	assertNoAllocs(t, "Min+Contains+Deadline", func() {
		h.Min()
		h.Contains(next)
		h.Deadline(next)
	})
	assertNoAllocs(t, "Reset+Push", func() {
		h.Reset()
		h.Push(n, 1)
	})
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
}

func TestNoAllocsAfterWarming(t *testing.T) {
	// Without Grow: once the heap has held n entries and ids up to n-1,
	// churn within those bounds allocates nothing.
	const n = 4096
	var h Heap
	r := rand.New(rand.NewPCG(8, 1))
	for id := range uint32(n) {
		h.Push(id, r.Int64N(1e9))
	}
	last, _, _ := h.Pop()
	assertNoAllocs(t, "Push+Pop", func() {
		h.Push(last, r.Int64N(1e9))
		last, _, _ = h.Pop()
	})
	assertNoAllocs(t, "Remove+Push", func() {
		id := r.Uint32N(n)
		if h.Remove(id) {
			h.Push(id, r.Int64N(1e9))
		}
	})
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
}
