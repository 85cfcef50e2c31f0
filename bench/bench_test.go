package bench

import (
	"runtime"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// timerImpls are the implementations every timer workload runs, in this order.
var timerImpls = []Impl{
	{"tock", NewTock()},
	{"afterfunc", NewAfterFunc},
}

// eachImpl runs body once per implementation and size, as impl=NAME/SIZE, collecting
// garbage before each so that one population does not bleed into the next.
func eachImpl(b *testing.B, impls []Impl, sizes []Size, body func(*testing.B, func() Timers, int)) {
	for _, impl := range impls {
		for _, sz := range sizes {
			runtime.GC()
			b.Run("impl="+impl.Name+"/"+sz.Name, func(b *testing.B) { body(b, impl.New, sz.N) })
		}
	}
}

// pending1e6 and timers1e6 are the common sizes (functions: -short is known only once
// flags are parsed).
func pending1e6() []Size { return Sizes(Size{"pending=1e3", 1e3}, Size{"pending=1e6", 1e6}) }
func timers1e6() []Size  { return Sizes(Size{"timers=1e4", 1e4}, Size{"timers=1e6", 1e6}) }

func BenchmarkScheduleCancel(b *testing.B) {
	eachImpl(b, timerImpls, Sizes(Size{"pending=1e3", 1e3},
		Size{"pending=1e3", 1e3}, Size{"pending=1e5", 1e5}, Size{"pending=1e6", 1e6}),
		ScheduleCancel)
}

func BenchmarkScheduleCancelParallel(b *testing.B) {
	eachImpl(b, timerImpls, pending1e6(), ScheduleCancelParallel)
}

func BenchmarkReset(b *testing.B) {
	for _, p := range []struct {
		name    string
		sliding bool
	}{{"random", false}, {"sliding", true}} {
		b.Run("pattern="+p.name, func(b *testing.B) {
			eachImpl(b, timerImpls, pending1e6(), func(b *testing.B, nt func() Timers, n int) {
				Reset(b, nt, n, p.sliding)
			})
		})
	}
}

func BenchmarkFireBurst(b *testing.B) {
	eachImpl(b, timerImpls, timers1e6(), func(b *testing.B, nt func() Timers, n int) {
		Fire(b, nt, n, 0)
	})
}

func BenchmarkFireWindow(b *testing.B) {
	eachImpl(b, timerImpls, timers1e6(), func(b *testing.B, nt func() Timers, n int) {
		Fire(b, nt, n, Window())
	})
}

// BenchmarkLateness offers timers at a rate for one window: n = rate × window. Besides
// the default tock (1 ms wheel tick) it runs tock-precise, a Precise handler whose timers
// sit in the heap and fire at their deadline, not at the next tick boundary.
func BenchmarkLateness(b *testing.B) {
	rates := []Size{{"rate=1e5", 1e5}, {"rate=1.1e6", 1.1e6}}
	impls := append(timerImpls[:1:1], Impl{"tock-precise", NewTockPrecise}, timerImpls[1])
	eachImpl(b, impls, rates, func(b *testing.B, nt func() Timers, rate int) {
		w := Window()
		Fire(b, nt, int(float64(rate)*w.Seconds()), w)
	})
}

func BenchmarkMemory(b *testing.B) {
	eachImpl(b, timerImpls, pending1e6(), Memory)
}

func BenchmarkForcedGC(b *testing.B) {
	impls := append([]Impl{{"empty", NewEmpty}}, timerImpls...)
	eachImpl(b, impls, Sizes(Size{"pending=1e4", 1e4}, Size{"pending=1e7", 1e7}), ForcedGC)
}

func BenchmarkIdle(b *testing.B) {
	eachImpl(b, timerImpls, pending1e6(), func(b *testing.B, nt func() Timers, n int) {
		Idle(b, nt, n, Window())
	})
}

func BenchmarkHeapPushPop(b *testing.B) {
	impls := []HeapImpl{{"quadheap", NewQuadHeap}, {"container-heap", NewContainerHeap}}
	for _, impl := range impls {
		for _, sz := range Sizes(Size{"n=1e3", 1e3}, Size{"n=1e6", 1e6}) {
			runtime.GC()
			b.Run("impl="+impl.Name+"/"+sz.Name, func(b *testing.B) { HeapPushPop(b, impl.New, sz.N) })
		}
	}
}

func BenchmarkEngineOneShot(b *testing.B) {
	// path=queue: tasks due at once (After(0)), which Submit hands to the workers' queue
	// directly; path=timer: tasks due 1 ns after their Submit, so each goes through the
	// timer core and fires from it, as every task due later does.
	for _, path := range []struct {
		name  string
		delay time.Duration
	}{{"queue", 0}, {"timer", time.Nanosecond}} {
		for _, sz := range Sizes(Size{"tasks=1e4", 1e4}, Size{"tasks=1e6", 1e6}) {
			b.Run("path="+path.name+"/"+sz.Name, func(b *testing.B) { EngineOneShot(b, sz.N, path.delay) })
		}
	}
}

// BenchmarkEngineRetention is EngineOneShot's path=queue with the finished tasks dropped
// as they end (retention=none: their records are reused by later Submits) or kept
// queryable for a minute (retention=1m, tockd's default: every task of a pass stays):
// the difference is what the retention costs a task.
func BenchmarkEngineRetention(b *testing.B) {
	for _, r := range []struct {
		name string
		d    time.Duration
	}{{"none", -1}, {"1m", time.Minute}} {
		for _, sz := range Sizes(Size{"tasks=1e4", 1e4}, Size{"tasks=1e6", 1e6}) {
			b.Run("retention="+r.name+"/"+sz.Name, func(b *testing.B) { EngineOneShot(b, sz.N, 0, task.WithRetention(r.d)) })
		}
	}
}

func BenchmarkEngineDAG(b *testing.B) {
	for _, impl := range []string{"flat", "fan"} {
		for _, sz := range Sizes(Size{"children=1e3", 1e3}, Size{"children=1e3", 1e3}, Size{"children=1e4", 1e4}) {
			b.Run("impl="+impl+"/"+sz.Name, func(b *testing.B) { EngineDAG(b, sz.N, impl) })
		}
	}
}

func BenchmarkEngineLimits(b *testing.B) {
	for _, impl := range []string{"none", "key", "rate", "key+rate", "keywait"} {
		for _, sz := range Sizes(Size{"tasks=1e4", 1e4}, Size{"tasks=1e5", 1e5}) {
			b.Run("impl="+impl+"/"+sz.Name, func(b *testing.B) { EngineLimits(b, sz.N, impl) })
		}
	}
}
