package quadheap

import (
	"errors"
	"slices"
	"testing"
	"unsafe"
)

func TestEntrySize(t *testing.T) {
	// 16 bytes: four siblings span one 64-byte line's worth of memory, and a
	// sift step moves one entry with a single 16-byte copy.
	if got := unsafe.Sizeof(entry{}); got != 16 {
		t.Fatalf("unsafe.Sizeof(entry{}) = %d, want 16", got)
	}
	if got := unsafe.Offsetof(entry{}.id); got != 8 {
		t.Fatalf("unsafe.Offsetof(entry{}.id) = %d, want 8", got)
	}
}

func TestParent(t *testing.T) {
	// Boundaries of each sibling group 4p+1..4p+4 and their neighbours.
	for _, tc := range []struct{ i, want int }{
		{1, 0}, {2, 0}, {3, 0}, {4, 0},
		{5, 1}, {6, 1}, {8, 1},
		{9, 2}, {12, 2}, {13, 3},
		{16, 3}, {17, 4}, {20, 4},
		{21, 5}, {22, 5}, {24, 5}, {25, 6},
		{84, 20}, {85, 21}, {86, 21},
		{340, 84}, {341, 85},
		{1 << 30, (1<<30 - 1) / 4},
	} {
		if got := parent(tc.i); got != tc.want {
			t.Errorf("parent(%d) = %d, want %d", tc.i, got, tc.want)
		}
	}
}

func TestFirstChild(t *testing.T) {
	for _, tc := range []struct{ i, want int }{
		{0, 1}, {1, 5}, {2, 9}, {3, 13}, {4, 17},
		{5, 21}, {6, 25}, {20, 81}, {21, 85}, {22, 89},
		{84, 337}, {85, 341},
	} {
		if got := firstChild(tc.i); got != tc.want {
			t.Errorf("firstChild(%d) = %d, want %d", tc.i, got, tc.want)
		}
	}
}

func TestParentChildInverse(t *testing.T) {
	// Every child of i names i as its parent; the indices just outside the
	// group (c-1 and c+4) do not.
	for i := range 5000 {
		c := firstChild(i)
		for k := range 4 {
			if p := parent(c + k); p != i {
				t.Fatalf("parent(firstChild(%d)+%d) = %d, want %d", i, k, p, i)
			}
		}
		if i > 0 && parent(c-1) != i-1 {
			t.Fatalf("parent(%d) = %d, want %d", c-1, parent(c-1), i-1)
		}
		if parent(c+4) != i+1 {
			t.Fatalf("parent(%d) = %d, want %d", c+4, parent(c+4), i+1)
		}
	}
}

// mustVerifyT fails the test if h is inconsistent.
func mustVerifyT(t testing.TB, h *Heap) {
	t.Helper()
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
}

// pair is an (id, deadline) result, for comparing drains.
type pair struct {
	id       uint32
	deadline int64
}

// build returns a heap holding ps, verified.
func build(t testing.TB, ps ...pair) *Heap {
	t.Helper()
	var h Heap
	for _, p := range ps {
		if !h.Push(p.id, p.deadline) {
			t.Fatalf("Push(%d, %d) = false while building", p.id, p.deadline)
		}
		mustVerifyT(t, &h)
	}
	return &h
}

// drain pops everything, verifying after each pop and checking that
// deadlines come out non-decreasing.
func drain(t testing.TB, h *Heap) []pair {
	t.Helper()
	var out []pair
	for h.Len() > 0 {
		id, d, ok := h.Pop()
		if !ok {
			t.Fatalf("Pop() ok = false with Len() = %d", h.Len())
		}
		mustVerifyT(t, h)
		if n := len(out); n > 0 && out[n-1].deadline > d {
			t.Fatalf("Pop() deadline %d after %d", d, out[n-1].deadline)
		}
		out = append(out, pair{id, d})
	}
	return out
}

// mustDrainTo drains h (see drain) and checks that it held exactly want, in order.
func mustDrainTo(t testing.TB, h *Heap, want []pair) {
	t.Helper()
	if got := drain(t, h); !slices.Equal(got, want) {
		t.Fatalf("drained %v, want %v", got, want)
	}
}

// retimeCase is a table row for an operation that gives id a deadline, over a heap
// built from start: the operation's result, and what the heap drains to after it.
type retimeCase struct {
	name     string
	start    []pair
	id       uint32
	deadline int64
	want     bool
	drained  []pair
}

func TestZeroValue(t *testing.T) {
	var h Heap
	mustVerifyT(t, &h)
	if h.Len() != 0 {
		t.Errorf("Len() = %d, want 0", h.Len())
	}
	if id, d, ok := h.Min(); ok || id != 0 || d != 0 {
		t.Errorf("Min() = %d, %d, %v; want 0, 0, false", id, d, ok)
	}
	if id, d, ok := h.Pop(); ok || id != 0 || d != 0 {
		t.Errorf("Pop() = %d, %d, %v; want 0, 0, false", id, d, ok)
	}
	if h.Contains(0) || h.Contains(1<<31) {
		t.Error("Contains on empty heap = true")
	}
	if d, ok := h.Deadline(7); ok || d != 0 {
		t.Errorf("Deadline(7) = %d, %v; want 0, false", d, ok)
	}
	if h.Remove(0) {
		t.Error("Remove(0) on empty heap = true")
	}
	if h.Update(0, 5) {
		t.Error("Update(0, 5) on empty heap = true")
	}
	h.Reset()
	mustVerifyT(t, &h)
}

func TestPush(t *testing.T) {
	for _, tc := range []retimeCase{
		{"empty", nil, 3, 10, true, []pair{{3, 10}}},
		{"new min", []pair{{1, 5}, {2, 7}}, 3, 1, true, []pair{{3, 1}, {1, 5}, {2, 7}}},
		{"new max", []pair{{1, 5}, {2, 7}}, 3, 9, true, []pair{{1, 5}, {2, 7}, {3, 9}}},
		{"negative deadline", []pair{{1, 0}}, 0, -4, true, []pair{{0, -4}, {1, 0}}},
		{"large id grows pos", []pair{{1, 5}}, 100_000, 2, true, []pair{{100_000, 2}, {1, 5}}},
		{"duplicate id same deadline", []pair{{1, 5}, {2, 7}}, 2, 7, false, []pair{{1, 5}, {2, 7}}},
		{"duplicate id new deadline", []pair{{1, 5}, {2, 7}}, 2, 1, false, []pair{{1, 5}, {2, 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := build(t, tc.start...)
			if got := h.Push(tc.id, tc.deadline); got != tc.want {
				t.Fatalf("Push(%d, %d) = %v, want %v", tc.id, tc.deadline, got, tc.want)
			}
			mustVerifyT(t, h)
			mustDrainTo(t, h, tc.drained)
		})
	}
}

func TestRemove(t *testing.T) {
	five := []pair{{0, 50}, {1, 10}, {2, 40}, {3, 20}, {4, 30}}
	for _, tc := range []struct {
		name    string
		start   []pair
		id      uint32
		want    bool
		drained []pair
	}{
		{"only", []pair{{9, 1}}, 9, true, nil},
		{"min", five, 1, true, []pair{{3, 20}, {4, 30}, {2, 40}, {0, 50}}},
		{"max", five, 0, true, []pair{{1, 10}, {3, 20}, {4, 30}, {2, 40}}},
		{"middle", five, 4, true, []pair{{1, 10}, {3, 20}, {2, 40}, {0, 50}}},
		{"last slot", []pair{{0, 1}, {1, 2}}, 1, true, []pair{{0, 1}}},
		{"absent id below len(pos)", five, 7, false, []pair{{1, 10}, {3, 20}, {4, 30}, {2, 40}, {0, 50}}},
		{"absent id beyond len(pos)", five, 1 << 20, false, []pair{{1, 10}, {3, 20}, {4, 30}, {2, 40}, {0, 50}}},
		{"empty", nil, 0, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := build(t, tc.start...)
			if got := h.Remove(tc.id); got != tc.want {
				t.Fatalf("Remove(%d) = %v, want %v", tc.id, got, tc.want)
			}
			mustVerifyT(t, h)
			if h.Contains(tc.id) {
				t.Fatalf("Contains(%d) = true after Remove", tc.id)
			}
			mustDrainTo(t, h, tc.drained)
		})
	}
}

// TestRemoveSiftsUp covers the case where the last entry, moved into the
// hole left by Remove, is smaller than the hole's parent: it lives in a
// different subtree, so it must sift up rather than down.
func TestRemoveSiftsUp(t *testing.T) {
	// Pushed in order, id i lands at index i: index 1 (100) has children
	// 5..8 (200..203), and index 9 (11) is the first child of index 2 (10).
	var h Heap
	ds := []int64{0, 100, 10, 103, 104, 200, 201, 202, 203, 11}
	for i, d := range ds {
		h.Push(uint32(i), d)
	}
	mustVerifyT(t, &h)
	for i := range ds {
		if h.pos[i] != uint32(i+1) {
			t.Fatalf("id %d at index %d, want %d", i, h.pos[i]-1, i)
		}
	}
	// entries[9] (id 9, deadline 11) is a child of entries[2] (deadline 10).
	// Removing id 5 (entries[5], child of entries[1] = 100) puts 11 under 100.
	if !h.Remove(5) {
		t.Fatal("Remove(5) = false")
	}
	mustVerifyT(t, &h)
	if d, ok := h.Deadline(9); !ok || d != 11 {
		t.Fatalf("Deadline(9) = %d, %v; want 11, true", d, ok)
	}
	if p := h.pos[9] - 1; p != 1 {
		t.Fatalf("id 9 at index %d, want 1 (sifted up past 100)", p)
	}
}

func TestUpdate(t *testing.T) {
	five := []pair{{0, 50}, {1, 10}, {2, 40}, {3, 20}, {4, 30}}
	for _, tc := range []retimeCase{
		{"decrease to min", five, 0, 5, true, []pair{{0, 5}, {1, 10}, {3, 20}, {4, 30}, {2, 40}}},
		{"increase min to max", five, 1, 60, true, []pair{{3, 20}, {4, 30}, {2, 40}, {0, 50}, {1, 60}}},
		{"same deadline", five, 3, 20, true, []pair{{1, 10}, {3, 20}, {4, 30}, {2, 40}, {0, 50}}},
		{"middle moves", five, 2, 25, true, []pair{{1, 10}, {3, 20}, {2, 25}, {4, 30}, {0, 50}}},
		{"absent id", five, 9, 1, false, []pair{{1, 10}, {3, 20}, {4, 30}, {2, 40}, {0, 50}}},
		{"absent id beyond len(pos)", five, 1 << 20, 1, false, []pair{{1, 10}, {3, 20}, {4, 30}, {2, 40}, {0, 50}}},
		{"empty", nil, 0, 1, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := build(t, tc.start...)
			if got := h.Update(tc.id, tc.deadline); got != tc.want {
				t.Fatalf("Update(%d, %d) = %v, want %v", tc.id, tc.deadline, got, tc.want)
			}
			mustVerifyT(t, h)
			if tc.want {
				if d, ok := h.Deadline(tc.id); !ok || d != tc.deadline {
					t.Fatalf("Deadline(%d) = %d, %v; want %d, true", tc.id, d, ok, tc.deadline)
				}
			} else if h.Contains(tc.id) {
				t.Fatalf("Update of absent id %d inserted it", tc.id)
			}
			mustDrainTo(t, h, tc.drained)
		})
	}
}

func TestMinPop(t *testing.T) {
	h := build(t, pair{4, 40}, pair{1, 10}, pair{3, 30}, pair{2, 20})
	for _, want := range []pair{{1, 10}, {2, 20}, {3, 30}, {4, 40}} {
		id, d, ok := h.Min()
		if !ok || id != want.id || d != want.deadline {
			t.Fatalf("Min() = %d, %d, %v; want %d, %d, true", id, d, ok, want.id, want.deadline)
		}
		n := h.Len()
		id, d, ok = h.Pop()
		if !ok || id != want.id || d != want.deadline {
			t.Fatalf("Pop() = %d, %d, %v; want %d, %d, true", id, d, ok, want.id, want.deadline)
		}
		mustVerifyT(t, h)
		if h.Len() != n-1 || h.Contains(id) {
			t.Fatalf("after Pop: Len() = %d (want %d), Contains(%d) = %v", h.Len(), n-1, id, h.Contains(id))
		}
	}
	if _, _, ok := h.Pop(); ok {
		t.Fatal("Pop() on drained heap ok = true")
	}
	if _, _, ok := h.Min(); ok {
		t.Fatal("Min() on drained heap ok = true")
	}
	// A popped id can be pushed again.
	if !h.Push(1, 7) {
		t.Fatal("Push of popped id = false")
	}
	mustVerifyT(t, h)
}

func TestTies(t *testing.T) {
	// Equal deadlines pop in some order; all of them come out, each once.
	var h Heap
	for id := range uint32(50) {
		h.Push(id, int64(id%3))
	}
	mustVerifyT(t, &h)
	seen := make(map[uint32]bool)
	for _, p := range drain(t, &h) {
		if seen[p.id] || p.deadline != int64(p.id%3) {
			t.Fatalf("bad pop %v", p)
		}
		seen[p.id] = true
	}
	if len(seen) != 50 {
		t.Fatalf("popped %d ids, want 50", len(seen))
	}
}

func TestContainsDeadline(t *testing.T) {
	h := build(t, pair{0, -1}, pair{5, 0}, pair{70, 9})
	for _, tc := range []struct {
		id       uint32
		present  bool
		deadline int64
	}{
		{0, true, -1}, {5, true, 0}, {70, true, 9},
		{1, false, 0}, {69, false, 0}, {71, false, 0}, {1 << 31, false, 0},
	} {
		if got := h.Contains(tc.id); got != tc.present {
			t.Errorf("Contains(%d) = %v, want %v", tc.id, got, tc.present)
		}
		if d, ok := h.Deadline(tc.id); ok != tc.present || d != tc.deadline {
			t.Errorf("Deadline(%d) = %d, %v; want %d, %v", tc.id, d, ok, tc.deadline, tc.present)
		}
	}
}

func TestGrow(t *testing.T) {
	var h Heap
	h.Grow(1000, 4999)
	mustVerifyT(t, &h)
	if cap(h.entries) < 1000 || len(h.pos) != 5000 {
		t.Fatalf("after Grow(1000, 4999): cap(entries) = %d, len(pos) = %d", cap(h.entries), len(h.pos))
	}
	h.Push(4999, 3)
	h.Push(2, 1)
	// Smaller requests keep what is there; growing keeps the contents.
	h.Grow(-1, 0)
	h.Grow(10, 10)
	if cap(h.entries) < 1000 || len(h.pos) != 5000 {
		t.Fatalf("Grow shrank: cap(entries) = %d, len(pos) = %d", cap(h.entries), len(h.pos))
	}
	h.Grow(4000, 9999)
	mustVerifyT(t, &h)
	if cap(h.entries) < 4000 || len(h.pos) != 10000 {
		t.Fatalf("after Grow(4000, 9999): cap(entries) = %d, len(pos) = %d", cap(h.entries), len(h.pos))
	}
	mustDrainTo(t, &h, []pair{{2, 1}, {4999, 3}})
}

func TestPosGrowsGeometrically(t *testing.T) {
	var h Heap
	h.Push(0, 0)
	if len(h.pos) != minPosLen {
		t.Fatalf("len(pos) = %d after first push, want %d", len(h.pos), minPosLen)
	}
	grows := 0
	for id := uint32(1); id < 1<<16; id++ {
		n := len(h.pos)
		h.Push(id, int64(id))
		if len(h.pos) != n {
			grows++
			if len(h.pos) < 2*n {
				t.Fatalf("pos grew from %d to %d, want at least double", n, len(h.pos))
			}
		}
	}
	mustVerifyT(t, &h)
	if grows > 10 {
		t.Fatalf("pos grew %d times for 65536 increasing ids, want <= 10", grows)
	}
	// A far id jumps straight to it.
	h.Push(1<<20, 5)
	if len(h.pos) != 1<<20+1 {
		t.Fatalf("len(pos) = %d after Push(1<<20), want %d", len(h.pos), 1<<20+1)
	}
	mustVerifyT(t, &h)
}

func TestReset(t *testing.T) {
	h := build(t, pair{3, 3}, pair{1, 1}, pair{200, 2})
	ce, cp := cap(h.entries), len(h.pos)
	h.Reset()
	mustVerifyT(t, h)
	if h.Len() != 0 || h.Contains(3) || h.Contains(1) || h.Contains(200) {
		t.Fatalf("Reset left entries: Len() = %d", h.Len())
	}
	if cap(h.entries) != ce || len(h.pos) != cp {
		t.Fatalf("Reset changed capacity: %d/%d, want %d/%d", cap(h.entries), len(h.pos), ce, cp)
	}
	if !h.Push(3, 9) {
		t.Fatal("Push after Reset = false")
	}
	mustVerifyT(t, h)
}

// TestVerifyDetects checks the checker: each corruption must be reported.
func TestVerifyDetects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(h *Heap)
	}{
		{"heap property", func(h *Heap) { h.entries[0].deadline = 1000 }},
		{"pos points elsewhere", func(h *Heap) { h.pos[h.entries[2].id] = 1 }},
		{"pos zero for present id", func(h *Heap) { h.pos[h.entries[3].id] = 0 }},
		{"stray pos", func(h *Heap) { h.pos[60] = 2 }},
		{"pos beyond entries", func(h *Heap) { h.pos[60] = 99 }},
		{"id beyond pos", func(h *Heap) { h.entries[4].id = uint32(len(h.pos)) }},
		{"duplicate id", func(h *Heap) { h.entries[4].id = h.entries[3].id }},
		{"len(pos) != cap(pos)", func(h *Heap) { h.pos = h.pos[:len(h.pos)-1] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := build(t, pair{0, 0}, pair{1, 1}, pair{2, 2}, pair{3, 3}, pair{4, 4}, pair{5, 5})
			tc.corrupt(h)
			if err := h.verify(); !errors.Is(err, errCorrupt) {
				t.Fatalf("verify() = %v, want errCorrupt", err)
			}
		})
	}
}
