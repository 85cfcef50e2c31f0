package quadheap

import (
	"math/rand/v2"
	"testing"
)

// span is the range of deadlines and deadline offsets in the benchmarks:
// one second in nanoseconds.
const span = 1e9

// offsets returns 1<<16 random offsets in [0, span), so the timed loops pay
// for a table load rather than a random number generator.
func offsets(seed uint64) []int64 {
	r := rand.New(rand.NewPCG(seed, 2))
	o := make([]int64, 1<<16)
	for i := range o {
		o[i] = r.Int64N(span)
	}
	return o
}

var sizes = []struct {
	name string
	n    int
}{{"n=1e3", 1e3}, {"n=1e6", 1e6}}

// BenchmarkPushPop is the hold model: a population of n random deadlines
// in [0, span); each op pushes the free id at now + a random offset in
// [0, span), where now is the last popped deadline (time moves forward as a
// timer queue's does), then pops the minimum, whose id becomes the free one.
func BenchmarkPushPop(b *testing.B) {
	for _, sz := range sizes {
		b.Run(sz.name, func(b *testing.B) {
			h, _ := populated(sz.n, 1)
			off := offsets(3)
			free, now := uint32(sz.n), int64(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				h.Push(free, now+off[i&(len(off)-1)])
				free, now, _ = h.Pop()
			}
		})
	}
}

// presentIDs returns count ids drawn at random from the n a populated heap holds.
func presentIDs(r *rand.Rand, n, count int) []uint32 {
	ids := make([]uint32, count)
	for i := range ids {
		ids[i] = r.Uint32N(uint32(n))
	}
	return ids
}

// BenchmarkUpdate re-times a random present id to a random deadline in
// [0, span), as a timer reset does.
func BenchmarkUpdate(b *testing.B) {
	for _, sz := range sizes {
		b.Run(sz.name, func(b *testing.B) {
			h, r := populated(sz.n, 1)
			off := offsets(3)
			ids := presentIDs(r, sz.n, len(off))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				h.Update(ids[i&(len(ids)-1)], off[i&(len(off)-1)])
			}
		})
	}
}

// BenchmarkRemovePush cancels a random present id and schedules it again
// at a random deadline in [0, span), keeping the population at n.
func BenchmarkRemovePush(b *testing.B) {
	for _, sz := range sizes {
		b.Run(sz.name, func(b *testing.B) {
			h, r := populated(sz.n, 1)
			off := offsets(3)
			ids := presentIDs(r, sz.n, len(off))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				id := ids[i&(len(ids)-1)]
				h.Remove(id)
				h.Push(id, off[i&(len(off)-1)])
			}
		})
	}
}
