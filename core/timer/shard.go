package timer

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/tock-sched/tock/core/quadheap"
)

// shard is one independent timer store: its own lock, slab, wheel, heap and driver.
// Everything below mu is guarded by mu unless it says otherwise.
type shard struct {
	mu sync.Mutex

	id     uint32
	tickNs int64
	limit  int // most live timers; 0 = unlimited (immutable after New)

	slab  slab
	wheel wheel
	heap  quadheap.Heap // nodes of precise handlers, keyed by node index

	// periods holds the interval of each periodic node, by node index. Only periodic
	// timers pay for an entry.
	periods map[uint32]int64
	// funcs is the closure side table of AfterFunc/EveryFunc timers: node.arg indexes it.
	// Closures are kept out of the slab so the slab stays free of pointers.
	funcs     []func()
	freeFuncs []uint32

	// sleepUntil is the clock reading the driver sleeps until: math.MaxInt64 when idle,
	// math.MinInt64 while it is awake and will poll again anyway. A new timer that would
	// wake earlier lowers it and signals wake.
	sleepUntil int64
	closed     bool

	// counters, guarded by mu
	scheduled, cancelled, fired, skipped uint64

	wakeups atomic.Uint64 // driver wake-ups; written by the driver only
	dropped atomic.Uint64 // due timers lost because the pool refused their batch (Close)

	wake    chan struct{} // capacity 1; a pending signal is enough
	batches chan *batch   // free batches; its capacity bounds this shard's batches in flight

	_ [64]byte // keep the next shard's hot mutex off this shard's cache lines
}

func newShard(id uint32, tickNs int64, limit int, startTick uint64, inflight, maxBatch int) *shard {
	sh := &shard{
		id:         id,
		tickNs:     tickNs,
		limit:      limit,
		slab:       newSlab(numSentinels),
		periods:    make(map[uint32]int64),
		sleepUntil: math.MaxInt64,
		wake:       make(chan struct{}, 1),
		batches:    make(chan *batch, inflight),
	}
	for i := uint32(0); i < numSentinels; i++ {
		sh.slab.initList(i)
	}
	sh.wheel.elapsed = startTick
	for i := 0; i < inflight; i++ {
		sh.batches <- &batch{sh: sh, items: make([]fireItem, maxBatch)}
	}
	return sh
}

// ceilTick is the first tick at or after the deadline `when`: firing at that tick's start
// is never early. Deadlines at or before 0 map to tick 0.
func (sh *shard) ceilTick(when int64) uint64 {
	if when <= 0 {
		return 0
	}
	return uint64((when-1)/sh.tickNs) + 1
}

// floorTick is the last tick whose start `now` has reached.
func (sh *shard) floorTick(now int64) uint64 {
	if now <= 0 {
		return 0
	}
	return uint64(now / sh.tickNs)
}

// insert places live node i by its deadline: into the heap for precise handlers, else into
// the wheel, or onto the due list when its tick has already been processed. It returns the
// clock reading at which the driver must be awake for it. Requires sh.mu.
func (sh *shard) insert(i uint32, n *node) (wakeAt int64) {
	if n.fn&preciseFlag != 0 {
		sh.heap.Push(i, n.when)
		n.prev = inHeap
		return n.when
	}
	tick := sh.ceilTick(n.when)
	if !sh.wheel.insert(&sh.slab, i, tick) {
		sh.slab.pushBack(dueList, i)
		return math.MinInt64
	}
	return int64(tick) * sh.tickNs
}

// reset moves live node i to deadline `when` and returns the clock reading at which the
// driver must be awake for it (math.MaxInt64: no earlier than before). Requires sh.mu.
//
// A wheel node moved later is left where it is (lazy reset): its slot begins no later
// than its old deadline, and every node is re-filed by its own deadline when its slot is
// processed (processSlot) or drained (drainDue), so it still fires at its new tick.
// Unlinking and relinking it would touch two more cold nodes; pushing back idle
// timeouts, the commonest reset, stays one node write.
func (sh *shard) reset(i uint32, n *node, when int64) (wakeAt int64) {
	switch {
	case n.prev == inHeap:
		sh.heap.Update(i, when)
		n.when = when
		return when
	case when >= n.when:
		n.when = when
		return math.MaxInt64
	default:
		sh.wheel.remove(&sh.slab, i)
		n.when = when
		return sh.insert(i, n)
	}
}

// detach takes live node i out of the heap, its wheel slot or the due list. Requires sh.mu.
func (sh *shard) detach(i uint32, n *node) {
	if n.prev == inHeap {
		sh.heap.Remove(i)
		return
	}
	sh.wheel.remove(&sh.slab, i)
}

// free releases live node i and whatever side-table entries it owns. Requires sh.mu.
func (sh *shard) free(i uint32, n *node) {
	if n.fn&periodicFlag != 0 {
		delete(sh.periods, i)
	}
	if n.fn&handlerMask == closureHandler {
		sh.funcs[n.arg] = nil
		sh.freeFuncs = append(sh.freeFuncs, uint32(n.arg))
	}
	sh.slab.release(i)
}

// dropAll frees every live node (wheel slots, due list and heap), so that every handle
// to one is stale, and returns how many there were. It is for Close, once the driver has
// stopped. Requires sh.mu. Cost: O(live + slots).
func (sh *shard) dropAll() int {
	dropped := sh.slab.live
	for head := uint32(0); head < numSentinels; head++ {
		for i := sh.slab.at(head).next; i != head; i = sh.slab.at(head).next {
			n := sh.slab.at(i)
			sh.wheel.remove(&sh.slab, i)
			sh.free(i, n)
		}
	}
	for {
		i, _, ok := sh.heap.Pop()
		if !ok {
			break
		}
		sh.free(i, sh.slab.at(i))
	}
	return dropped
}

// lookup returns the live node a handle names, or nil when the handle is stale (the timer
// fired, was cancelled, or the handle is the zero Timer). Requires sh.mu.
func (sh *shard) lookup(t Timer) *node {
	if t.idx < numSentinels || int(t.idx) >= sh.slab.cap() {
		return nil
	}
	n := sh.slab.at(t.idx)
	if n.gen != t.gen {
		return nil
	}
	return n
}

// noteWake lowers sleepUntil when a timer needs the driver earlier and reports whether the
// driver must be signalled. Requires sh.mu.
func (sh *shard) noteWake(wakeAt int64) bool {
	if wakeAt < sh.sleepUntil {
		sh.sleepUntil = wakeAt
		return true
	}
	return false
}

// signal wakes the driver without blocking; one pending signal is enough.
func (sh *shard) signal() {
	select {
	case sh.wake <- struct{}{}:
	default:
	}
}

// collect moves due timers into b, up to its capacity: first the due list, then wheel
// slots whose start tick `now` has reached (level 0 slots are spliced whole onto the due
// list; higher slots are cascaded, each node either due or re-inserted lower), then heap
// nodes whose deadline has passed. Requires sh.mu. Cost: O(due + cascaded).
func (sh *shard) collect(now int64, b *batch) {
	b.now = now
	nowTick := sh.floorTick(now)
	for !b.full() {
		if sh.drainDue(now, nowTick, b) {
			return
		}
		tick, level, slot, ok := sh.wheel.nextExpiration()
		if !ok || tick > nowTick {
			if nowTick > sh.wheel.elapsed {
				sh.wheel.elapsed = nowTick
			}
			break
		}
		sh.wheel.elapsed = tick
		sh.processSlot(level, slot)
	}
	for !b.full() {
		i, deadline, ok := sh.heap.Min()
		if !ok || deadline > now {
			return
		}
		sh.heap.Pop()
		sh.fire(i, now, b)
	}
}

// drainDue fires nodes from the due list into b until either is exhausted; it reports
// whether b is full. A node whose deadline was pushed past nowTick by a lazy reset is
// re-filed in the wheel instead.
func (sh *shard) drainDue(now int64, nowTick uint64, b *batch) bool {
	dueBy := int64(nowTick) * sh.tickNs // due iff ceilTick(when) <= nowTick iff when <= dueBy
	head := sh.slab.at(dueList)
	for !b.full() {
		i := head.next
		if i == dueList {
			return false
		}
		sh.slab.unlink(i)
		if n := sh.slab.at(i); n.when > dueBy {
			sh.insert(i, n)
			continue
		}
		sh.fire(i, now, b)
	}
	return true
}

// processSlot empties slot (level, slot), whose start tick is now wheel.elapsed. A level 0
// slot holds nodes due at exactly that tick (or later, after a lazy reset: drainDue
// re-files those) and is spliced onto the due list in O(1); a higher slot's nodes are each
// re-inserted relative to the new elapsed, landing on the due list when their tick has
// come.
func (sh *shard) processSlot(level, slot int) {
	s := &sh.slab
	if level == 0 {
		head := slotSentinel(0, slot)
		h := s.at(head)
		first, last := h.next, h.prev
		due := s.at(dueList)
		tail := due.prev
		s.at(tail).next = first
		s.at(first).prev = tail
		s.at(last).next = dueList
		due.prev = last
		h.next, h.prev = head, head
		sh.wheel.occupied[0] &^= 1 << uint(slot)
		return
	}
	i, ok := sh.wheel.takeSlot(s, level, slot)
	for ok && i != nilIndex {
		n := s.at(i)
		next := n.next
		if !sh.wheel.insert(s, i, sh.ceilTick(n.when)) {
			s.pushBack(dueList, i)
		}
		i = next
	}
}

// fire copies node i, just taken out of its list or the heap, into b. A one-shot node is
// freed (its handle goes stale); a periodic one is re-inserted at its next deadline,
// previous deadline + period, skipping (and counting) occurrences that already passed.
func (sh *shard) fire(i uint32, now int64, b *batch) {
	n := sh.slab.at(i)
	it := &b.items[b.n]
	b.n++
	it.timer = Timer{shard: sh.id, idx: i, gen: n.gen}
	it.fn = n.fn & handlerMask
	it.arg = n.arg
	it.due = n.when
	if it.fn == closureHandler {
		it.f = sh.funcs[n.arg]
	}
	sh.fired++
	if n.fn&periodicFlag != 0 {
		period := sh.periods[i]
		next := n.when + period
		if next <= now {
			missed := (now - n.when) / period
			sh.skipped += uint64(missed)
			next = n.when + (missed+1)*period
		}
		n.when = next
		sh.insert(i, n)
		return
	}
	sh.free(i, n)
}

// nextWake returns the clock reading at which the driver must next poll: math.MinInt64
// when timers are already due, math.MaxInt64 when the shard holds none. Requires sh.mu.
func (sh *shard) nextWake() int64 {
	if sh.slab.at(dueList).next != dueList {
		return math.MinInt64
	}
	wake := int64(math.MaxInt64)
	if tick, _, _, ok := sh.wheel.nextExpiration(); ok {
		wake = int64(tick) * sh.tickNs
	}
	if _, deadline, ok := sh.heap.Min(); ok && deadline < wake {
		wake = deadline
	}
	return wake
}
