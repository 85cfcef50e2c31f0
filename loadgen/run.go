package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

const (
	taskType   = "loadgen"
	minPayload = 24 // uint64 run tag, uint64 index, int64 due time (ns since the Unix epoch)
	maxBatch   = protocol.MaxBatch
)

// clock reads wall time in ns as the start's wall time plus the monotonic time since, so
// that a step of the system clock during a run cannot make a run look early or late.
type clock struct{ t0 time.Time }

func (c clock) now() int64 { return c.t0.UnixNano() + int64(time.Since(c.t0)) }

// encodePayload writes the run's tag, the task's index and its due time into buf.
func encodePayload(buf []byte, run uint64, i int, due int64) {
	binary.BigEndian.PutUint64(buf[0:8], run)
	binary.BigEndian.PutUint64(buf[8:16], uint64(i))
	binary.BigEndian.PutUint64(buf[16:24], uint64(due))
}

// decodePayload reads what encodePayload wrote; ok is false for a payload too short.
func decodePayload(p []byte) (run uint64, i int, due int64, ok bool) {
	if len(p) < minPayload {
		return 0, -1, 0, false
	}
	run = binary.BigEndian.Uint64(p[0:8])
	u := binary.BigEndian.Uint64(p[8:16])
	if u > 1<<62 {
		return run, -1, 0, false
	}
	return run, int(u), int64(binary.BigEndian.Uint64(p[16:24])), true
}

// submitter submits tasks [lo, hi) of one batch, whose due times are dues[k] for task
// lo+k, with payloads already encoded; it returns an error per task (nil: accepted), or
// one error for all.
type submitter func(ctx context.Context, lo int, ts []task.Task) ([]error, error)

// run is one loadgen run: it sets up the target, submits from c.producers goroutines,
// waits for every run (or the last deadline plus grace) and returns the summary.
func run(ctx context.Context, c config) (*result, error) {
	clk := clock{t0: time.Now()}
	rec := NewDAGRecorder(c.tasks, c.dag)
	runTag := uint64(clk.t0.UnixNano()) // tells this run's tasks from another's left on a server
	var foreign, acked, atOnce, mostAtOnce atomic.Int64
	// Every target calls handle as a run starts and ack as it ends, in pairs (beanstalkd
	// leaves a run whose delete failed counted: its connection is gone).
	ack := func(p []byte) {
		if c.dag.on() { // a run's end, which its children's starts must follow
			if run, i, _, ok := decodePayload(p); ok && run == runTag {
				rec.Ended(i, clk.now())
			}
		}
		atOnce.Add(-1)
		acked.Add(1)
	}
	handle := func(p []byte) {
		for n, m := atOnce.Add(1), mostAtOnce.Load(); n > m && !mostAtOnce.CompareAndSwap(m, n); m = mostAtOnce.Load() {
		}
		ran := clk.now()
		run, i, due, ok := decodePayload(p)
		if ok && run != runTag {
			foreign.Add(1)
			return
		}
		if !ok {
			i = -1
		}
		rec.Record(i, due, ran)
		if c.work > 0 {
			time.Sleep(c.work)
		}
	}

	tg, err := newTarget(ctx, c, clk, runTag, rec, hooks{handle: handle, ack: ack})
	if err != nil {
		return nil, err
	}
	defer tg.stop()

	var (
		submitted atomic.Int64
		lastDue   atomic.Int64
		errOnce   sync.Once
		firstErr  error
	)
	noteErr := func(err error) { errOnce.Do(func() { firstErr = err }) }
	tag := "lg" + strconv.FormatUint(runTag, 36)
	start := clk.now()
	base := start + int64(c.delay)

	// Progress: a line a second on c.progress, and the per-second counts for the summary.
	var ticks []tick // written by the progress goroutine, read after progressDone
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last tick
		lastAt := start
		for sec := 1; ; sec++ {
			stopping := false
			select {
			case <-stopProgress:
				stopping = true
			case <-t.C:
			}
			now := clk.now()
			cur := tick{Submitted: submitted.Load(), Fired: rec.Fired(), Acked: acked.Load()}
			d := tick{Second: sec, Seconds: time.Duration(now - lastAt).Seconds(),
				Submitted: cur.Submitted - last.Submitted, Fired: cur.Fired - last.Fired, Acked: cur.Acked - last.Acked}
			if stopping {
				if d.Seconds > 0.001 { // the last, partial second
					ticks = append(ticks, d)
				}
				return
			}
			ticks = append(ticks, d)
			if c.progress != nil {
				fmt.Fprintf(c.progress, "loadgen %s: %3ds  submitted %d/%d  fired %d  acked %d  (%d/s submit, %d/s fire, %d/s ack)\n",
					c.target, sec, cur.Submitted, c.tasks, cur.Fired, cur.Acked, d.Submitted, d.Fired, d.Acked)
			}
			last, lastAt = cur, now
		}
	}()

	// Chaos: kills from c.chaosSpec.Every after the start until the wait below ends.
	var chaos *chaosRun
	if c.chaos != "" {
		lc, err := newLocalCluster(c.clusterDir, splitAddrs(c.addr), c.chaosRevive)
		if err != nil {
			close(stopProgress)
			<-progressDone
			return nil, err
		}
		defer lc.Close()
		chaos = &chaosRun{spec: c.chaosSpec, cl: lc, rec: rec, clk: clk, start: start, maxKills: c.chaosKills, log: c.progress}
		chaos.begin(ctx)
	}

	// The server's CPU over the run, from its admin port: scraped before the first submit
	// and after the last run (or the wait's end).
	cpu := serverCPU{}
	if c.target == "server" {
		cpu.admin = c.admin
	}
	cpu.begin(ctx)

	// The server's CPU profile covers the first c.serverProfileSecs of the run.
	var profileDone chan error
	if c.serverProfile != "" && c.target == "server" {
		profileDone = make(chan error, 1)
		go func() {
			profileDone <- fetchServerProfile(ctx, c.admin, c.serverProfileSecs, c.serverProfile)
		}()
	}

	var wg sync.WaitGroup
	for p := range c.producers {
		lo, hi := producerRange(c, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			produce(ctx, c, clk, lo, hi, base, runTag, tag, tg.submit, rec, &submitted, &lastDue, noteErr)
		}()
	}
	wg.Wait()
	submitEnd := clk.now()

	// Wait for every accepted task to run, or until the last deadline plus grace has
	// passed and no run arrived for a grace: a target that is still working through a
	// backlog (the runs keep coming) is late, not losing tasks.
	deadline := max(lastDue.Load(), submitEnd) + int64(c.grace)
	timedOut := false
	wait := time.NewTimer(time.Duration(deadline - clk.now()))
	seen := rec.Fired()
waiting:
	for {
		select {
		case <-rec.Done():
			break waiting
		case <-wait.C:
			if f := rec.Fired(); f != seen || (chaos != nil && chaos.busy.Load()) {
				// Runs still arrive, or a failover is under way (its leader's runs
				// come again once another node leads): wait another grace.
				seen = f
				wait.Reset(c.grace)
				continue
			}
			timedOut = true
			break waiting
		case <-ctx.Done():
			timedOut = true
			break waiting
		}
	}
	wait.Stop()
	if chaos != nil {
		chaos.end()
	}
	end := clk.now()
	cpuSecs, cpuErr := cpu.end(ctx)
	unconfirmed := tg.settle(ctx, timedOut)
	rec.Freeze()
	close(stopProgress)
	<-progressDone

	res := &result{
		Target:     c.target,
		DAG:        c.dag.String(),
		Durable:    c.durable,
		Submitted:  submitted.Load(),
		SubmitSecs: time.Duration(submitEnd - start).Seconds(),
		RunSecs:    time.Duration(end - start).Seconds(),
		TimedOut:   timedOut,
		Foreign:    foreign.Load(),
		MostAtOnce: mostAtOnce.Load(),
		Counts:     rec.Summary(),
		Throughput: ticks,
		Notes:      tg.notes(),
	}
	res.Unconfirmed = unconfirmed
	if c.dag.on() {
		res.Workflows = c.tasks / c.dag.size
	}
	if chaos != nil {
		res.Chaos = chaos.report(res.Counts)
	}
	res.Peaks = peaks(ticks)
	if res.SubmitSecs > 0 {
		res.SubmitRate = float64(res.Submitted) / res.SubmitSecs
	}
	if res.RunSecs > 0 {
		res.EndToEnd = float64(res.Counts.Unique) / res.RunSecs
	}
	if firstErr != nil {
		res.SubmitErr = firstErr.Error()
	}
	if cpuErr != nil {
		res.ServerCPUErr = cpuErr.Error()
	} else if cpu.admin != "" {
		res.ServerCPU = newCPUUse(cpuSecs, res.Counts.Unique)
	}
	if profileDone != nil {
		if err := <-profileDone; err != nil {
			res.ServerProfileErr = err.Error()
		} else {
			res.ServerProfile = c.serverProfile
		}
	}
	return res, nil
}

// produce submits tasks [lo, hi) in batches of c.batch, paced to its share of c.rate;
// with -dag, each batch is whole workflows (linkWorkflows).
func produce(ctx context.Context, c config, clk clock, lo, hi int, base int64, runTag uint64, tag string,
	submit submitter, rec *Recorder, submitted, lastDue *atomic.Int64, noteErr func(error)) {
	n := int64(c.tasks)
	perProducer := c.rate * float64(hi-lo) / float64(c.tasks) // this producer's share
	pstart := clk.now()
	slab := make([]byte, c.batch*c.payload)
	u := c.dag.unit() // lo, hi and c.batch are multiples of it
	ts := make([]task.Task, 0, c.batch)
	var conc *task.Concurrency // shared: the target copies it (the engine, or the wire)
	if c.concKey != "" {
		conc = &task.Concurrency{Key: c.concKey, Limit: c.concLimit}
	}
	retry := task.RetryPolicy{MaxAttempts: c.attempts, InitialBackoff: c.backoff,
		MaxBackoff: 20 * c.backoff, Multiplier: 1.5, Jitter: 0.5}
	for i := lo; i < hi && ctx.Err() == nil; {
		if perProducer > 0 {
			// Submit task i no earlier than (i-lo)/perProducer seconds after the start.
			at := pstart + int64(float64(i-lo)/perProducer*float64(time.Second))
			if d := at - clk.now(); d > 0 {
				time.Sleep(time.Duration(d))
			}
		}
		end := min(hi, i+c.batch)
		if perProducer > 0 {
			// Do not run ahead of the rate by more than 10 ms worth of tasks, in whole
			// workflows.
			end = min(end, i+max(1, int(perProducer/100)))
			end = min(hi, i+(end-i+u-1)/u*u)
		}
		now := clk.now()
		ts = ts[:0]
		maxDue := int64(0)
		for k := i; k < end; k++ {
			due := base + int64(c.window)*int64(k)/n
			due = max(due, now) // a task cannot be due before it is submitted
			maxDue = max(maxDue, due)
			p := slab[(k-i)*c.payload : (k-i+1)*c.payload]
			encodePayload(p, runTag, k, due)
			ts = append(ts, task.Task{
				ID:          tag + "-" + strconv.Itoa(k),
				Type:        taskType,
				Payload:     p,
				Schedule:    task.At(time.Unix(0, due)),
				Retry:       retry,
				Concurrency: conc,
			})
		}
		if c.dag.on() {
			linkWorkflows(c.dag, i, ts)
		}
		errs, err := submit(ctx, i, ts)
		accepted := int64(0)
		for k := range ts {
			e := err
			if e == nil {
				e = errs[k]
			}
			if e != nil {
				noteErr(fmt.Errorf("task %d: %w", i+k, e))
				rec.Reject(i + k)
				continue
			}
			accepted++
		}
		if accepted > 0 {
			for {
				old := lastDue.Load()
				if maxDue <= old || lastDue.CompareAndSwap(old, maxDue) {
					break
				}
			}
		}
		submitted.Add(accepted)
		i = end
	}
	if ctx.Err() != nil {
		noteErr(ctx.Err())
	}
}

// linkWorkflows sets the DependsOn of ts, tasks lo, lo+1, ... of the run (whole
// workflows of d from lo on, else it panics), to their parents' IDs: one Deps for every child of a
// workflow, one for its sink (the target copies them: the engine, or the wire).
func linkWorkflows(d dagSpec, lo int, ts []task.Task) {
	if lo%d.size != 0 || len(ts)%d.size != 0 { // produce's batches are whole workflows
		panic(fmt.Sprintf("loadgen: tasks [%d, %d) are not whole workflows of %d", lo, lo+len(ts), d.size))
	}
	for w := 0; w < len(ts); w += d.size {
		g := ts[w : w+d.size]
		child := &task.Deps{On: []string{g[0].ID}}
		sink := &task.Deps{On: make([]string, 0, d.size-2)}
		for k := 1; k < d.size-1; k++ {
			g[k].DependsOn = child
			sink.On = append(sink.On, g[k].ID)
		}
		g[d.size-1].DependsOn = sink
	}
}
