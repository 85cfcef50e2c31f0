// Package timer is tock's embeddable timer scheduler: a lock-sharded hierarchical timing
// wheel with pooled nodes and a 4-ary heap for precise deadlines, firing due timers in
// batches on an ants goroutine pool.
//
// # Use
//
//	s, _ := timer.New()                          // defaults: 1 ms tick, 4×GOMAXPROCS shards
//	h, _ := s.Register(func(ev timer.Event) { ... ev.Arg ... })
//	t, _ := s.After(250*time.Millisecond, h, 42) // allocation-free
//	s.Cancel(t)                                  // true: it will not run
//	defer s.Close(ctx)
//
// # Guarantees
//
//   - Never early. A timer runs only once the clock has reached its deadline; Event.Now,
//     the reading at which it was collected, is always >= Event.Due.
//   - Precision. A wheel timer runs at the first tick boundary at or after its deadline: late
//     by less than one Options.Tick (1 ms by default) plus the time to wake a goroutine and
//     reach its place in the batch. This holds at every level: timers in coarse levels are
//     cascaded into finer ones as their time approaches, and timers beyond the wheel's span
//     (2^36 ticks, 2.2 years at 1 ms) ride the top level as a ring, so they too fire at their
//     exact tick. A handler registered with Precise keeps its timers in the heap instead and
//     runs them at their exact deadline.
//   - Exactly once. A one-shot timer runs exactly once unless Cancel returned true for it;
//     Cancel returns true exactly when it prevented a run. Once a timer has been collected
//     for a batch it will run and Cancel returns false.
//   - Handles. A Timer is (shard, node index, generation); freeing a node bumps its
//     generation, so a stale handle never cancels or resets the timer that reuses its node.
//   - Allocation-free. After, At, Cancel, Reset and firing allocate nothing once the slab
//     and batch buffers have grown to the working set (pinned by AllocsPerRun tests).
//   - Invisible to the GC. Nodes hold no Go pointers; the slab is a list of 1 MiB
//     pointer-free chunks that the collector never scans. Pending timers cost 32 B each.
//   - Idle is idle. Each shard's driver sleeps until its next deadline (or the next
//     cascade of a coarse wheel slot) and is woken early only by a timer due sooner; with
//     nothing due soon it does not run at all.
//   - Back-pressure. Each shard has Options.InflightBatches batches of at most
//     Options.MaxBatch runs; when callbacks fall behind, the driver waits for a batch to
//     come back instead of queuing without bound. Options.MaxPending bounds memory.
//   - Callback panics are recovered and counted (Stats.Panics); the scheduler goes on.
//
// # Structure and invariants
//
// A Scheduler owns Options.Shards shards. An unkeyed timer goes to a shard owned by the
// calling goroutine's P (processor), picked at random among that P's Shards/GOMAXPROCS
// shards, so producers on different cores never share a lock; the *Key methods use
// xxhash(key) % Shards instead, so one key's timers share a shard. Each shard has one mutex guarding a slab, a wheel, a heap and counters, and
// one driver goroutine.
//
//   - slab: 32-byte nodes in fixed 32768-node (1 MiB) chunks, addressed by uint32 index,
//     with a LIFO free list; a shard's first chunk starts at 1024 nodes and doubles until
//     it is full size. Each index is on exactly one of: a wheel slot list, the due list,
//     the heap, the free list (checked by verify).
//   - wheel: 6 levels × 64 slots; a slot is a circular doubly linked list with a sentinel
//     node, so insert and remove are O(1); occupied[L] bit s is set iff slot (L, s) is
//     non-empty, so the next expiration is found with a rotate and a trailing-zeros count.
//     Every node in the wheel is due after the wheel's elapsed tick.
//   - heap: quadheap, a 4-ary min-heap on (deadline, node index), for Precise handlers.
//   - due list: nodes whose tick has been reached, waiting for a batch.
//
// The driver, with the lock held, moves due nodes into a batch (one-shot nodes are freed
// there, periodic ones re-inserted at previous deadline + interval), releases the lock,
// and hands the batch to the pool. Callbacks therefore never run under a shard lock and
// may schedule or cancel timers freely.
//
// Costs: After/At/Cancel/Reset O(1) for wheel timers, O(log n) for precise ones; firing
// O(1) per timer plus at most one cascade per level over a timer's life.
package timer
