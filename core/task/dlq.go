package task

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// AttemptRecord is one attempt at running an occurrence of a task.
type AttemptRecord struct {
	Attempt    int // 1 for an occurrence's first attempt
	Start, End time.Time
	Err        string // the attempt's error; empty if it succeeded
}

// DeadLetter is an occurrence of a task that failed for good, with everything needed to
// understand it and to run it again.
type DeadLetter struct {
	// Task is the task as submitted; Engine.Requeue runs the occurrence again. Task.Namespace and Task.ID key
	// the entry: a task has at most one dead letter.
	Task     Task
	Attempts []AttemptRecord // every attempt of the occurrence, oldest first
	DiedAt   time.Time
	Reason   string // why it was not retried (RetryPolicy.Decide's reason)
	seq      uint64 // assigned by Add: the queue's order and the paging cursor
}

// Paging and capacity defaults of the dead-letter queue.
const (
	DefaultDLQCapacity = 10_000
	DefaultDLQPageSize = 100
	MaxDLQPageSize     = 1000
)

// dlq is a bounded dead-letter queue, oldest first. It is safe for concurrent use.
//
// When full, Add evicts the oldest entry rather than refusing the new one: a queue that
// refuses loses the newest failures, which are the ones an operator is looking at, and it
// would have to push back on the engine, which cannot stop tasks from dying. Evictions
// are counted (Evicted) so that the loss is visible.
//
// Layout: a map from (namespace, ID) to the entry, and a slice of slots in Add order
// (sequence numbers ascending) that List binary-searches. Remove leaves a tombstone
// (a slot with no entry) that keeps its sequence number, so a cursor naming a removed
// entry still finds its place; the slice is compacted once tombstones outnumber live
// entries, which bounds it at 2*capacity+65 slots.
//
// Entries hold their own copies of Payload and Attempts (Add clones them). The slices in
// DeadLetters returned by Get, List and Remove are shared with the queue and read-only.
type dlq struct {
	capacity int // immutable

	mu    sync.Mutex
	byKey map[dlqKey]*dlqEntry // guarded by mu; the live entries
	// order holds slots in Add order; order[:head] are spent and zeroed. Invariants:
	// seq strictly ascends over order[head:]; order[head] is live unless head == len;
	// a live slot's entry has pos == its index; tombstones <= max(64, live).
	order   []dlqSlot // guarded by mu
	head    int       // guarded by mu
	seq     uint64    // guarded by mu; the last sequence number issued
	evicted uint64    // guarded by mu
}

type dlqKey struct{ ns, id string }

type dlqEntry struct {
	d   DeadLetter
	pos int // index in dlq.order
}

// dlqSlot is one position in Add order; e == nil marks a removed entry (a tombstone).
type dlqSlot struct {
	seq uint64
	e   *dlqEntry
}

// newDLQ returns an empty queue holding at most capacity entries; capacity <= 0 means
// DefaultDLQCapacity.
func newDLQ(capacity int) *dlq {
	if capacity <= 0 {
		capacity = DefaultDLQCapacity
	}
	return &dlq{capacity: capacity, byKey: make(map[dlqKey]*dlqEntry)}
}

// Add appends d as the newest entry. An entry for the same (namespace, ID) is replaced:
// it leaves its old position and is not counted as evicted. If the queue is full, the
// oldest entry is evicted and returned (nil otherwise). O(1) amortized; it allocates the
// entry and the copies of d's slices.
func (q *dlq) Add(d DeadLetter) (evicted *DeadLetter) {
	// Copy outside the lock: the caller may reuse its buffers once Add returns.
	d.Task.Payload = slices.Clone(d.Task.Payload)
	d.Attempts = slices.Clone(d.Attempts)
	k := dlqKey{d.Task.Namespace, d.Task.ID}
	q.mu.Lock()
	defer q.mu.Unlock()
	if old := q.byKey[k]; old != nil {
		q.unlink(old)
	}
	if len(q.byKey) >= q.capacity {
		oldest := q.order[q.head].e // live: the head invariant
		q.unlink(oldest)
		q.evicted++
		evicted = &oldest.d
	}
	q.seq++
	d.seq = q.seq
	e := &dlqEntry{d: d, pos: len(q.order)}
	q.order = append(q.order, dlqSlot{seq: q.seq, e: e})
	q.byKey[k] = e
	return evicted
}

// unlink removes a live entry, leaving a tombstone. Requires q.mu. O(1) amortized.
func (q *dlq) unlink(e *dlqEntry) {
	delete(q.byKey, dlqKey{e.d.Task.Namespace, e.d.Task.ID})
	q.order[e.pos].e = nil
	for q.head < len(q.order) && q.order[q.head].e == nil {
		q.order[q.head] = dlqSlot{}
		q.head++
	}
	if dead := len(q.order) - len(q.byKey); dead > 64 && dead > len(q.byKey) {
		q.compact()
	}
}

// compact drops spent slots and tombstones, in place. Requires q.mu. O(len(order)), paid
// for by the at least len(order)/2 removals since the last compaction.
func (q *dlq) compact() {
	n := 0
	for i := q.head; i < len(q.order); i++ {
		if s := q.order[i]; s.e != nil {
			s.e.pos = n
			q.order[n] = s
			n++
		}
	}
	clear(q.order[n:]) // release the entries for the collector
	q.order, q.head = q.order[:n], 0
}

// Len returns the number of entries. O(1).
func (q *dlq) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.byKey)
}

// Evicted returns how many entries Add has evicted to make room, over the queue's life.
func (q *dlq) Evicted() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.evicted
}

// Get returns the entry for (ns, id). O(1).
func (q *dlq) Get(ns, id string) (DeadLetter, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.byKey[dlqKey{ns, id}]; e != nil {
		return e.d, true
	}
	return DeadLetter{}, false
}

// Remove takes the entry for (ns, id) out of the queue and returns it (requeue uses it).
// O(1) amortized.
func (q *dlq) Remove(ns, id string) (DeadLetter, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.byKey[dlqKey{ns, id}]
	if e == nil {
		return DeadLetter{}, false
	}
	q.unlink(e)
	return e.d, true
}

// Purge deletes the entry for (ns, id) and reports whether there was one. O(1) amortized.
func (q *dlq) Purge(ns, id string) bool {
	_, ok := q.Remove(ns, id)
	return ok
}

// PurgeAll deletes every entry and returns how many there were. Cursors issued before
// stay valid (sequence numbers are never reused); they simply find nothing older. O(1)
// (the old storage is left to the collector).
func (q *dlq) PurgeAll() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.byKey)
	q.byKey = make(map[dlqKey]*dlqEntry)
	q.order, q.head = nil, 0
	return n
}

// List returns up to limit entries, oldest first, starting after cursor ("" for the
// start), and the cursor of the next page ("" when there is none). limit <= 0 means
// DefaultDLQPageSize; it is capped at MaxDLQPageSize. A cursor this queue did not issue
// is ErrBadCursor.
//
// Cursors are opaque and stable: a cursor names a position in Add order, not an entry,
// so entries added or removed between pages never cause a remaining entry to be shown
// twice or skipped; new entries appear on later pages, and a replaced entry (Add of an
// existing ID) moves to the end.
//
// Cost: O(log n + limit + t), t the tombstones crossed, which compaction keeps below
// max(64, n); it allocates the page.
func (q *dlq) List(cursor string, limit int) (page []DeadLetter, next string, err error) {
	if limit <= 0 {
		limit = DefaultDLQPageSize
	}
	limit = min(limit, MaxDLQPageSize)
	var after uint64
	if cursor != "" {
		if after, err = strconv.ParseUint(cursor, 10, 64); err != nil {
			return nil, "", fmt.Errorf("%w: %q", ErrBadCursor, cursor)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if after > q.seq {
		return nil, "", fmt.Errorf("%w: %q was not issued by this queue", ErrBadCursor, cursor)
	}
	live := q.order[q.head:]
	i := q.head + sort.Search(len(live), func(j int) bool { return live[j].seq > after })
	page = make([]DeadLetter, 0, min(limit, len(q.byKey)))
	for ; i < len(q.order) && len(page) < limit; i++ {
		if e := q.order[i].e; e != nil {
			page = append(page, e.d)
		}
	}
	for ; i < len(q.order); i++ {
		if q.order[i].e != nil { // there is more: the next page starts after this one
			next = strconv.FormatUint(page[len(page)-1].seq, 10)
			break
		}
	}
	return page, next, nil
}

// verify checks the invariants listed on dlq and returns the first violation. Tests call
// it after mutations; it is O(n) and never runs on a hot path.
func (q *dlq) verify() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head > len(q.order) {
		return fmt.Errorf("head %d beyond %d slots", q.head, len(q.order))
	}
	if q.head < len(q.order) && q.order[q.head].e == nil {
		return fmt.Errorf("head slot %d is a tombstone", q.head)
	}
	for i, s := range q.order[:q.head] {
		if s != (dlqSlot{}) {
			return fmt.Errorf("spent slot %d not zeroed", i)
		}
	}
	live := 0
	var prev uint64
	for i := q.head; i < len(q.order); i++ {
		s := q.order[i]
		if s.seq <= prev || s.seq > q.seq {
			return fmt.Errorf("slot %d: seq %d after %d (last issued %d)", i, s.seq, prev, q.seq)
		}
		prev = s.seq
		if s.e == nil {
			continue
		}
		live++
		k := dlqKey{s.e.d.Task.Namespace, s.e.d.Task.ID}
		switch {
		case s.e.pos != i:
			return fmt.Errorf("slot %d: entry says pos %d", i, s.e.pos)
		case s.e.d.seq != s.seq:
			return fmt.Errorf("slot %d: entry seq %d, slot seq %d", i, s.e.d.seq, s.seq)
		case q.byKey[k] != s.e:
			return fmt.Errorf("slot %d: %v not mapped to its entry", i, k)
		}
	}
	if live != len(q.byKey) {
		return fmt.Errorf("%d live slots, %d mapped entries", live, len(q.byKey))
	}
	if live > q.capacity {
		return fmt.Errorf("%d entries over capacity %d", live, q.capacity)
	}
	if dead := len(q.order) - live; dead > max(64, live) {
		return fmt.Errorf("%d spent slots and tombstones for %d live entries", dead, live)
	}
	return nil
}
