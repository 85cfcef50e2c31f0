package main

import "fmt"

// workload is one benchmark group: one results file, one table, its comparisons and the
// goals from DESIGN.md that its data decides.
type workload struct {
	bench string // Benchmark function without the prefix; also the results file's stem
	title string
	about string
	cmps  []cmp  // ratios printed for every row
	goals []goal // verdicts
	// notes says where the time goes and why a goal is or is not met, naming the profile
	// in profiles/ that shows it. Prose only: every figure on the page comes from the data.
	notes string
}

// cmp is a ratio of medians between two implementations for one unit, on every row.
type cmp struct {
	unit        string
	a, b        string // the ratio is b/a when lower is better, else a/b: >1 favours a
	lowerBetter bool
}

// goal is a goal of DESIGN.md decided from the medians of one row.
type goal struct {
	row   string
	text  string // the goal as DESIGN.md words it
	check func(l *look) (met bool, evidence string)
}

// look reads medians (and maxima) of one row, remembering which series were missing.
type look struct {
	d       *data
	row     string
	missing []string
}

func (l *look) med(impl, unit string) float64 {
	v, ok := l.d.median(l.row, impl, unit)
	if !ok {
		l.missing = append(l.missing, impl+" "+unit)
	}
	return v
}

func (l *look) max(impl, unit string) float64 {
	v, ok := l.d.max(l.row, impl, unit)
	if !ok {
		l.missing = append(l.missing, impl+" "+unit)
	}
	return v
}

// neverEarly is the core's guarantee, checked on every sample (the maximum of early).
func neverEarly(l *look, impl string) (bool, string) {
	e := l.max(impl, "early")
	return e == 0, fmt.Sprintf("%s early: %g at most", impl, e)
}

// fasterThanReset is the Reset goals' check: tock's median below the runtime's.
func fasterThanReset(l *look) (bool, string) {
	t, p := l.med("tock", "ns/op"), l.med("afterfunc", "ns/op")
	return t < p, fmt.Sprintf("tock %.1f ns, Reset %.1f ns", t, p)
}

var workloads = []workload{
	{
		bench: "ScheduleCancel",
		notes: "Why the 4x is not reached (profiles/schedule-cancel.cpu.pprof): the clock read " +
			"(runtime.nanotime, about 30 ns a call on this VM when measured alone) is the largest single " +
			"item; both sides pay it, but it alone is half of the ~75 ns that 4x would allow. The rest is " +
			"the shard mutex (twice), unlinking the cancelled node from its slot list, whose neighbours " +
			"are cold at 1e6 pending, and linking the new node at a slot's tail (slab.at, slab.alloc). " +
			"time.AfterFunc loses on its 112-byte allocation and the GC work it causes. Choosing shards " +
			"with math/rand/v2's ChaCha8 generator cost ~20% of After " +
			"(profiles/schedule-cancel.before-cheaprand.cpu.pprof); runtime.cheaprand and the caller's P " +
			"replaced it.",

		title: "Schedule + cancel with N pending",
		about: "N timers pending at [1h, 2h); an op cancels the oldest slot's timer and schedules it again.",
		cmps:  []cmp{{"ns/op", "tock", "afterfunc", true}},
		goals: []goal{{"pending=1e6", "4x faster than `time.AfterFunc`+`Stop` (~60 ns), 0 allocs/op",
			func(l *look) (bool, string) {
				t, p, allocs := l.med("tock", "ns/op"), l.med("afterfunc", "ns/op"), l.med("tock", "allocs/op")
				return p/t >= 4 && allocs == 0, fmt.Sprintf("%.2fx faster, %.0f ns; %g allocs/op", p/t, t, allocs)
			}}},
	},
	{
		bench: "ScheduleCancelParallel",
		notes: "Unkeyed timers go to a shard owned by the caller's P, so two producers on two cores " +
			"take different locks and touch different wheels; with a random shard per timer the same " +
			"benchmark ran at about 260 ns/op, no faster than one goroutine.",

		title: "Parallel schedule + cancel (RunParallel), 1e6 pending",
		about: "ScheduleCancel from GOMAXPROCS goroutines, each on its own range of slots.",
		cmps:  []cmp{{"ns/op", "tock", "afterfunc", true}},
		goals: []goal{{"pending=1e6", "4x faster than `time.AfterFunc`+`Stop`",
			func(l *look) (bool, string) {
				r := l.med("afterfunc", "ns/op") / l.med("tock", "ns/op")
				return r >= 4, fmt.Sprintf("%.2fx faster", r)
			}}},
	},
	{
		bench: "Reset",
		notes: "A move to a later deadline is lazy: tock rewrites the node's deadline and leaves it in " +
			"its slot, to be re-filed when the slot comes round (shard.reset). A move to an earlier " +
			"deadline has to unlink the node (its two list neighbours are cold at 1e6 pending) and " +
			"link it into an earlier slot; the runtime's Reset only rewrites the timer's when and " +
			"repairs its heap later, and its timers sit in allocation order in memory. In " +
			"profiles/reset-random.cpu.pprof the clock read carries ~40% of the samples: its " +
			"serialising TSC read waits for the cache misses issued before it, so that share is " +
			"mostly the misses. Random moves stay slower than the runtime's; sliding timeouts, the " +
			"common use of Reset, are faster.",

		title: "Reset of a pending timer, 1e6 pending",
		about: "An op moves the next slot's pending timer: pattern=random to a new delay in [1h, 2h) " +
			"(half the moves earlier), pattern=sliding back to a 1h timeout (every move later, " +
			"as an idle timeout pushed back per request).",
		cmps: []cmp{{"ns/op", "tock", "afterfunc", true}},
		goals: []goal{
			{"pattern=random/pending=1e6", "faster than `(*time.Timer).Reset` (random moves)",
				fasterThanReset},
			{"pattern=sliding/pending=1e6", "faster than `(*time.Timer).Reset` (sliding timeouts)",
				fasterThanReset},
		},
	},
	{
		bench: "FireBurst",
		notes: "Due timers leave the shard lock in batches of up to 256 per pool hand-off, so the " +
			"hand-off (~500 ns) is paid once per batch; time.AfterFunc starts a goroutine per fire. " +
			"In profiles/fire-burst.cpu.pprof most of the time is the benchmark's own callback (a " +
			"clock read and a store per fire) and sorting the lateness samples.",

		title: "Fire throughput: a burst of 1e6 due at once",
		about: "1e6 timers due at one instant; fires/s over the whole burst and each callback's lateness.",
		cmps:  []cmp{{"fires/s", "tock", "afterfunc", false}, {"p99-ns", "tock", "afterfunc", true}},
		goals: []goal{{"timers=1e6", "10x the fires/s of `time.AfterFunc` (~4M fires/s), never early",
			func(l *look) (bool, string) {
				r := l.med("tock", "fires/s") / l.med("afterfunc", "fires/s")
				early, ev := neverEarly(l, "tock")
				return r >= 10 && early, fmt.Sprintf("%.1fx, %.2fM fires/s; %s", r, l.med("tock", "fires/s")/1e6, ev)
			}}},
	},
	{
		bench: "FireWindow",
		title: "Fire throughput: 1e6 due evenly over 1 s",
		about: "1e6 timers with deadlines spread evenly over one second.",
		cmps:  []cmp{{"p99-ns", "tock", "afterfunc", true}, {"max-ns", "tock", "afterfunc", true}},
		goals: []goal{{"timers=1e6", "never early (core guarantee; no row in the goals table)",
			func(l *look) (bool, string) { return neverEarly(l, "tock") }}},
	},
	{
		bench: "Lateness",
		notes: "At 1e5 fires/s tock and time.AfterFunc are level: benchstat finds no significant " +
			"difference between their p99s (results/Lateness.benchstat.txt), and the goal's verdict " +
			"above compares medians only. tock's p50 is the default 1 ms tick's rounding (a wheel timer " +
			"fires at the first tick boundary after its deadline, 0.5 ms late on average) plus the " +
			"wake-up; tock-precise (a Precise handler: heap, exact deadlines) has a p50 under 0.1 ms, " +
			"but it wakes once per deadline, which costs it at 1.1M fires/s. The process is mostly " +
			"idle even at 1.1M fires/s (profiles/lateness-1.1e6.cpu.pprof: ~11% of one core, mostly " +
			"the benchmark's sorting), so tails are wake-up latency, not throughput: on this VM a " +
			"thread spinning alone sees gaps of up to 2.5 ms. Drivers sleep on a timerfd (the Go " +
			"runtime's poller sleeps in whole milliseconds when idle) backed by a runtime timer (a " +
			"busy process may not poll for up to 10 ms).",

		title: "Lateness at an offered rate",
		about: "Timers due at the given rate over a 1 s window; lateness percentiles of the callbacks.",
		cmps:  []cmp{{"p99-ns", "tock", "afterfunc", true}, {"p99.9-ns", "tock", "afterfunc", true}},
		goals: []goal{
			{"rate=1e5", "p99 no worse than `time.AfterFunc`, never early",
				func(l *look) (bool, string) {
					t, p := l.med("tock", "p99-ns"), l.med("afterfunc", "p99-ns")
					early, ev := neverEarly(l, "tock")
					return t <= p && early, fmt.Sprintf("p99 tock %s, AfterFunc %s; %s", dur(t), dur(p), ev)
				}},
			{"rate=1.1e6", "p99 within 5 ms, never early",
				func(l *look) (bool, string) {
					t := l.med("tock", "p99-ns")
					early, ev := neverEarly(l, "tock")
					return t <= 5e6 && early, fmt.Sprintf("p99 tock %s; %s", dur(t), ev)
				}},
		},
	},
	{
		bench: "Memory",
		title: "Memory per pending timer, 1e6 pending",
		about: "Live heap growth per far-future timer, measured after a GC with the timers alive.",
		cmps:  []cmp{{"B/timer", "tock", "afterfunc", true}},
		goals: []goal{{"pending=1e6", "40 B or less per pending timer",
			func(l *look) (bool, string) {
				t := l.med("tock", "B/timer")
				return t <= 40, fmt.Sprintf("%.1f B/timer", t)
			}}},
	},
	{
		bench: "ForcedGC",
		notes: "Slab chunks are pointer-free 1 MiB slices, so the collector marks each as one span " +
			"and never scans it. With 4096-node (128 KiB) chunks, 1e7 timers were 2442 spans and " +
			"the forced GC took about 3x an empty heap's; 1 MiB chunks (305 spans) brought it level.",

		title: "Forced GC with 1e7 pending timers",
		about: "Wall time of runtime.GC() with 1e7 far-future timers pending; empty holds none.",
		cmps:  []cmp{{"gc-ns", "tock", "afterfunc", true}, {"gc-ns", "tock", "empty", true}},
		goals: []goal{{"pending=1e7", "within 2x of an empty heap (pending timers invisible to the GC)",
			func(l *look) (bool, string) {
				t, e := l.med("tock", "gc-ns"), l.med("empty", "gc-ns")
				return t <= 2*e, fmt.Sprintf("tock %s, empty %s: %.2fx", dur(t), dur(e), t/e)
			}}},
	},
	{
		bench: "HeapPushPop",
		title: "4-ary heap push + pop, 1e6 entries",
		about: "Hold model: push at now + a random offset, pop the minimum. quadheap vs the container/heap example queue.",
		cmps:  []cmp{{"ns/op", "quadheap", "container-heap", true}},
		goals: []goal{{"n=1e6", "1.7x faster than `container/heap`, 0 allocs/op",
			func(l *look) (bool, string) {
				r := l.med("container-heap", "ns/op") / l.med("quadheap", "ns/op")
				allocs := l.med("quadheap", "allocs/op")
				return r >= 1.7 && allocs == 0, fmt.Sprintf("%.2fx faster; %g allocs/op", r, allocs)
			}}},
	},
	{
		bench: "EngineOneShot",
		notes: "Where the time goes (profiles/engine-oneshot.cpu.pprof, path=timer): about 1.2-2 µs " +
			"of CPU per task (cpu-sec/task) on the timer path, so two busy cores give 1-1.7M " +
			"tasks/s; path=queue (tasks due at once, handed to the workers' queue by Submit " +
			"itself) needs less. Tuning (profiles/README.md, Engine tuning): one allocation per " +
			"task, then none: records are reused through a pool once nothing outside the shard " +
			"lock can refer to them (a handler's ctx, run and run.Task are valid only until it " +
			"returns); a pointer-free record index instead of a Go map keyed by two strings; the " +
			"record in the 480 B size class; a non-blocking fast path to the workers; Submit " +
			"skipping checks that cannot fail for a default namespace and retry policy; attempt " +
			"times kept as clock readings; a task due at Submit queued without a timer. The " +
			"goal is decided on path=timer, which fires every task from the timer core.",
		title: "Task engine: one-shot tasks submitted, fired, handled",
		about: "1e6 one-shot tasks submitted from GOMAXPROCS goroutines, each run by a handler " +
			"that returns nil; finished records are dropped (Retention < 0). path=queue: due at " +
			"once (Submit queues them for the workers); path=timer: due 1 ns after Submit, so " +
			"each is scheduled on and fired by the timer core. tasks/s is from the first Submit " +
			"to the last handler's return; no in-process peer exists.",
		goals: []goal{{"path=timer/tasks=1e6", "1,000,000 tasks/s submitted, fired and handled, in-process",
			func(l *look) (bool, string) {
				r, a := l.med("", "tasks/s"), l.med("", "allocs/task")
				return r >= 1e6, fmt.Sprintf("%.0f tasks/s, %.2f allocs/task", r, a)
			}}},
	},
	{
		bench: "EngineLimits",
		title: "Task engine: the cost of limits per run",
		about: "EngineOneShot's workload (1e5 tasks due at once, 16 workers) under the engine's " +
			"limits (issue 16). none: no limit, the path every task takes; key: every task names one " +
			"concurrency key whose limit is never reached, so each run takes a slot under the key's " +
			"lock and gives it back; rate: a rate limit on the type that is never reached, one token " +
			"a run; key+rate: both; keywait: one key with limit 4, so most runs wait for a slot and " +
			"are queued again when one frees. The ratios against none are the price per run " +
			"(cpu-ns/task: the process's CPU per task).",
		cmps: []cmp{{"cpu-ns/task", "none", "key", true}, {"cpu-ns/task", "none", "rate", true},
			{"cpu-ns/task", "none", "key+rate", true}, {"cpu-ns/task", "none", "keywait", true}},
	},
	{
		bench: "EngineDAG",
		title: "Task engine: the cost of a dependency edge",
		about: "A workflow of 1 root -> n children -> 1 sink (fan: 2n edges) beside the same n+2 tasks " +
			"without edges (flat), each submitted in one SubmitBatch and run through the engine on 16 " +
			"workers, records dropped (issue 16). The extra CPU an edge costs is (fan - flat) cpu-ns/task " +
			"x (n+2) / 2n; if an edge costs O(1) it does not grow from n = 1e3 to 1e4.",
		cmps: []cmp{{"cpu-ns/task", "flat", "fan", true}},
		goals: []goal{{"children=1e4", "a dependency edge costs O(1): its extra CPU at 1e4 children at most 1.5x that at 1e3 (issue 16)",
			func(l *look) (bool, string) {
				e3, e4 := edgeNs(l, "children=1e3", 1e3), edgeNs(l, "children=1e4", 1e4)
				return e4 <= 1.5*e3, fmt.Sprintf("%.0f ns an edge at 1e4 children, %.0f ns at 1e3", e4, e3)
			}}},
	},
	{
		bench: "Idle",
		title: "Idle cost of 1e6 far-future timers",
		about: "Process CPU time per wall second while nothing is due; tock also counts driver wake-ups.",
		cmps:  []cmp{{"cpu-ns/s", "tock", "afterfunc", true}},
		goals: []goal{{"pending=1e6", "no fixed busy tick: far-future timers cost no CPU (DESIGN.md, Driving; " +
			"read here as: no driver wake-ups, and the process under 1% of a core)",
			func(l *look) (bool, string) {
				t, p, w := l.med("tock", "cpu-ns/s"), l.med("afterfunc", "cpu-ns/s"), l.med("tock", "wakeups/s")
				return w == 0 && t < 1e7, fmt.Sprintf("tock %g wake-ups/s, %s CPU a second; AfterFunc %s", w, dur(t), dur(p))
			}}},
	},
}

// edgeNs is EngineDAG's extra CPU per edge in the row of n children:
// (fan - flat) cpu-ns/task x (n+2) / 2n.
func edgeNs(l *look, row string, n float64) float64 {
	saved := l.row
	defer func() { l.row = saved }()
	l.row = row
	fan, flat := l.med("fan", "cpu-ns/task"), l.med("flat", "cpu-ns/task")
	return (fan - flat) * (n + 2) / (2 * n)
}
