package clustertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/internal/clustertest/history"
	"github.com/tock-sched/tock/server/protocol"
)

// Shape of TestChaosHistory's load: chaosClients clients and chaosWorkers workers, each
// client doing one operation every chaosPace on average; each keeps at most
// chaosRecurring recurring and chaosExclusive exclusive tasks live.
const (
	chaosClients     = 4
	chaosWorkers     = 3
	chaosConcurrency = 8
	chaosPace        = 40 * time.Millisecond
	chaosRecurring   = 2
	chaosExclusive   = 1
	// chaosPeriod is the recurring tasks' period (every, and cron on every 4th second):
	// twice history.DefaultLateness, so that a schedule restarted from a new leader's
	// clock is told apart from one made up at the takeover (recurring-kept) half the time.
	chaosPeriod = 4 * time.Second
	// chaosCallTimeout bounds one client call: past it the outcome is unknown.
	chaosCallTimeout = 5 * time.Second
	// chaosSubmitTries is how often a client sends one submit whose outcome was unknown
	// or that a non-leader refused (each try logged as its own operation).
	chaosSubmitTries = 3
	// Exclusive runs work chaosExclusiveWork (0.3-0.9 s), within their time to run.
	chaosExclusiveTTR = 3 * time.Second
)

// chaosRetry lets a durable task outlive the disconnects of a failover: a run whose
// worker's connection is lost fails retryably (PROTOCOL.md), so one attempt would send
// it to the dead-letter queue.
var chaosRetry = task.RetryPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}

// recorder is the History under construction; every method is safe for concurrent use.
type recorder struct {
	mu   sync.Mutex
	h    history.History         // guarded by mu
	runs map[*client.Fire]int    // guarded by mu: a FIRE's index in h.Runs
	ids  map[string]history.Spec // guarded by mu: every ID submitted, and its last spec
}

func newRecorder(seed uint64, prefix string) *recorder {
	return &recorder{h: history.History{Seed: seed, Prefix: prefix}, runs: map[*client.Fire]int{}, ids: map[string]history.Spec{}}
}

func (r *recorder) op(o history.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Ops = append(r.h.Ops, o)
	if o.Kind == history.Submit {
		r.ids[o.Task] = o.Spec
	}
}

func (r *recorder) fault(f history.Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Faults = append(r.h.Faults, f)
}

// fired logs a FIRE as its handler starts.
func (r *recorder) fired(worker int, f *client.Fire) {
	now := time.Now()
	v, _ := strconv.ParseUint(strings.TrimPrefix(string(f.Payload), "v"), 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[f] = len(r.h.Runs)
	r.h.Runs = append(r.h.Runs, history.Run{Worker: worker, Task: f.TaskID, Version: v, RunID: f.RunID, Epoch: f.Epoch,
		Attempt: f.Attempt, Due: f.Due, Received: now})
}

// returned logs a handler's return.
func (r *recorder) returned(f *client.Fire, err error) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.runs[f]; ok {
		r.h.Runs[i].Returned, r.h.Runs[i].Failed = now, err != nil
	}
}

// answered logs the answer to a run's ACK or NACK (Options.OnAcked).
func (r *recorder) answered(f *client.Fire, _, ackErr error) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.runs[f]; ok {
		run := &r.h.Runs[i]
		run.Answered, run.AckOK, run.AckAt = true, ackErr == nil, now
		if ackErr != nil {
			run.AckErr = ackErr.Error()
		}
	}
}

// recurringIDs returns every ID submitted with a recurring spec.
func (r *recorder) recurringIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, sp := range r.ids {
		if sp.Recurring() {
			ids = append(ids, id)
		}
	}
	return ids
}

// outcome classifies a call's error for the log.
func outcome(err error) (history.Outcome, string) {
	if err == nil {
		return history.OK, ""
	}
	var perr *protocol.Error
	if errors.As(err, &perr) {
		code := perr.Code.String()
		return history.OutcomeOfCode(code), code
	}
	return history.Unknown, err.Error()
}

// startWorkers runs chaosWorkers Workers against addrs, logging every FIRE, return and
// answer in rec. The returned func stops them and waits for every handler.
func startWorkers(addrs string, rec *recorder) (stop func() error, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, chaosWorkers)
	for i := range chaosWorkers {
		w, err := client.NewWorker(addrs, client.WithConcurrency(chaosConcurrency), chaosBackoff,
			client.WithOnAcked(rec.answered))
		if err != nil {
			cancel()
			return nil, err
		}
		// Each handler logs its FIRE first and its return last; the work between is
		// uninterruptible (it ignores the connection's loss) but ends within the TTR.
		handle := func(work func(f *client.Fire) error) client.HandlerFunc {
			return func(_ context.Context, f *client.Fire) error {
				rec.fired(i, f)
				err := work(f)
				rec.returned(f, err)
				return err
			}
		}
		for typ, work := range map[string]func(f *client.Fire) error{
			"oneshot": func(f *client.Fire) error {
				time.Sleep(time.Duration(f.RunID%20) * time.Millisecond)
				if f.Attempt == 1 && hash(f.TaskID)%20 == 0 {
					return errors.New("chaos: a first attempt that fails (retried)")
				}
				return nil
			},
			"recur": func(*client.Fire) error { return nil },
			"excl": func(f *client.Fire) error {
				time.Sleep(min(time.Duration(300+f.RunID%600)*time.Millisecond, f.TTR/2))
				return nil
			},
		} {
			if err := w.Handle(typ, handle(work)); err != nil {
				cancel()
				return nil, err
			}
		}
		wg.Go(func() {
			if err := w.Run(ctx); !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("worker %d: %w", i, err)
			}
		})
	}
	return func() error {
		cancel()
		wg.Wait()
		close(errs)
		return <-errs
	}, nil
}

func hash(s string) uint32 {
	h := uint32(2166136261)
	for i := range len(s) {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// chaosBackoff: redial quickly, so that what is measured after a failover is the
// cluster's, not a client's backoff.
var chaosBackoff = client.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)

// loadClient is one client's goroutine: seeded choices of what to do next.
type loadClient struct {
	n    int
	c    *client.Client
	rng  *rand.Rand
	rec  *recorder
	seq  int
	live map[string]bool // recurring IDs submitted and not yet cancelled
	excl map[string]bool // exclusive IDs likewise
	// cancels are one-shot IDs to cancel at a time: the cancel races their run.
	cancels []pendingCancel
}

type pendingCancel struct {
	id string
	at time.Time
}

// call runs one logged operation.
func (lc *loadClient) call(kind history.OpKind, id string, tk task.Task, sp history.Spec) history.Op {
	op := history.Op{Client: lc.n, Kind: kind, Task: id, Version: tk.Version, Spec: sp, Start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), chaosCallTimeout)
	var st protocol.TaskStatus
	var err error
	if kind == history.Submit {
		st, err = lc.c.Submit(ctx, tk, protocol.Durable)
	} else {
		st, err = lc.c.Cancel(ctx, "", id)
	}
	cancel()
	op.End = time.Now()
	op.Outcome, op.Code = outcome(err)
	if err == nil {
		op.ReplyVersion, op.Durable = st.Version, st.Durability == protocol.Durable
		if st.NextRun != 0 {
			op.NextRun = time.Unix(0, st.NextRun)
		}
	}
	lc.rec.op(op)
	return op
}

// submit sends tk, again while its outcome is unknown or a non-leader refused it, up
// to chaosSubmitTries times; it reports whether one was confirmed.
func (lc *loadClient) submit(tk task.Task, sp history.Spec) bool {
	tk.Payload = []byte("v" + strconv.FormatUint(tk.Version, 10))
	for range chaosSubmitTries {
		op := lc.call(history.Submit, tk.ID, tk, sp)
		switch {
		case op.Outcome == history.OK:
			return true
		case op.Outcome == history.Refused && op.Code != "NOT_LEADER":
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// cancel cancels id until the answer is known (OK or refused), or tries run out.
func (lc *loadClient) cancel(id string, tries int) {
	for range tries {
		if op := lc.call(history.Cancel, id, task.Task{}, history.Spec{}); op.Outcome != history.Unknown && op.Code != "NOT_LEADER" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (lc *loadClient) id(kind string) string {
	lc.seq++
	return fmt.Sprintf("c%d-%s%d", lc.n, kind, lc.seq)
}

// step does one seeded operation.
func (lc *loadClient) step() {
	now := time.Now()
	if len(lc.cancels) > 0 && !lc.cancels[0].at.After(now) {
		id := lc.cancels[0].id
		lc.cancels = lc.cancels[1:]
		lc.cancel(id, 1)
		return
	}
	switch p := lc.rng.IntN(100); {
	case p < 55: // a one-shot, due within 0.8 s; one in five gets a racing cancel
		id := lc.id("o")
		delay := time.Duration(lc.rng.IntN(800)) * time.Millisecond
		cancelIt := lc.rng.IntN(5) == 0
		if cancelIt {
			delay += time.Second
		}
		sp := history.Spec{Schedule: task.After(delay)}
		if lc.submit(task.Task{ID: id, Type: "oneshot", Schedule: sp.Schedule, Retry: chaosRetry}, sp) && cancelIt {
			lc.cancels = append(lc.cancels, pendingCancel{id, now.Add(time.Duration(lc.rng.IntN(1500)) * time.Millisecond)})
		}
	case p < 70: // a versioned replace: v1 due in 1.5-3 s, replaced by v2 soon after
		id := lc.id("v")
		sp1 := history.Spec{Schedule: task.After(1500*time.Millisecond + time.Duration(lc.rng.IntN(1500))*time.Millisecond)}
		lc.submit(task.Task{ID: id, Type: "oneshot", Schedule: sp1.Schedule, Retry: chaosRetry, Version: 1}, sp1)
		time.Sleep(time.Duration(100+lc.rng.IntN(700)) * time.Millisecond)
		sp2 := history.Spec{Schedule: task.After(time.Duration(lc.rng.IntN(300)) * time.Millisecond)}
		lc.submit(task.Task{ID: id, Type: "oneshot", Schedule: sp2.Schedule, Retry: chaosRetry, Version: 2}, sp2)
	case p < 80 && len(lc.live) < chaosRecurring: // a recurring task, every or cron, either policy
		id := lc.id("r")
		sp := history.Spec{Schedule: task.Every(chaosPeriod), Misfire: task.MisfirePolicy(lc.rng.IntN(2))}
		if lc.rng.IntN(2) == 0 {
			sp.Schedule = task.Cron(fmt.Sprintf("%d/%d * * * * *", lc.rng.IntN(4), int(chaosPeriod/time.Second)), nil)
		}
		lc.live[id] = true
		lc.submit(task.Task{ID: id, Type: "recur", Schedule: sp.Schedule, Misfire: sp.Misfire, Retry: chaosRetry}, sp)
	case p < 85 && len(lc.excl) < chaosExclusive: // an exclusive recurring task
		id := lc.id("x")
		sp := history.Spec{Schedule: task.EveryAfterDone(200 * time.Millisecond), Exclusive: true}
		lc.excl[id] = true
		lc.submit(task.Task{ID: id, Type: "excl", Schedule: sp.Schedule, Exclusive: true, Timeout: chaosExclusiveTTR, Retry: chaosRetry}, sp)
	case p < 88 && len(lc.live)+len(lc.excl) > 0: // end a recurring or exclusive task (the oldest)
		m := lc.live
		if len(m) == 0 {
			m = lc.excl
		}
		id := slices.Sorted(maps.Keys(m))[0]
		delete(m, id)
		lc.cancel(id, 1)
	}
}

// run steps until stop is closed.
func (lc *loadClient) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		lc.step()
		time.Sleep(time.Duration(lc.rng.Int64N(int64(2 * chaosPace))))
	}
}
