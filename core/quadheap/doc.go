// Package quadheap is an allocation-free 4-ary min-heap of (deadline, id)
// entries whose positions are indexed by id, so that an entry can be removed
// or re-timed by id in O(log₄ n) without searching.
//
// The timer scheduler uses it as its precise-deadline structure: ids are slab
// node indices, dense from 0 upward, up to a few million.
//
// # Invariants
//
// With n = len(entries), parent(i) = (i-1)/4 and firstChild(i) = 4i+1:
//
//	heap property:  ∀ i ∈ [1, n): entries[parent(i)].deadline <= entries[i].deadline
//	pos → entries:  ∀ id: pos[id] != 0 ⇒ entries[pos[id]-1].id == id
//	entries → pos:  ∀ i ∈ [0, n): pos[entries[i].id] == i+1
//
// Together the last two make pos a bijection between the present ids and the
// indices of entries; pos[id] == 0 (or id >= len(pos)) means id is absent.
// (*Heap).verify checks all three; the tests call it after every mutation, and
// the constant debugVerify turns the same check on inside every operation.
//
// Entries with equal deadlines are not ordered among themselves: they may pop
// in any order, not necessarily the order in which they were pushed.
//
// # Costs
//
//	Push, Pop, Remove, Update   O(log₄ n) comparisons and moves; no allocation
//	                            once Grow (or earlier use) has made room
//	Min, Contains, Deadline, Len O(1)
//	Grow                        O(n + maxID) when it must reallocate, else O(1)
//	Reset                       O(n); keeps all capacity
//
// Sifting moves a hole rather than swapping, so each level costs one 16-byte
// copy and one pos update.
//
// # Memory
//
// 16 bytes per entry (capacity of entries) plus 4 bytes per id up to the
// largest id ever pushed (len(pos)); pos grows geometrically, so pushing ids
// in increasing order allocates O(log maxID) times in total. Nothing is ever
// shrunk; Reset keeps all capacity.
//
// # Concurrency
//
// A Heap is not safe for concurrent use. The caller serializes all calls
// (the scheduler holds its lock around every operation).
package quadheap
