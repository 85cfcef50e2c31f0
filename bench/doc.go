// Package bench compares tock's core with the structures a Go programmer would otherwise
// use. It is a nested module so that peers and tools (benchstat) never enter tock's own
// go.mod.
//
// Each workload has one body (ScheduleCancel, FireBurst, ...) that takes an
// implementation; tock and its peer are passed in, so both run the identical workload in
// the same process, one after the other (bench_test.go). Sub-benchmarks are named
// key=value, so `benchstat -col /impl` puts the implementations side by side.
//
// # Implementations (Timers)
//
//   - tock: a timer.Scheduler with default options and one registered handler; the slot
//     number is the timer's argument and its handle is kept in a []timer.Timer.
//   - afterfunc: time.AfterFunc with one func value per slot, built once in Init, so the
//     only allocation per Schedule is the runtime timer itself; Stop cancels and
//     (*time.Timer).Reset resets. Its clock is time.Since of a base taken in Init.
//   - empty: does nothing; the baseline of the forced-GC benchmark.
//
// Both real implementations get the same calls: the bodies visit slots in the same
// order and draw delays from the same seeded generator, keep handles in a slice indexed by slot (never boxed into
// an interface, which would allocate on one side only), check every result, and record
// fires through the same callback, which reads the implementation's own clock.
//
// # Workloads
//
//   - ScheduleCancel: N timers pending at random delays in [1h, 2h); an op cancels the
//     next slot's timer (slots in order: the oldest timer goes first, as request
//     deadlines do) and schedules the slot anew at a random delay. The hot path of
//     deadlines that almost never expire. ns/op and allocs/op.
//   - ScheduleCancelParallel: the same under RunParallel, each goroutine owning a
//     disjoint range of slots, so contention is on the implementation's locks only.
//   - Reset: N timers pending; an op moves the next one to a random delay in [1h, 2h)
//     (pattern=random: half the moves are earlier) or back to a 1h timeout
//     (pattern=sliding: every move is later, as an idle timeout pushed back per request).
//   - FireBurst: N timers due at one instant T0, scheduled with absolute deadlines from
//     one base far enough ahead that scheduling ends before T0. An iteration is one whole
//     burst (ns/op includes scheduling and the wait for T0; read the metrics): fires/s =
//     N / (last fire − T0); the lateness (callback's clock reading − deadline) at p50,
//     p99, p99.9 and max; and early, the callbacks that ran before their deadline (must
//     be 0). One unmeasured burst runs first: the first burst in a process mostly
//     measures page faults (a fresh goroutine stack per AfterFunc fire).
//   - FireWindow: the same with deadlines spread evenly over 1 s.
//   - Lateness: deadlines at an offered rate (1e5/s, 1.1e6/s) over a 1 s window.
//   - Memory: heap bytes per pending far-future timer (runtime.GC, then HeapAlloc before
//     and after scheduling N; handle slices are allocated before the first reading, so
//     B/timer is what the implementation itself retains). ns/op is the time to schedule N.
//   - ForcedGC: with N far-future timers pending, the median duration of runtime.GC().
//   - HeapPushPop: the hold model on a bare priority queue: N random deadlines; an op
//     pushes one at now + a random offset and pops the minimum. quadheap against the
//     PriorityQueue of *item from container/heap's documentation, which allocates an item
//     per push: the queue a user would write.
//   - Idle: N far-future timers pending and nothing due; process CPU time
//     (getrusage user+sys) per second of wall time, and the scheduler's driver wake-ups.
//
// With -short every size shrinks (pending 1e3, bursts 1e4, windows 50 ms) so that one
// pass over everything is a quick smoke test (make test).
package bench
