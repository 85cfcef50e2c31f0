package timer

import _ "unsafe" // go:linkname

// Two runtime internals that the Go team keeps stable for outside users (go.dev/issue/67401;
// both are marked "Do not remove or change the type signature" in the runtime).

// procPin pins the calling goroutine to its P and returns the P's id; procUnpin releases
// it. tock uses only the id: it picks a shard owned by the caller's P, so that producers
// on different cores do not take each other's locks.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// cheaprand is the runtime's per-thread wyrand: a few instructions, no shared state.
// math/rand/v2's top-level functions use the ChaCha8 generator instead, which measured
// ~20% of an After call.
//
//go:linkname cheaprand runtime.cheaprand
func cheaprand() uint32
