package timer

import "fmt"

// verify checks every invariant of every shard and returns the first violation. Tests call
// it after mutations; it takes each shard's lock and walks every list, so it is O(nodes)
// and never runs on a hot path.
func (s *Scheduler) verify() error {
	for _, sh := range s.shards {
		sh.mu.Lock()
		err := sh.verify()
		sh.mu.Unlock()
		if err != nil {
			return fmt.Errorf("shard %d: %w", sh.id, err)
		}
	}
	return nil
}

// verify checks the shard's invariants. Requires sh.mu.
//   - each index in [numSentinels, cap) is on exactly one of: a wheel slot, the due list,
//     the heap, the free list;
//   - occupied bit (L, s) is set exactly when slot (L, s) is non-empty;
//   - a wheel node's tick is after elapsed and not before its slot's next start;
//   - live == nodes in slots + due list + heap; periods has one entry per periodic node.
func (sh *shard) verify() error {
	s := &sh.slab
	seen := make([]bool, s.cap())
	periodic := 0
	visit := func(i uint32, where string) error {
		if i < numSentinels || int(i) >= s.cap() {
			return fmt.Errorf("%s holds index %d outside the slab", where, i)
		}
		if seen[i] {
			return fmt.Errorf("node %d is on two lists (second: %s)", i, where)
		}
		seen[i] = true
		return nil
	}
	walk := func(head uint32, where string, each func(i uint32, n *node) error) (int, error) {
		count := 0
		prev := head
		for i := s.at(head).next; i != head; i = s.at(i).next {
			if err := visit(i, where); err != nil {
				return 0, err
			}
			n := s.at(i)
			if n.prev != prev {
				return 0, fmt.Errorf("%s: node %d prev %d, want %d", where, i, n.prev, prev)
			}
			if n.fn&periodicFlag != 0 {
				periodic++
			}
			if err := each(i, n); err != nil {
				return 0, err
			}
			prev = i
			count++
		}
		if s.at(head).prev != prev {
			return 0, fmt.Errorf("%s: sentinel prev %d, want %d", where, s.at(head).prev, prev)
		}
		return count, nil
	}
	listed := 0
	for level := 0; level < numLevels; level++ {
		for slot := 0; slot < numSlots; slot++ {
			where := fmt.Sprintf("slot (%d,%d)", level, slot)
			count, err := walk(slotSentinel(level, slot), where, func(i uint32, n *node) error {
				tick := sh.ceilTick(n.when)
				if n.fn&preciseFlag != 0 {
					return fmt.Errorf("%s: precise node %d in the wheel", where, i)
				}
				if tick <= sh.wheel.elapsed {
					return fmt.Errorf("%s: node %d tick %d not after elapsed %d", where, i, tick, sh.wheel.elapsed)
				}
				// A node may sit in a slot that begins before its tick (lazy reset, or the
				// top level's ring), never in one that begins after it: that would be early.
				if start := slotStart(sh.wheel.elapsed, level, slot); tick < start {
					return fmt.Errorf("%s: node %d tick %d is before its slot's start %d", where, i, tick, start)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if bit := sh.wheel.occupied[level]&(1<<uint(slot)) != 0; bit != (count > 0) {
				return fmt.Errorf("%s: occupied bit %v with %d nodes", where, bit, count)
			}
			listed += count
		}
	}
	due, err := walk(dueList, "due list", func(uint32, *node) error { return nil })
	if err != nil {
		return err
	}
	listed += due
	inHeapCount := 0
	for i := uint32(numSentinels); int(i) < s.cap(); i++ {
		if n := s.at(i); n.prev == inHeap {
			if err := visit(i, "heap"); err != nil {
				return err
			}
			if d, ok := sh.heap.Deadline(i); !ok || d != n.when {
				return fmt.Errorf("heap node %d: heap deadline %d,%v, node deadline %d", i, d, ok, n.when)
			}
			if n.fn&periodicFlag != 0 {
				periodic++
			}
			inHeapCount++
		}
	}
	if sh.heap.Len() != inHeapCount {
		return fmt.Errorf("heap holds %d nodes, %d are marked inHeap", sh.heap.Len(), inHeapCount)
	}
	listed += inHeapCount
	free := 0
	for i := s.free; i != nilIndex; i = s.at(i).next {
		if err := visit(i, "free list"); err != nil {
			return err
		}
		free++
	}
	if listed != s.live {
		return fmt.Errorf("live %d, but %d nodes are in lists or the heap", s.live, listed)
	}
	if int(numSentinels)+s.live+free != s.cap() {
		return fmt.Errorf("sentinels %d + live %d + free %d != capacity %d", numSentinels, s.live, free, s.cap())
	}
	if periodic != len(sh.periods) {
		return fmt.Errorf("%d periodic nodes, %d period entries", periodic, len(sh.periods))
	}
	return nil
}
