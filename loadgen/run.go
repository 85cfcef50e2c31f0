package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
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
	rec := NewRecorder(c.tasks)
	runTag := uint64(clk.t0.UnixNano()) // tells this run's tasks from another's left on a server
	var foreign, acked atomic.Int64
	ack := func() { acked.Add(1) }
	handle := func(p []byte) {
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
	}

	var (
		submit  submitter
		cleanup func()
		err     error
		notes   []string
	)
	switch c.target {
	case "core":
		submit, cleanup, err = coreTarget(handle, ack)
	case "server":
		// The Worker reports each ACK's answer: a confirmed one means the task must
		// never run again.
		acked := func(p []byte, confirmed bool) {
			if run, i, _, ok := decodePayload(p); ok && run == runTag {
				rec.Acked(i, confirmed)
			}
		}
		submit, cleanup, err = serverTarget(ctx, c, handle, ack, acked)
		if err == nil && c.submitRetry > 0 {
			submit = retrying(submit, rec, c.submitRetry)
		}
	case "beanstalkd":
		var bt *beanstalkdTarget
		bt, err = newBeanstalkdTarget(ctx, c, clk, strconv.FormatUint(runTag, 36), handle, ack)
		if err == nil {
			submit, cleanup, notes = bt.submit, bt.stop, bt.notes()
		}
	default:
		err = fmt.Errorf("unknown target %q", c.target)
	}
	if err != nil {
		return nil, err
	}
	defer cleanup()

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
		cl := c.cluster
		if cl == nil {
			lc, err := newLocalCluster(c.clusterDir, splitAddrs(c.addr), c.chaosRevive)
			if err != nil {
				close(stopProgress)
				<-progressDone
				return nil, err
			}
			defer lc.Close()
			cl = lc
		}
		chaos = &chaosRun{spec: c.chaosSpec, cl: cl, rec: rec, clk: clk, start: start, maxKills: c.chaosKills, log: c.progress}
		chaos.begin(ctx)
	}

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
		lo, hi := p*c.tasks/c.producers, (p+1)*c.tasks/c.producers
		wg.Add(1)
		go func() {
			defer wg.Done()
			produce(ctx, c, clk, lo, hi, base, runTag, tag, submit, rec, &submitted, &lastDue, noteErr)
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
	var unconfirmed int64
	if c.target == "server" && c.durable && !timedOut {
		unconfirmed = waitConfirmed(ctx, rec, c.grace)
	}
	rec.Freeze()
	close(stopProgress)
	<-progressDone

	res := &result{
		Target:     c.target,
		Durable:    c.durable,
		Submitted:  submitted.Load(),
		SubmitSecs: time.Duration(submitEnd - start).Seconds(),
		RunSecs:    time.Duration(end - start).Seconds(),
		TimedOut:   timedOut,
		Foreign:    foreign.Load(),
		Counts:     rec.Summary(),
		Throughput: ticks,
		Notes:      notes,
	}
	res.Unconfirmed = unconfirmed
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
	if profileDone != nil {
		if err := <-profileDone; err != nil {
			res.ServerProfileErr = err.Error()
		} else {
			res.ServerProfile = c.serverProfile
		}
	}
	return res, nil
}

// produce submits tasks [lo, hi) in batches of c.batch, paced to its share of c.rate.
func produce(ctx context.Context, c config, clk clock, lo, hi int, base int64, runTag uint64, tag string,
	submit submitter, rec *Recorder, submitted, lastDue *atomic.Int64, noteErr func(error)) {
	n := int64(c.tasks)
	perProducer := c.rate * float64(hi-lo) / float64(c.tasks) // this producer's share
	pstart := clk.now()
	slab := make([]byte, c.batch*c.payload)
	ts := make([]task.Task, 0, c.batch)
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
			// Do not run ahead of the rate by more than 10 ms worth of tasks.
			end = min(end, i+max(1, int(perProducer/100)))
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
				ID:       tag + "-" + strconv.Itoa(k),
				Type:     taskType,
				Payload:  p,
				Schedule: task.At(time.Unix(0, due)),
				Retry:    retry,
			})
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

// coreTarget starts an in-process task engine whose loadgen handler calls handle.
func coreTarget(handle func([]byte), ack func()) (submitter, func(), error) {
	// Finished tasks are dropped at once (Retention < 0), as in the engine benchmark:
	// loadgen never reads one back, and a service running a million tasks a second
	// would not keep a million finished records queryable either.
	e, err := task.New(task.WithRetention(-1))
	if err != nil {
		return nil, nil, err
	}
	err = e.Register(taskType, func(_ context.Context, r *task.Run) error {
		handle(r.Task.Payload)
		ack() // the engine records the success as this returns
		return nil
	})
	if err != nil {
		_ = e.Close(context.Background())
		return nil, nil, err
	}
	submit := func(_ context.Context, _ int, ts []task.Task) ([]error, error) {
		errs := make([]error, len(ts))
		for k := range ts {
			_, errs[k] = e.Submit(ts[k])
		}
		return errs, nil
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	}
	return submit, stop, nil
}

// serverTarget starts c.workers Workers against the tockd at c.addr and dials one Client
// per producer; submits go round-robin over the clients by producer index. acked is
// told each ACK's answer (confirmed or not) with the run's payload.
func serverTarget(ctx context.Context, c config, handle func([]byte), ack func(), acked func(p []byte, confirmed bool)) (submitter, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var clients []*client.Client
	stop := func() {
		cancel()
		wg.Wait()
		for _, cl := range clients {
			_ = cl.Close()
		}
	}
	var backoff client.Option // client defaults
	if c.chaos != "" {
		backoff = client.WithReconnectBackoff(chaosReconnectInitial, chaosReconnectMax)
	}
	onAcked := client.WithOnAcked(func(f *client.Fire, result, ackErr error) {
		if result == nil {
			acked(f.Payload, ackErr == nil)
		}
	})
	for range c.workers {
		w, err := client.NewWorker(c.addr, client.WithConcurrency(c.concurrency), client.WithClientName("loadgen-worker"), onAcked, backoff)
		if err == nil {
			err = w.Handle(taskType, func(_ context.Context, f *client.Fire) error {
				handle(f.Payload)
				ack() // the Worker sends the ACK as this returns
				return nil
			})
		}
		if err != nil {
			stop()
			return nil, nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(wctx); err != nil && !errors.Is(err, context.Canceled) {
				fmt.Fprintln(os.Stderr, "loadgen: worker:", err) // a permanent error: the runs will be lost
			}
		}()
	}
	for range c.producers {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		cl, err := client.Dial(dctx, c.addr, client.WithClientName("loadgen"), backoff)
		dcancel()
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("dial %s: %w", c.addr, err)
		}
		clients = append(clients, cl)
	}
	d := protocol.Ephemeral
	if c.durable {
		d = protocol.Durable
	}
	submit := func(ctx context.Context, lo int, ts []task.Task) ([]error, error) {
		cl := clients[producerOf(c, lo)]
		if len(ts) == 1 && c.batch == 1 {
			_, err := cl.Submit(ctx, ts[0], d)
			return []error{err}, nil
		}
		items, err := cl.SubmitBatch(ctx, ts, d)
		if err != nil {
			return nil, err
		}
		errs := make([]error, len(items))
		for k, it := range items {
			errs[k] = it.Err
		}
		return errs, nil
	}
	return submit, stop, nil
}

// producerOf returns the producer that submits task lo: producer p submits tasks from
// p*n/P on.
func producerOf(c config, lo int) int {
	p := lo * c.producers / c.tasks
	for p+1 < c.producers && (p+1)*c.tasks/c.producers <= lo {
		p++
	}
	for p > 0 && p*c.tasks/c.producers > lo {
		p--
	}
	return p
}

// waitConfirmed waits, after every task of a durable run has run, until every one has a
// confirmed ACK: a task whose ACK was unconfirmed when leadership moved may run again
// under the next leader, and the workers must still be there for it, or the cluster
// keeps its record (it still owes it a run) after loadgen is gone. A task whose end was
// recorded but whose answer was lost never gets a confirmation, so the wait gives up
// after a grace with no new confirmation (or when ctx ends) and returns the tasks still
// unconfirmed.
func waitConfirmed(ctx context.Context, rec *Recorder, grace time.Duration) int64 {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	last, _ := rec.Confirmed()
	quiet := time.Now()
	for {
		got, want := rec.Confirmed()
		if got >= want {
			return 0
		}
		if got != last {
			last, quiet = got, time.Now()
		} else if time.Since(quiet) > grace {
			return want - got
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return want - got
		}
	}
}
