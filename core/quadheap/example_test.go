package quadheap_test

import (
	"fmt"

	"github.com/tock-sched/tock/core/quadheap"
)

// A heap of deadlines keyed by id: re-time one, remove another, then pop in deadline
// order.
func Example() {
	var h quadheap.Heap
	h.Grow(4, 3) // room for 4 entries and ids up to 3: the operations below allocate nothing
	h.Push(0, 300)
	h.Push(1, 100)
	h.Push(2, 200)
	h.Push(3, 50)

	h.Update(0, 10) // id 0 is now due first
	h.Remove(3)

	for h.Len() > 0 {
		id, deadline, _ := h.Pop()
		fmt.Println(id, deadline)
	}
	// Output:
	// 0 10
	// 1 100
	// 2 200
}

// Min looks at the earliest entry without removing it; Deadline and Contains look one
// up by id.
func ExampleHeap_Min() {
	var h quadheap.Heap
	h.Push(7, 1_000)
	h.Push(9, 500)
	id, deadline, ok := h.Min()
	fmt.Println(id, deadline, ok)
	d, present := h.Deadline(7)
	fmt.Println(d, present, h.Contains(8))
	// Output:
	// 9 500 true
	// 1000 true false
}
