package timer

// Sentinel indices. Every list in a shard is circular and doubly linked through node.next
// and node.prev, with a sentinel node at its head, so unlinking never needs to know which
// list a node is on. Slot (level, slot) uses sentinel level*64+slot; the due list (timers
// whose tick has passed, waiting to be handed to a batch) uses dueList.
const (
	dueList      = uint32(numLevels * numSlots)
	numSentinels = dueList + 1
)

func slotSentinel(level, slot int) uint32 { return uint32(level*numSlots + slot) }

// initList makes head an empty circular list.
func (s *slab) initList(head uint32) {
	n := s.at(head)
	n.next, n.prev = head, head
}

// pushBack appends node i to the list headed by head. O(1).
func (s *slab) pushBack(head, i uint32) {
	h := s.at(head)
	tail := h.prev
	n := s.at(i)
	n.prev, n.next = tail, head
	s.at(tail).next = i
	h.prev = i
}

// unlink removes node i from whatever list holds it. When that list becomes empty it
// returns the list's sentinel and true: a circular list whose remaining neighbours of i
// are one and the same node holds only its sentinel. O(1).
func (s *slab) unlink(i uint32) (head uint32, emptied bool) {
	n := s.at(i)
	p, nx := n.prev, n.next
	s.at(p).next = nx
	s.at(nx).prev = p
	return p, p == nx
}

// wheel is the hierarchical timing wheel's bookkeeping; its slot lists live in the slab.
// Guarded by the owning shard's mutex.
//
// Invariants:
//   - every node in slot (L, s) has tick t > elapsed, and t >= the slot's next start: it
//     was filed at levelFor(elapsed', t), slotFor(t, L) for the elapsed' of the time, or
//     its deadline has since been moved later (lazy reset); a top level slot may hold
//     ticks beyond the wheel's span, which ride the ring;
//   - bit s of occupied[L] is set exactly when slot (L, s) is non-empty;
//   - no occupied slot starts at or before elapsed (they are processed as elapsed reaches them).
type wheel struct {
	elapsed  uint64 // the last tick processed
	occupied [numLevels]uint64
}

// insert links node i, due at tick `tick`, into its slot. It returns false, linking nothing,
// when the tick is not after elapsed: the caller puts the node on the due list. O(1).
func (w *wheel) insert(s *slab, i uint32, tick uint64) bool {
	if tick <= w.elapsed {
		return false
	}
	level := levelFor(w.elapsed, tick)
	slot := slotFor(tick, level)
	s.pushBack(slotSentinel(level, slot), i)
	w.occupied[level] |= 1 << uint(slot)
	return true
}

// remove unlinks node i from its slot (or from the due list) and clears the slot's
// occupancy bit when it empties. O(1).
func (w *wheel) remove(s *slab, i uint32) {
	head, emptied := s.unlink(i)
	if emptied && head < dueList {
		w.occupied[head/numSlots] &^= 1 << (head % numSlots)
	}
}

// nextExpiration returns the start tick, level and slot of the earliest occupied slot.
// Levels are searched from 0 up: every occupied slot of a lower level starts before any of
// a higher level, because a node goes to the lowest level whose span reaches it. O(levels).
func (w *wheel) nextExpiration() (tick uint64, level, slot int, ok bool) {
	for level = 0; level < numLevels; level++ {
		if occ := w.occupied[level]; occ != 0 {
			tick, slot = nextSlotStart(occ, w.elapsed, level)
			return tick, level, slot, true
		}
	}
	return 0, 0, 0, false
}

// takeSlot detaches the whole list of slot (level, slot) and returns its first node and
// how many nodes it holds; the nodes stay linked among themselves (the last node's next is
// the now-empty sentinel). O(1).
func (w *wheel) takeSlot(s *slab, level, slot int) (first uint32, ok bool) {
	head := slotSentinel(level, slot)
	h := s.at(head)
	if h.next == head {
		return 0, false
	}
	first = h.next
	s.at(h.prev).next = nilIndex
	h.next, h.prev = head, head
	w.occupied[level] &^= 1 << uint(slot)
	return first, true
}
