package clustertest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// Shape of TestConcurrencyLimitHoldsAcrossFailover: limitTasks durable one-shot tasks
// (limitTasksFull where TOCK_FAILOVER_ROUNDS is set, as make chaos does; make test's
// run stays a few seconds), all due at once under one concurrency key of limit
// limitLimit, submitted in batches of limitBatch. Each run works limitWorkMin..
// limitWorkMax, so runs are always in flight and always more are waiting on the key.
const (
	limitKey       = "shared-db"
	limitLimit     = 3
	limitTasks     = 1000
	limitTasksFull = 10000
	limitBatch     = 500
	limitWorkMin   = 2 * time.Millisecond
	limitWorkMax   = 5 * time.Millisecond
	// limitTTR is each task's timeout, far past its work: no run is redelivered for its
	// time to run while it works.
	limitTTR = 5 * time.Second
	// limitDrain bounds, after the last fault, every task's run and the last key's
	// delete: ~10,000 runs 3 at a time, each with a durable ACK, on a loaded 2-core
	// machine under -race; only a lost task makes the test wait it out.
	limitDrain = 180 * time.Second
)

// limitFault is one fault of the run: f is done to the leader once after of the tasks'
// runs have completed.
type limitFault struct {
	after int
	f     failoverFault
}

// TestConcurrencyLimitHoldsAcrossFailover is issue 16's concurrency-limit check, on
// separate tockd processes and a real 3-member etcd: durable one-shot tasks under one
// concurrency key with limit 3, submitted in batches through the Go client, run on
// three Workers of 16 credits each (credits are not what holds them to 3); the leader
// is SIGKILLed once a fifth of the runs have completed and revived once the next leads
// (with the full count, the next leader is also SIGSTOPped past its TTL at three
// fifths). Every handler's start and end are read from this one process's monotonic
// clock, so the sweep over them needs no slack: a handler's interval lies within the
// time its run is RUNNING at the leader that fired it (fired before the handler starts,
// its ACK sent after the handler returns). Then: at most 3 runs were in their handlers
// at any instant of the whole run, across the faults; every task completed; a task ran
// again only after runs fired by a faulted leader whose ACK never confirmed; and no
// record, progress key or run lock is left in etcd.
func TestConcurrencyLimitHoldsAcrossFailover(t *testing.T) {
	multiProcess(t)
	e, nodes := startCluster(t)
	bin, eps := BuildTockd(t), strings.Join(e.Endpoints(), ",")
	cli := etcdClient(t, e)
	leader, epoch := waitLeader(t, nodes...)
	all := clientAddrs(nodes)
	fast := client.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)
	n, faults := limitTasks, []limitFault{{limitTasks / 5, killFault(bin, eps)}}
	if os.Getenv(failoverRoundsEnv) != "" {
		n = limitTasksFull
		faults = []limitFault{{n / 5, killFault(bin, eps)}, {3 * n / 5, stallFault()}}
	}

	l := &wfLedger{runs: map[string][]*wfRun{}, parents: map[string][]string{}}
	var completed atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	defer func() { stop(); workers.Wait() }()
	ws := l.startWorkers(t, ctx, &workers, all, 3, "limited", limitWorkMin, limitWorkMax, func() { completed.Add(1) })
	c, err := client.Dial(ctx, all, fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ids := make([]string, n)
	submitted := time.Now()
	for from := 0; from < n; from += limitBatch {
		batch := make([]task.Task, min(limitBatch, n-from))
		for i := range batch {
			ids[from+i] = fmt.Sprintf("lim-%d", from+i)
			batch[i] = task.Task{ID: ids[from+i], Type: "limited", Schedule: task.After(0), Timeout: limitTTR,
				Concurrency: &task.Concurrency{Key: limitKey, Limit: limitLimit}}
		}
		res, err := c.SubmitBatch(ctx, batch, protocol.Durable)
		if err != nil {
			t.Fatalf("SUBMIT_BATCH of tasks %d..%d: %v", from, from+len(batch)-1, err)
		}
		for i, r := range res {
			if r.Err != nil || r.Status.Durability != protocol.Durable {
				t.Fatalf("task %s: %+v, want accepted durable", batch[i].ID, r)
			}
		}
	}
	submitTook := time.Since(submitted)

	faulted := map[uint64]time.Time{}
	var report []string
	for _, fl := range faults {
		tockdtest.EventuallyWithin(t, fmt.Sprintf("%d runs completed", fl.after), limitDrain, func() bool {
			return completed.Load() >= int64(fl.after)
		})
		began := time.Now()
		if err := fl.f.begin(leader); err != nil {
			t.Fatal(err)
		}
		faulted[epoch] = began
		done := completed.Load()
		next, nextEpoch := waitLeader(t, without(nodes, leader)...)
		takeover := time.Since(began)
		nodes[slices.Index(nodes, leader)] = fl.f.end(t, leader, began)
		report = append(report, fmt.Sprintf("%s %s (epoch %d) at %d completed, %v after the submit; %s leads at epoch %d %v after",
			fl.f.did, leader.Name(), epoch, done, began.Sub(submitted).Round(time.Millisecond), next.Name(), nextEpoch, takeover.Round(time.Millisecond)))
		leader, epoch = next, nextEpoch
	}

	notRun := 0
	defer func() {
		if notRun > 0 {
			t.Logf("%d of %d tasks had not run", notRun, n)
		}
	}()
	tockdtest.EventuallyWithin(t, "every task ran", limitDrain, func() bool {
		notRun = n - l.doneOf(ids)
		return notRun == 0
	})
	took := time.Since(submitted)
	waitNoTaskKeys(t, ctx, cli, "concurrency-limited tasks", limitDrain)
	fig := l.check(t, ids, faulted, true)
	most, at := l.mostAtOnce(nil)
	if most > limitLimit {
		t.Errorf("%d runs of key %q (limit %d) in their handlers at once:", most, limitKey, limitLimit)
		for _, o := range at {
			t.Errorf("  task %s run %d epoch %d: [%s, %s] completed %v", o.id, o.runID, o.epoch,
				o.start.Format(time.StampMicro), o.end.Format(time.StampMicro), o.done)
		}
	}
	// Most at once by epoch: the next leaders use the whole limit, not the default of 1.
	var byEpoch []string
	for _, e := range l.epochs() {
		m, _ := l.mostAtOnce(func(r *wfRun) bool { return r.epoch == e })
		byEpoch = append(byEpoch, fmt.Sprintf("%d at epoch %d", m, e))
	}
	cs := carryStats(ws)
	t.Logf("%d tasks under key %q limit %d, submitted in %v, all done in %v (%.0f runs/s); most runs at once %d (%s); %s; "+
		"%d runs cut short by the faults, %d tasks ran again (%d extra runs), %d completed twice; %d outcomes of faulted leaders' runs confirmed after the fault "+
		"(workers: %d carried, %d accepted, %d refused, %d abandoned)",
		n, limitKey, limitLimit, submitTook.Round(time.Millisecond), took.Round(time.Millisecond), float64(n)/took.Seconds(), most, strings.Join(byEpoch, ", "), strings.Join(report, "; "),
		fig.interrupted, fig.reran, fig.extra, fig.doneTwice, fig.carried, cs.Kept, cs.Accepted, cs.Refused, cs.Abandoned)
}

// epochs are the epochs of the recorded runs, in order.
func (l *wfLedger) epochs() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var es []uint64
	for _, rs := range l.runs {
		for _, r := range rs {
			es = append(es, r.epoch)
		}
	}
	slices.Sort(es)
	return slices.Compact(es)
}

// wfOpen is one run open at an instant of mostAtOnce's sweep.
type wfOpen struct {
	id string
	*wfRun
}

// mostAtOnce sweeps the [start, end) of every recorded run that keep keeps (nil: all)
// and returns the most runs open at one instant, and the first such set of runs. An end
// at the instant another starts counts as before it. Every run must have ended.
func (l *wfLedger) mostAtOnce(keep func(*wfRun) bool) (int, []wfOpen) {
	l.mu.Lock()
	defer l.mu.Unlock()
	type edge struct {
		at    time.Time
		delta int // +1 a start, -1 an end
		run   wfOpen
	}
	var edges []edge
	for id, rs := range l.runs {
		for _, r := range rs {
			if keep != nil && !keep(r) {
				continue
			}
			edges = append(edges, edge{r.start, 1, wfOpen{id, r}}, edge{r.end, -1, wfOpen{id, r}})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta)) })
	open := map[*wfRun]wfOpen{}
	most := 0
	var at []wfOpen
	for _, e := range edges {
		if e.delta < 0 {
			delete(open, e.run.wfRun)
			continue
		}
		open[e.run.wfRun] = e.run
		if len(open) > most {
			most = len(open)
			at = slices.Collect(maps.Values(open))
		}
	}
	slices.SortFunc(at, func(a, b wfOpen) int { return a.start.Compare(b.start) })
	return most, at
}

// TestMostAtOnce pins mostAtOnce's sweep on hand-made intervals: overlaps counted, an
// end at another's start not, and the set it returns is the first at the most.
func TestMostAtOnce(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	run := func(id uint64, from, to int) *wfRun { return &wfRun{runID: id, start: ms(from), end: ms(to)} }
	l := &wfLedger{runs: map[string][]*wfRun{
		"a": {run(1, 0, 10), run(2, 10, 20)}, // back to back: never both open
		"b": {run(3, 5, 12)},
		"c": {run(4, 11, 13)},
		"d": {run(5, 30, 40)},
	}}
	most, at := l.mostAtOnce(nil)
	var got []uint64
	for _, o := range at {
		got = append(got, o.runID)
	}
	if most != 3 || !slices.Equal(got, []uint64{3, 2, 4}) {
		t.Fatalf("mostAtOnce = %d, runs %v; want 3, runs [3 2 4] (open at 11 ms, by start)", most, got)
	}
	l.runs["e"] = []*wfRun{run(6, 12, 15)} // starts as b ends: still 3 at once
	if most, _ := l.mostAtOnce(nil); most != 3 {
		t.Fatalf("with a run starting at another's end: mostAtOnce = %d, want 3", most)
	}
	l.runs["f"] = []*wfRun{run(7, 11, 12)} // 11..12: a#2, b, c, f
	if most, _ := l.mostAtOnce(nil); most != 4 {
		t.Fatalf("with a fourth run open at 11 ms: mostAtOnce = %d, want 4", most)
	}
	if most, _ := l.mostAtOnce(func(r *wfRun) bool { return r.runID != 3 }); most != 3 {
		t.Fatalf("without run 3: mostAtOnce = %d, want 3", most)
	}
}
