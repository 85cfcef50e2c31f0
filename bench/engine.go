package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// EngineOneShot: n one-shot tasks, due delay after their Submit, go through the whole
// engine: Submit from GOMAXPROCS goroutines; a task already due (delay 0) is queued for a
// worker at once (unless the queue is full), a later one is scheduled on the timer core and
// queued when it fires; a worker runs a handler that returns nil, the task is SUCCEEDED and
// (Retention < 0) dropped. tasks/s is n over the time from the first Submit to the last
// handler's return; allocs/task counts every allocation in the process over that time, and
// cpu-ns/task the process's CPU time over it (user + system, every goroutine, the
// collector's included): on a shared machine the rate moves with whatever else runs, the
// CPU spent per task much less. One unmeasured pass runs first. There is no in-process
// peer: the goal is a rate (DESIGN.md).
func EngineOneShot(b *testing.B, n int, delay time.Duration, opts ...task.Option) {
	engineRuns(b, n, delay, nil, nil, opts...)
}

// EngineLimits is EngineOneShot's workload (tasks due at once) under the engine's limits
// (limits=impl): none; key, every task naming one concurrency key whose limit
// (task.MaxConcurrencyLimit) is never reached, so each run takes and gives back a slot;
// rate, a rate limit on the type that is never reached (task.MaxRate, task.MaxBurst),
// so each run takes a token; key+rate, both; keywait, one key with limit 4 under 16
// workers, so most runs wait for a slot and are queued again when one frees. Set beside
// none, key and rate are the price of a limit's check per run (cpu-ns/task), keywait
// that of waiting.
func EngineLimits(b *testing.B, n int, impl string) {
	var key *task.Concurrency
	switch impl {
	case "key", "key+rate":
		key = &task.Concurrency{Key: "k", Limit: task.MaxConcurrencyLimit}
	case "keywait":
		key = &task.Concurrency{Key: "k", Limit: 4}
	}
	prepare := func(e *task.Engine) {
		if impl == "rate" || impl == "key+rate" {
			if err := e.SetRateLimit("noop", task.MaxRate, task.MaxBurst); err != nil {
				b.Fatal(err)
			}
		}
	}
	engineRuns(b, n, 0, prepare, func(t *task.Task) { t.Concurrency = key }, task.WithWorkers(16))
}

// engineRuns is EngineOneShot's body: prepare, if set, readies each pass's engine, and
// decorate each task before its Submit.
func engineRuns(b *testing.B, n int, delay time.Duration, prepare func(*task.Engine), decorate func(*task.Task), opts ...task.Option) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("task-%d", i)
	}
	procs := runtime.GOMAXPROCS(0)
	submit := func(e *task.Engine) error {
		var wg sync.WaitGroup
		errs := make(chan error, procs)
		for p := 0; p < procs; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := p * n / procs; i < (p+1)*n/procs; i++ {
					t := task.Task{ID: ids[i], Type: "noop", Schedule: task.After(delay)}
					if decorate != nil {
						decorate(&t)
					}
					if _, err := e.Submit(t); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	enginePasses(b, n, prepare, submit, opts...)
}

// EngineDAG: a workflow of 1 root -> n children -> 1 sink (impl=fan, 2n edges), or the
// same n+2 tasks without edges (impl=flat), submitted in one SubmitBatch (sink first)
// and run through the engine as EngineOneShot's are, on 16 workers. Set beside flat, fan
// is the price of the edges: the extra CPU per edge, (fan's cpu-ns/task - flat's) x
// (n+2) / 2n (benchtables computes it), stays the same from n = 1e3 to 1e4 if an edge
// costs O(1).
func EngineDAG(b *testing.B, n int, impl string) {
	children := make([]string, n)
	for i := range children {
		children[i] = fmt.Sprintf("child-%d", i)
	}
	batch := []task.Task{{ID: "sink", Type: "noop", Schedule: task.After(0)}}
	for _, id := range children {
		batch = append(batch, task.Task{ID: id, Type: "noop", Schedule: task.After(0)})
	}
	batch = append(batch, task.Task{ID: "root", Type: "noop", Schedule: task.After(0)})
	if impl == "fan" {
		batch[0].DependsOn = &task.Deps{On: children}
		for i := 1; i <= n; i++ {
			batch[i].DependsOn = &task.Deps{On: []string{"root"}}
		}
	}
	submit := func(e *task.Engine) error {
		_, err := e.SubmitBatch(batch)
		return err
	}
	enginePasses(b, n+2, nil, submit, task.WithWorkers(16))
}

// enginePasses measures passes of n tasks through a fresh engine each: prepare, if set,
// readies the engine; submit submits the n tasks, all of type "noop".
func enginePasses(b *testing.B, n int, prepare func(*task.Engine), submit func(*task.Engine) error, opts ...task.Option) {
	var rates, allocs, cpus []float64
	// run is one measured pass; the first call is a warm-up whose figures are dropped: in
	// a fresh process it spends much of its time growing the heap and faulting in the
	// ~500 MB the pass allocates, which a service running at this rate has long since done.
	run := func() {
		b.StopTimer()
		e, err := task.New(append([]task.Option{task.WithRetention(-1)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		var handled atomic.Int64
		done := make(chan struct{})
		e.Register("noop", func(context.Context, *task.Run) error {
			if handled.Add(1) == int64(n) {
				close(done)
			}
			return nil
		})
		if prepare != nil {
			prepare(e)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		cpu0, _ := cpuTime()
		start := time.Now()
		if err := submit(e); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			b.Fatalf("only %d of %d tasks handled after a minute", handled.Load(), n)
		}
		elapsed := time.Since(start)
		cpu1, _ := cpuTime()
		b.StopTimer()
		runtime.ReadMemStats(&after)
		rates = append(rates, float64(n)/elapsed.Seconds())
		allocs = append(allocs, float64(after.Mallocs-before.Mallocs)/float64(n))
		cpus = append(cpus, float64(cpu1-cpu0)/float64(n))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e.Close(ctx)
		cancel()
		b.StartTimer()
	}
	run()
	rates, allocs, cpus = rates[:0], allocs[:0], cpus[:0]
	b.ReportAllocs()
	for b.Loop() {
		run()
	}
	b.ReportMetric(median(rates), "tasks/s")
	b.ReportMetric(median(allocs), "allocs/task")
	if _, ok := cpuTime(); ok {
		b.ReportMetric(median(cpus), "cpu-ns/task")
	}
}
