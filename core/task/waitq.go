package task

import "fmt"

// waitQueue holds the runs that a limit (limits.go, ratelimit.go) holds back, earliest
// due first: a binary min-heap of waiters ordered by (dueNs, seq), so that runs due at
// the same instant leave in the order they arrived.
//
// With n = len(w), parent(i) = (i-1)/2:
//
//	heap property: ∀ i ∈ [1, n): !w[i].before(w[parent(i)])
//
// verify checks it; the tests call it after every mutation.
//
// Costs: push and pop O(log n), no allocation once the slice has grown to the largest
// backlog; len O(1). Memory: 48 B a waiter (the slice's capacity); a queue that empties
// from a backlog of more than shrinkAbove waiters lets its slice go, so that one burst
// does not hold its memory for good.
//
// Not safe for concurrent use: the limiter that owns it guards it with its mutex.
type waitQueue []waiter

// waiter is one held-back run: its item, with the gates it has passed so far.
type waiter struct {
	dueNs int64  // the run's due time, a clock reading (record.dueNs)
	seq   uint64 // arrival order among waiters of one queue, for equal due times
	item  runItem
}

// shrinkAbove is the capacity past which an emptied queue drops its slice: 1,024
// waiters are 48 KiB, kept for a limiter that is busy again soon.
const shrinkAbove = 1024

func (a *waiter) before(b *waiter) bool {
	return a.dueNs < b.dueNs || a.dueNs == b.dueNs && a.seq < b.seq
}

func (q *waitQueue) len() int { return len(*q) }

// push adds w. O(log n).
func (q *waitQueue) push(w waiter) {
	h := append(*q, w)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*q = h
}

// pop removes and returns the earliest waiter; the queue must not be empty. O(log n).
func (q *waitQueue) pop() waiter {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = waiter{} // the item names a record: do not keep it reachable
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].before(&h[c]) {
			c = r
		}
		if !h[c].before(&h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	if n == 0 && cap(h) > shrinkAbove {
		h = nil
	}
	*q = h
	return top
}

// verify checks the heap property.
func (q *waitQueue) verify() error {
	h := *q
	for i := 1; i < len(h); i++ {
		if p := (i - 1) / 2; h[i].before(&h[p]) {
			return fmt.Errorf("wait queue: waiter %d (due %d, seq %d) before its parent %d (due %d, seq %d)",
				i, h[i].dueNs, h[i].seq, p, h[p].dueNs, h[p].seq)
		}
	}
	return nil
}
