package quadheap

import "math"

// debugVerify runs verify after every mutating operation and panics on the
// first violation. It is for debugging only; tests call verify directly.
const debugVerify = false

// minPosLen is the smallest pos table allocated, so that pushing ids 0, 1,
// 2, ... does not reallocate on each of the first few ids.
const minPosLen = 64

// maxPosLen bounds pos: every uint32 id has a slot, and no more (on 32-bit
// platforms the bound is the largest slice length instead).
const maxPosLen = min(1<<32, math.MaxInt)

// Heap is a 4-ary min-heap of (deadline, id) entries keyed by id. The zero
// value is an empty heap ready to use.
//
// A Heap is not safe for concurrent use; the caller holds a lock.
type Heap struct {
	// entries is the heap array; see the package doc for its invariants.
	entries []entry
	// pos[id] is the index of id in entries plus one; 0 means absent.
	// len(pos) == cap(pos) always, so every slot below len(pos) is valid.
	pos []uint32
}

// entry is one heap element: 16 bytes, pinned by a test. deadline comes
// first, so the 4 bytes of alignment padding fall after id at the end; at 16
// bytes the four siblings 4i+1..4i+4 span 64 bytes, at most two cache lines,
// and sifting moves each entry with one 16-byte copy.
type entry struct {
	deadline int64
	id       uint32
	// 4 bytes of trailing padding (struct alignment is 8).
}

// parent returns the index of the parent of entry i; i must be > 0.
func parent(i int) int { return (i - 1) / 4 }

// firstChild returns the index of the first of the (up to four) children of
// entry i; the others follow it consecutively.
func firstChild(i int) int { return 4*i + 1 }

// Len returns the number of entries. O(1).
func (h *Heap) Len() int { return len(h.entries) }

// Contains reports whether id is in the heap. O(1).
func (h *Heap) Contains(id uint32) bool {
	return uint64(id) < uint64(len(h.pos)) && h.pos[id] != 0
}

// Deadline returns the deadline of id and true, or 0 and false if id is
// absent. O(1).
func (h *Heap) Deadline(id uint32) (int64, bool) {
	if uint64(id) >= uint64(len(h.pos)) {
		return 0, false
	}
	p := h.pos[id]
	if p == 0 {
		return 0, false
	}
	return h.entries[p-1].deadline, true
}

// Min returns the entry with the smallest deadline without removing it, or
// ok == false if the heap is empty. Among equal deadlines any one may be
// returned. O(1).
func (h *Heap) Min() (id uint32, deadline int64, ok bool) {
	if len(h.entries) == 0 {
		return 0, 0, false
	}
	e := h.entries[0]
	return e.id, e.deadline, true
}

// Push adds id with the given deadline and returns true. If id is already
// present it returns false and changes nothing (use Update to re-time it).
// O(log₄ n); allocates only when entries or pos must grow (see Grow).
func (h *Heap) Push(id uint32, deadline int64) bool {
	if uint64(id) >= uint64(len(h.pos)) {
		h.growPos(id)
	} else if h.pos[id] != 0 {
		return false
	}
	i := len(h.entries)
	h.entries = append(h.entries, entry{})
	h.siftUp(i, entry{deadline: deadline, id: id})
	if debugVerify {
		h.mustVerify()
	}
	return true
}

// Pop removes and returns the entry with the smallest deadline, or ok ==
// false if the heap is empty. Among equal deadlines any one may be returned.
// O(log₄ n); never allocates.
//
// The last entry fills the root hole and sifts down. Floyd's variant (move
// the hole to a leaf unconditionally, then sift the last entry up) and
// aligning sibling groups to 64-byte lines both measured no faster at 1e6
// entries, where Pop is bound by cache misses rather than comparisons.
func (h *Heap) Pop() (id uint32, deadline int64, ok bool) {
	n := len(h.entries) - 1
	if n < 0 {
		return 0, 0, false
	}
	top := h.entries[0]
	h.pos[top.id] = 0
	last := h.entries[n]
	h.entries = h.entries[:n]
	if n > 0 {
		h.siftDown(0, last)
	}
	if debugVerify {
		h.mustVerify()
	}
	return top.id, top.deadline, true
}

// Remove deletes id and returns true, or returns false if id is absent.
// O(log₄ n); never allocates.
func (h *Heap) Remove(id uint32) bool {
	if uint64(id) >= uint64(len(h.pos)) || h.pos[id] == 0 {
		return false
	}
	i := int(h.pos[id] - 1)
	h.pos[id] = 0
	n := len(h.entries) - 1
	last := h.entries[n]
	h.entries = h.entries[:n]
	if i < n {
		// The last entry fills the hole at i; it may belong above or below.
		if i > 0 && last.deadline < h.entries[parent(i)].deadline {
			h.siftUp(i, last)
		} else {
			h.siftDown(i, last)
		}
	}
	if debugVerify {
		h.mustVerify()
	}
	return true
}

// Update sets the deadline of a present id and returns true, or returns
// false (changing nothing) if id is absent. O(log₄ n); never allocates.
func (h *Heap) Update(id uint32, deadline int64) bool {
	if uint64(id) >= uint64(len(h.pos)) || h.pos[id] == 0 {
		return false
	}
	i := int(h.pos[id] - 1)
	e := entry{deadline: deadline, id: id}
	if deadline < h.entries[i].deadline {
		h.siftUp(i, e)
	} else {
		h.siftDown(i, e)
	}
	if debugVerify {
		h.mustVerify()
	}
	return true
}

// Grow preallocates room for at least entries entries in total and for ids
// 0..maxID, so that later operations within those bounds do not allocate.
// Arguments below the current capacity are ignored; a negative entries is
// treated as 0. O(n + maxID) when it reallocates, else O(1).
func (h *Heap) Grow(entries int, maxID uint32) {
	if entries > cap(h.entries) {
		es := make([]entry, len(h.entries), entries)
		copy(es, h.entries)
		h.entries = es
	}
	if uint64(maxID) >= uint64(len(h.pos)) {
		h.resizePos(int(min(uint64(maxID)+1, maxPosLen)))
	}
}

// Reset removes all entries and keeps the capacity of both tables. O(n).
func (h *Heap) Reset() {
	for _, e := range h.entries {
		h.pos[e.id] = 0
	}
	h.entries = h.entries[:0]
}

// growPos makes pos long enough to index id, at least doubling it so that
// ids pushed in increasing order cost amortized O(1).
func (h *Heap) growPos(id uint32) {
	n := max(2*uint64(len(h.pos)), uint64(id)+1, minPosLen)
	h.resizePos(int(min(n, maxPosLen)))
}

// resizePos reallocates pos with length (and capacity) n > len(pos).
func (h *Heap) resizePos(n int) {
	p := make([]uint32, n)
	copy(p, h.pos)
	h.pos = p
}

// siftUp places e, which belongs at hole i or above, moving the hole up past
// every ancestor with a larger deadline. Equal deadlines stop the hole, so
// ties do not move.
func (h *Heap) siftUp(i int, e entry) {
	es, pos := h.entries, h.pos
	for i > 0 {
		p := parent(i)
		pe := es[p]
		if e.deadline >= pe.deadline {
			break
		}
		es[i] = pe
		pos[pe.id] = uint32(i + 1)
		i = p
	}
	es[i] = e
	pos[e.id] = uint32(i + 1)
}

// siftDown places e, which belongs at hole i or below, moving the hole down
// to the smallest child while that child's deadline is smaller than e's.
func (h *Heap) siftDown(i int, e entry) {
	es, pos := h.entries, h.pos
	n := len(es)
	for {
		c := firstChild(i)
		if c >= n {
			break
		}
		// Select the smallest of children c..c+3 (fewer in the last group).
		// A full group takes two pairwise comparisons and one between the
		// winners; the bounds-checked subslice lets the compiler drop the
		// per-element checks.
		w := es[c].deadline
		if c+3 < n {
			ch := es[c : c+4 : c+4]
			j, w3, j3 := 0, ch[2].deadline, 2
			if d := ch[1].deadline; d < w {
				w, j = d, 1
			}
			if d := ch[3].deadline; d < w3 {
				w3, j3 = d, 3
			}
			if w3 < w {
				w, j = w3, j3
			}
			c += j
		} else {
			for j := c + 1; j < n; j++ {
				if d := es[j].deadline; d < w {
					w, c = d, j
				}
			}
		}
		if w >= e.deadline {
			break
		}
		ce := es[c]
		es[i] = ce
		pos[ce.id] = uint32(i + 1)
		i = c
	}
	es[i] = e
	pos[e.id] = uint32(i + 1)
}
