package bench

import "time"

// rng is a xorshift64 generator: a few instructions a draw, inlined, with no shared state,
// so drawing a delay costs both implementations the same couple of ns.
type rng uint64

func newRNG(seed uint64) rng { return rng(seed*0x9E3779B97F4A7C15 | 1) }

func (r *rng) next() uint64 {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = rng(x)
	return x
}

// far returns a delay in [1h, 2h): far enough that nothing fires while it is measured.
func (r *rng) far() time.Duration {
	return time.Hour + time.Duration(r.next()%uint64(time.Hour))
}
