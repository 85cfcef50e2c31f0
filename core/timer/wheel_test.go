package timer

import (
	"math/rand/v2"
	"testing"
)

// The tests in this file drive one shard's data structures directly, single-threaded and
// without a driver or clock, so that every step can be checked against a reference model.

func newTestShard(tickNs int64, maxBatch int) *shard {
	return newShard(0, tickNs, 0, 0, 1, maxBatch)
}

type refTimer struct {
	t      Timer
	when   int64
	period int64
}

// collectAll polls the shard at `now` until a batch comes back short, returning the items.
func collectAll(t *testing.T, sh *shard, now int64) []fireItem {
	t.Helper()
	var out []fireItem
	b := <-sh.batches
	defer func() { sh.batches <- b }()
	for {
		b.n = 0
		sh.collect(now, b)
		out = append(out, b.items[:b.n]...)
		if err := sh.verify(); err != nil {
			t.Fatalf("after collect at %d: %v", now, err)
		}
		if !b.full() {
			return out
		}
	}
}

// TestShardAgainstModel schedules, cancels and resets timers at random, including ones far
// beyond the wheel's span, advances time in random steps, and checks after every poll that
// exactly the due timers fired: none early, none missed, none twice.
func TestShardAgainstModel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tickNs   int64
		maxDelay int64
		maxStep  int64
	}{
		{"near timers, small steps", 1, 5000, 40},
		{"all levels, big steps", 1, int64(wheelSpan) * 3, int64(wheelSpan) / 50},
		{"coarse tick", 1000, 5_000_000, 30_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.tickNs)))
			sh := newTestShard(tc.tickNs, 7) // a small batch exercises partial collection
			live := map[uint64]*refTimer{}   // by arg
			var nextArg uint64
			now := int64(0)
			for step := 0; step < 3000; step++ {
				switch op := rng.IntN(10); {
				case op < 5: // schedule, sometimes periodic
					nextArg++
					r := &refTimer{when: now + rng.Int64N(tc.maxDelay)}
					if rng.IntN(8) == 0 {
						r.period = tc.tickNs * (1 + rng.Int64N(tc.maxDelay/tc.tickNs/4+1))
					}
					r.t, _ = sh.link(r.when, 1, nextArg, r.period)
					live[nextArg] = r
				case op < 7 && len(live) > 0: // cancel
					arg, r := anyTimer(rng, live)
					n := sh.lookup(r.t)
					if n == nil {
						t.Fatalf("live timer %d has a stale handle", arg)
					}
					sh.detach(r.t.idx, n)
					sh.free(r.t.idx, n)
					delete(live, arg)
					if sh.lookup(r.t) != nil {
						t.Fatalf("cancelled handle still resolves")
					}
				case op < 8 && len(live) > 0: // reset
					_, r := anyTimer(rng, live)
					r.when = now + rng.Int64N(tc.maxDelay)
					sh.reset(r.t.idx, sh.lookup(r.t), r.when)
				default: // advance and poll
					now += rng.Int64N(tc.maxStep) + 1
					fired := collectAll(t, sh, now)
					nowTick := sh.floorTick(now)
					seen := map[uint64]bool{}
					for _, it := range fired {
						r, ok := live[it.arg]
						if !ok {
							t.Fatalf("step %d: fired %d, which is not pending", step, it.arg)
						}
						if seen[it.arg] {
							t.Fatalf("step %d: %d fired twice in one poll", step, it.arg)
						}
						seen[it.arg] = true
						if it.due != r.when {
							t.Fatalf("step %d: %d fired with due %d, model says %d", step, it.arg, it.due, r.when)
						}
						if sh.ceilTick(r.when) > nowTick {
							t.Fatalf("step %d: %d fired early: deadline %d (tick %d), now %d (tick %d)",
								step, it.arg, r.when, sh.ceilTick(r.when), now, nowTick)
						}
						if r.period > 0 {
							r.when += r.period * (1 + max(0, (now-r.when)/r.period))
							if sh.lookup(r.t) == nil {
								t.Fatalf("periodic %d: handle stale after firing", it.arg)
							}
						} else {
							delete(live, it.arg)
							if sh.lookup(r.t) != nil {
								t.Fatalf("one-shot %d: handle still live after firing", it.arg)
							}
						}
					}
					for arg, r := range live {
						if sh.ceilTick(r.when) <= nowTick {
							t.Fatalf("step %d: %d due at tick %d was not fired by tick %d", step, arg, sh.ceilTick(r.when), nowTick)
						}
					}
				}
				if sh.slab.live != len(live) {
					t.Fatalf("step %d: slab holds %d, model %d", step, sh.slab.live, len(live))
				}
			}
			if err := sh.verify(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func anyTimer(rng *rand.Rand, live map[uint64]*refTimer) (uint64, *refTimer) {
	k := rng.IntN(len(live))
	for arg, r := range live {
		if k == 0 {
			return arg, r
		}
		k--
	}
	panic("unreachable")
}

func TestPeriodicSkipsMissedOccurrencesWithoutDrift(t *testing.T) {
	sh := newTestShard(1, 16)
	tm, _ := sh.link(100, 1, 7, 100) // due 100, 200, 300, ...
	fired := collectAll(t, sh, 100)
	if len(fired) != 1 || fired[0].due != 100 {
		t.Fatalf("at 100: %+v", fired)
	}
	// The consumer falls behind: at 450, occurrences 200, 300 and 400 are due. One run
	// (for 200) happens; 300 and 400 are skipped; the next deadline stays on the grid.
	fired = collectAll(t, sh, 450)
	if len(fired) != 1 || fired[0].due != 200 {
		t.Fatalf("at 450: %+v", fired)
	}
	if sh.skipped != 2 {
		t.Fatalf("skipped %d, want 2", sh.skipped)
	}
	if n := sh.lookup(tm); n == nil || n.when != 500 {
		t.Fatalf("next deadline %v, want 500 (the grid, not 450+100)", n)
	}
}

func TestStaleHandleNeverTouchesRecycledNode(t *testing.T) {
	sh := newTestShard(1, 16)
	old, _ := sh.link(10, 1, 1, 0)
	n := sh.lookup(old)
	sh.detach(old.idx, n)
	sh.free(old.idx, n)
	reused, _ := sh.link(20, 1, 2, 0)
	if reused.idx != old.idx {
		t.Fatalf("free list did not reuse the node (got %d, freed %d)", reused.idx, old.idx)
	}
	if sh.lookup(old) != nil {
		t.Fatal("stale handle resolves to the recycled node")
	}
	if sh.lookup(reused) == nil {
		t.Fatal("fresh handle does not resolve")
	}
	if sh.lookup(Timer{}) != nil {
		t.Fatal("the zero Timer resolves")
	}
}

func TestSlabGrowsFirstChunkThenByWholeChunks(t *testing.T) {
	sh := newTestShard(1, 16)
	var tms []Timer
	for i := 0; i < 2*chunkSize+1; i++ {
		tm, _ := sh.link(int64(10+i), 1, uint64(i), 0)
		tms = append(tms, tm)
	}
	if got := len(sh.slab.chunks); got != 3 {
		t.Fatalf("%d chunks for %d nodes, want 3", got, len(tms)+int(numSentinels))
	}
	for i, c := range sh.slab.chunks {
		if len(c) != chunkSize {
			t.Fatalf("chunk %d holds %d nodes, want %d", i, len(c), chunkSize)
		}
	}
	for i, tm := range tms { // growth copied the first chunk: every handle still resolves
		if n := sh.lookup(tm); n == nil || n.arg != uint64(i) {
			t.Fatalf("timer %d lost across growth", i)
		}
	}
	if err := sh.verify(); err != nil {
		t.Fatal(err)
	}
}
