package timer

// node is one timer in a shard's slab. It holds no Go pointers, so the slab's memory is
// never scanned by the garbage collector however many timers are pending; callbacks are
// named by a handler number (fn) and a plain argument (arg).
//
// Layout (pinned by TestNodeLayout): 32 bytes, two nodes per 64-byte cache line.
// A slab chunk is a []node, so it is allocated in a no-scan span.
//
//	when  8  deadline, nanoseconds on the scheduler's clock
//	arg   8  the caller's argument; for closure timers, the closure's side-table slot
//	next  4  list successor (wheel slot or due list); next free node while free
//	prev  4  list predecessor; inHeap while the node sits in the shard's 4-ary heap
//	gen   4  generation, bumped every time the node is freed; never 0 while live
//	fn    4  handler number | periodicFlag
type node struct {
	when int64
	arg  uint64
	next uint32
	prev uint32
	gen  uint32
	fn   uint32
}

const (
	// nilIndex terminates the free list.
	nilIndex = ^uint32(0)
	// inHeap in node.prev marks a node stored in the heap rather than in a list.
	inHeap = ^uint32(0) - 1
	// periodicFlag in node.fn marks a periodic timer; its period is in shard.periods.
	periodicFlag = uint32(1) << 31
	// chunkShift sizes slab chunks: 32768 nodes, 1 MiB. Chunks are never moved once full
	// size, so growth costs one allocation and no copying. The size is a measured trade:
	// each chunk is one span the collector must visit, and at 1e7 timers 4096-node chunks
	// (2442 spans) made a forced GC 3.4x an empty heap's while 1 MiB chunks (305) match
	// it; a partly used last chunk per shard wastes at most 1 MiB.
	chunkShift = 15
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
	// firstChunk is the size a shard's first chunk starts at (32 KiB), so an idle shard
	// costs little; it doubles, copied, until it reaches chunkSize.
	firstChunk = 1024
)

// slab is an arena of nodes addressed by 32-bit indices, with a LIFO free list threaded
// through node.next. Guarded by the owning shard's mutex.
//
// Invariants: every index below cap is either free (on the free list, gen bumped since
// its last use) or live; live nodes are counted in live; indices below reserved are list
// sentinels that are never allocated or freed. Only chunks[0] may be shorter than
// chunkSize, and only while it is the only chunk.
//
// A *node obtained from at is valid until the next alloc, which may move the first chunk.
type slab struct {
	chunks   [][]node // each chunk is one pointer-free allocation
	capacity int      // nodes in all chunks
	free     uint32   // head of the free list, nilIndex when empty
	live     int      // allocated nodes, sentinels excluded
	reserved uint32   // indices [0, reserved) are sentinels
}

func newSlab(reserved uint32) slab {
	s := slab{free: nilIndex, reserved: reserved}
	size := firstChunk
	for size < int(reserved) {
		size *= 2
	}
	s.chunks = [][]node{make([]node, size)}
	s.capacity = size
	s.threadFree(reserved, uint32(size))
	return s
}

// at returns the node at index i. Cost: two dependent loads.
func (s *slab) at(i uint32) *node { return &s.chunks[i>>chunkShift][i&chunkMask] }

func (s *slab) cap() int { return s.capacity }

// alloc returns a free node's index; the node keeps its generation. Cost: O(1), plus a
// chunk allocation when the free list is empty (amortised: the first chunk doubles, then
// chunks are 1 MiB).
func (s *slab) alloc() uint32 {
	if s.free == nilIndex {
		s.grow()
	}
	i := s.free
	n := s.at(i)
	s.free = n.next
	s.live++
	return i
}

func (s *slab) grow() {
	lo := uint32(s.capacity)
	if first := s.chunks[0]; len(s.chunks) == 1 && len(first) < chunkSize {
		grown := make([]node, 2*len(first))
		copy(grown, first)
		s.chunks[0] = grown
		s.capacity = len(grown)
	} else {
		s.chunks = append(s.chunks, make([]node, chunkSize))
		s.capacity += chunkSize
	}
	s.threadFree(lo, uint32(s.capacity))
}

// release returns node i to the free list and bumps its generation so that every handle
// to its previous life is stale. Generation 0 is skipped: the zero Timer never matches.
func (s *slab) release(i uint32) {
	n := s.at(i)
	n.gen++
	if n.gen == 0 {
		n.gen = 1
	}
	n.prev = nilIndex
	n.next = s.free
	s.free = i
	s.live--
}

// threadFree pushes [lo, hi) onto the free list so that lower indices are handed out
// first, and gives each node generation 1.
func (s *slab) threadFree(lo, hi uint32) {
	for i := hi; i > lo; i-- {
		n := s.at(i - 1)
		n.gen = 1
		n.prev = nilIndex
		n.next = s.free
		s.free = i - 1
	}
}
