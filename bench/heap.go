package bench

import (
	"container/heap"
	"testing"

	"github.com/tock-sched/tock/core/quadheap"
)

// Heap is a min-priority queue of (id, deadline).
type Heap interface {
	Push(id uint32, deadline int64)
	Pop() (id uint32, deadline int64)
}

// HeapImpl names a Heap; New returns an empty one with room for n entries.
type HeapImpl struct {
	Name string
	New  func(n int) Heap
}

// QuadHeap is tock's core/quadheap.
type QuadHeap struct{ h quadheap.Heap }

// NewQuadHeap returns a QuadHeap grown for n entries with ids up to n.
func NewQuadHeap(n int) Heap {
	q := &QuadHeap{}
	q.h.Grow(n+1, uint32(n))
	return q
}

func (q *QuadHeap) Push(id uint32, deadline int64) { q.h.Push(id, deadline) }

func (q *QuadHeap) Pop() (uint32, int64) {
	id, deadline, _ := q.h.Pop()
	return id, deadline
}

// item and priorityQueue are the PriorityQueue of container/heap's documentation,
// keyed by deadline: what a user would write. Every push allocates an item.
type item struct {
	id       uint32
	deadline int64
	index    int // maintained by Swap, as in the example (Fix/Remove need it)
}

type priorityQueue []*item

func (pq priorityQueue) Len() int           { return len(pq) }
func (pq priorityQueue) Less(i, j int) bool { return pq[i].deadline < pq[j].deadline }
func (pq priorityQueue) Swap(i, j int) {
	pq[i], pq[j] = pq[j], pq[i]
	pq[i].index = i
	pq[j].index = j
}

func (pq *priorityQueue) Push(x any) {
	it := x.(*item)
	it.index = len(*pq)
	*pq = append(*pq, it)
}

func (pq *priorityQueue) Pop() any {
	old := *pq
	n := len(old)
	it := old[n-1]
	old[n-1] = nil // don't stop the GC from reclaiming the item eventually
	it.index = -1
	*pq = old[:n-1]
	return it
}

// ContainerHeap is priorityQueue driven through container/heap.
type ContainerHeap struct{ pq priorityQueue }

// NewContainerHeap returns a ContainerHeap with capacity for n entries.
func NewContainerHeap(n int) Heap { return &ContainerHeap{pq: make(priorityQueue, 0, n+1)} }

func (c *ContainerHeap) Push(id uint32, deadline int64) {
	heap.Push(&c.pq, &item{id: id, deadline: deadline})
}

func (c *ContainerHeap) Pop() (uint32, int64) {
	it := heap.Pop(&c.pq).(*item)
	return it.id, it.deadline
}

// heapSpan is the range of deadlines and offsets: one second in nanoseconds.
const heapSpan = int64(1e9)

// HeapPushPop is the hold model: n random deadlines in [0, 1 s); an op pushes the free
// id at now + a random offset in [0, 1 s), where now is the last popped deadline (time
// moves forward as a timer queue's does), then pops the minimum, whose id becomes free.
func HeapPushPop(b *testing.B, newHeap func(n int) Heap, n int) {
	h, r := newHeap(n), newRNG(1)
	for i := range n {
		h.Push(uint32(i), int64(r.next()%uint64(heapSpan)))
	}
	free, now := uint32(n), int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h.Push(free, now+int64(r.next()%uint64(heapSpan)))
		free, now = h.Pop()
	}
}
