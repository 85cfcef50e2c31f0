package clustertest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// Shape of TestDurableWorkflowSurvivesLeaderKill, per round: wfDiamonds diamonds
// (a -> b, c -> d), diamond i's root due i*wfStagger after the submit, so that at the
// kill some diamonds are done, some half way and some not begun; and one fan-out/fan-in
// of wfFan children between a root and a sink. Each run works wfWorkMin..wfWorkMax (one
// fan child in ten: wfSlowWork), so that runs are in flight at the kill, which comes
// once wfKillAfter of the fan's children have ended (the sink, waiting on all of them,
// is then WAITING).
const (
	wfDiamonds  = 20
	wfStagger   = 50 * time.Millisecond
	wfFan       = 200
	wfWorkMin   = 50 * time.Millisecond
	wfWorkMax   = 200 * time.Millisecond
	wfKillAfter = 50
	// wfSlowWork is the work of the fan's children 0, 10, 20, ..., longer than a
	// takeover (about 2.5 s here), so that those in a handler at the kill still run when
	// their Workers reach the next leader: they are handed in running (ADOPT), not as
	// outcomes.
	wfSlowWork = 4 * time.Second
	// wfTTR is each task's timeout, well past its work, so that no run is redelivered
	// for its time to run while it works.
	wfTTR = 6 * time.Second
	// wfDrain bounds, after the takeover, every task's run and the last key's delete:
	// generous for a loaded 2-core machine; only a lost task makes the test wait it out.
	wfDrain = 60 * time.Second
)

// wfRun is one run the test's workers executed, by the test process's clock.
type wfRun struct {
	runID, epoch uint64
	start, end   time.Time // end zero while it works
	done         bool      // the work completed (else its context ended it: the connection was lost)
	acked        time.Time // when the worker was told a server took its ACK; zero if never
	ackErr       error     // the reason its ACK was settled otherwise
}

// wfLedger records every run of every task of a round's workflows, and their edges.
type wfLedger struct {
	mu      sync.Mutex
	runs    map[string][]*wfRun // by task ID, in start order
	parents map[string][]string // a child's parents, by its ID
	// slow, if set, says which tasks' runs work slowWork instead of the workers' range;
	// set before the workers start.
	slow     func(taskID string) bool
	slowWork time.Duration
}

func (l *wfLedger) started(f *client.Fire) *wfRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &wfRun{runID: f.RunID, epoch: f.Epoch, start: time.Now()}
	l.runs[f.TaskID] = append(l.runs[f.TaskID], r)
	return r
}

func (l *wfLedger) ended(r *wfRun, done bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.end, r.done = time.Now(), done
}

func (l *wfLedger) ackAnswered(f *client.Fire, ackErr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.runs[f.TaskID] {
		if r.runID == f.RunID {
			if ackErr == nil {
				r.acked = time.Now()
			} else {
				r.ackErr = ackErr
			}
		}
	}
}

// doneOf counts the tasks among ids with a run whose work completed.
func (l *wfLedger) doneOf(ids []string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, id := range ids {
		if slices.ContainsFunc(l.runs[id], func(r *wfRun) bool { return r.done }) {
			n++
		}
	}
	return n
}

// atKill counts, among ids, the tasks with a run whose ACK was confirmed, the tasks
// with a run started whose ACK was not, and the children with no run started.
func (l *wfLedger) atKill(ids []string) (confirmed, inFlight, notStarted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		rs := l.runs[id]
		switch {
		case slices.ContainsFunc(rs, func(r *wfRun) bool { return !r.acked.IsZero() }):
			confirmed++
		case len(rs) > 0:
			inFlight++
		case len(l.parents[id]) > 0:
			notStarted++
		}
	}
	return confirmed, inFlight, notStarted
}

// wfFigures are what check counted of a round.
type wfFigures struct {
	reran, extra int // tasks run more than once, and their runs beyond the first
	interrupted  int // runs the kill cut short: their context ended with their connection
	doneTwice    int // tasks whose work completed more than once
	carried      int // runs of the killed leader whose ACK was confirmed after the kill
}

// check reports, as errors of t, every run among ids that started before the end of a
// parent's last completed run, and every run followed by another of its task, unless
// excused is set and it was fired at an epoch of faulted (a leader killed or stalled,
// by its epoch, at the time of the fault) and its ACK never confirmed; and counts.
func (l *wfLedger) check(t *testing.T, ids []string, faulted map[uint64]time.Time, excused bool) wfFigures {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var fig wfFigures
	for _, id := range ids {
		rs := l.runs[id]
		for _, p := range l.parents[id] {
			var last *wfRun
			for _, pr := range l.runs[p] {
				if pr.done && (last == nil || pr.end.After(last.end)) {
					last = pr
				}
			}
			for _, r := range rs {
				switch {
				case last == nil:
					t.Errorf("task %s: run %d (epoch %d) started at %s; its parent %s never completed",
						id, r.runID, r.epoch, r.start.Format(time.StampMicro), p)
				case r.start.Before(last.end):
					t.Errorf("task %s: run %d (epoch %d) started at %s, before its parent %s's last completed run (%d, epoch %d) ended at %s",
						id, r.runID, r.epoch, r.start.Format(time.StampMicro), p, last.runID, last.epoch, last.end.Format(time.StampMicro))
				}
			}
		}
		if len(rs) > 1 {
			fig.reran, fig.extra = fig.reran+1, fig.extra+len(rs)-1
		}
		done := 0
		for i, r := range rs {
			if r.done {
				done++
			} else {
				fig.interrupted++
			}
			faultAt, byFaulted := faulted[r.epoch]
			if byFaulted && r.acked.After(faultAt) {
				fig.carried++
			}
			if i < len(rs)-1 && (!excused || !byFaulted || !r.acked.IsZero()) {
				acked := "never"
				if !r.acked.IsZero() {
					acked = r.acked.Format(time.StampMicro)
				}
				t.Errorf("task %s ran again (run %d, epoch %d) after run %d (epoch %d, ACK confirmed: %s; the faulted leaders' epochs %v)",
					id, rs[i+1].runID, rs[i+1].epoch, r.runID, r.epoch, acked, slices.Sorted(maps.Keys(faulted)))
			}
		}
		if done > 1 {
			fig.doneTwice++
		}
	}
	return fig
}

// workflows returns a round's two SUBMIT_BATCH workflows (the diamonds, then the fan),
// their IDs prefixed with prefix, and records their edges in l.
func (l *wfLedger) workflows(prefix string) [][]task.Task {
	l.mu.Lock()
	defer l.mu.Unlock()
	one := func(id string, after time.Duration, parents ...string) task.Task {
		t := task.Task{ID: id, Type: "wf", Schedule: task.After(after), Timeout: wfTTR}
		if len(parents) > 0 {
			t.DependsOn = &task.Deps{On: parents}
			l.parents[id] = parents
		}
		return t
	}
	var diamonds []task.Task
	for i := range wfDiamonds {
		p := fmt.Sprintf("%s-d%d-", prefix, i)
		diamonds = append(diamonds, one(p+"a", time.Duration(i)*wfStagger), one(p+"b", 0, p+"a"),
			one(p+"c", 0, p+"a"), one(p+"d", 0, p+"b", p+"c"))
	}
	root := prefix + "-f-root"
	fan := []task.Task{one(root, 0)}
	var kids []string
	for j := range wfFan {
		fan = append(fan, one(fmt.Sprintf("%s-f-%d", prefix, j), 0, root))
		kids = append(kids, fan[len(fan)-1].ID)
	}
	fan = append(fan, one(prefix+"-f-sink", 0, kids...))
	return [][]task.Task{diamonds, fan}
}

// TestDurableWorkflowSurvivesLeaderKill is issue 16's durable DAG check, on separate
// tockd processes and a real 3-member etcd: durable workflows (diamonds and a fan-out/
// fan-in, each one SUBMIT_BATCH through the Go client) run on two Workers; the leader is
// SIGKILLed once some parents have ended and some children still wait, and revived once
// the next leader leads. Then every task has run; no run of a child started before the
// end of its parents' last runs (no slack, as TestExclusiveNeverOverlaps: both times are
// read from this one process's monotonic clock, and a child's release follows its
// parent's ACK, which follows the parent's handler returning); every task ran exactly
// once, those in a handler at the kill too (the Workers hand them in to the next leader,
// ADOPT, which does not run them again); and no record, progress key or run lock is left
// in etcd. Rounds:
// TOCK_FAILOVER_ROUNDS (default 1; make chaos runs 5).
func TestDurableWorkflowSurvivesLeaderKill(t *testing.T) {
	multiProcess(t)
	rounds := failoverRounds(t)
	e, nodes := startCluster(t)
	bin, eps := BuildTockd(t), strings.Join(e.Endpoints(), ",")
	cli := etcdClient(t, e)
	leader, epoch := waitLeader(t, nodes...)
	all := clientAddrs(nodes)
	fast := client.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)

	l := &wfLedger{runs: map[string][]*wfRun{}, parents: map[string][]string{},
		slow: func(id string) bool { return strings.Contains(id, "-f-") && strings.HasSuffix(id, "0") }, slowWork: wfSlowWork}
	ctx, stop := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	defer func() { stop(); workers.Wait() }()
	// Two workers: the runs in flight at the kill are spread over both, each handing its
	// own in to the next leader.
	ws := l.startWorkers(t, ctx, &workers, all, 2, "wf", wfWorkMin, wfWorkMax, nil)
	c, err := client.Dial(ctx, all, fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	for round := 1; round <= rounds; round++ {
		prefix := fmt.Sprintf("r%d", round)
		submitted := time.Now()
		wfs := l.workflows(prefix)
		for _, wf := range wfs {
			res, err := c.SubmitBatch(ctx, wf, protocol.Durable)
			if err != nil {
				t.Fatalf("round %d: SUBMIT_BATCH of %d tasks: %v", round, len(wf), err)
			}
			for i, r := range res {
				if r.Err != nil || r.Status.Durability != protocol.Durable {
					t.Fatalf("round %d: task %s: %+v, want accepted durable", round, wf[i].ID, r)
				}
			}
		}
		fan := wfs[1]
		var ids []string
		for _, wf := range wfs {
			for _, tk := range wf {
				ids = append(ids, tk.ID)
			}
		}
		kids := make([]string, 0, wfFan)
		for _, k := range fan[1 : 1+wfFan] {
			kids = append(kids, k.ID)
		}
		tockdtest.EventuallyWithin(t, fmt.Sprintf("round %d: %d of the fan's children ended", round, wfKillAfter), electBound, func() bool {
			return l.doneOf(kids) >= wfKillAfter
		})
		killAt := time.Now()
		leader.Kill()
		// The kill must land mid-run: a parent's end confirmed, a child not yet started.
		confirmed, inFlight, notStarted := l.atKill(ids)
		if confirmed == 0 || notStarted == 0 {
			t.Fatalf("round %d: the kill came at %d tasks confirmed, %d not started: not mid-run", round, confirmed, notStarted)
		}
		next, nextEpoch := waitLeader(t, without(nodes, leader)...)
		takeover := time.Since(killAt)
		nodes[slices.Index(nodes, leader)] = StartTockd(t, bin, "-etcd", eps, "-node-name", leader.Name(),
			"-addr", leader.Addr(), "-advertise-addr", leader.Addr())

		notRun := 0
		defer func() {
			if notRun > 0 {
				t.Logf("round %d: %d of %d tasks had not run", round, notRun, len(ids))
			}
		}()
		tockdtest.EventuallyWithin(t, fmt.Sprintf("round %d: every task of the workflows ran", round), wfDrain, func() bool {
			notRun = len(ids) - l.doneOf(ids)
			return notRun == 0
		})
		drained := time.Since(killAt)
		waitNoTaskKeys(t, ctx, cli, fmt.Sprintf("round %d", round), wfDrain)
		fig := l.check(t, ids, map[uint64]time.Time{epoch: killAt}, false)
		cs := carryStats(ws)
		t.Logf("round %d: %d tasks (%d diamonds, a fan of %d); %s killed at epoch %d %v after the submit, %d tasks confirmed, %d in flight, %d children not started; "+
			"%s leads at epoch %d %v after the kill; all done and etcd empty %v after it; %d runs cut short by the kill, %d tasks ran again (%d extra runs), %d completed twice; "+
			"%d outcomes of the killed leader's runs confirmed after the kill (workers so far: %d carried, %d accepted, %d refused, %d abandoned; "+
			"%d runs handed in still running, %d adopted, %d refused)",
			round, len(ids), wfDiamonds, wfFan, leader.Name(), epoch, killAt.Sub(submitted).Round(time.Millisecond), confirmed, inFlight, notStarted,
			next.Name(), nextEpoch, takeover.Round(time.Millisecond), drained.Round(time.Millisecond), fig.interrupted, fig.reran, fig.extra, fig.doneTwice,
			fig.carried, cs.Kept, cs.Accepted, cs.Refused, cs.Abandoned, cs.RunningSent, cs.RunningAdopted, cs.RunningRefused)
		leader, epoch = next, nextEpoch
	}
}

// waitNoTaskKeys waits up to bound for etcd to hold no record, progress key or run lock
// of a task, and fails t (naming what, and the first keys left) if it still does.
func waitNoTaskKeys(t *testing.T, ctx context.Context, cli *clientv3.Client, what string, bound time.Duration) {
	t.Helper()
	var left []string
	dctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := pollUntil(dctx, func() (bool, error) {
		rctx, rcancel := context.WithTimeout(dctx, CallTimeout)
		defer rcancel()
		keys, err := taskKeys(rctx, cli, store.DefaultPrefix)
		if err == nil {
			left = keys
		}
		return err == nil && len(keys) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s: %d keys of tasks left in etcd %v after the last run: %v", what, len(left), bound, left[:min(len(left), 10)])
	}
}

// carryStats sums the workers' CarryStats.
func carryStats(ws []*client.Worker) client.CarryStats {
	var cs client.CarryStats
	for _, w := range ws {
		s := w.CarryStats()
		cs.Kept, cs.Abandoned, cs.Accepted, cs.Refused = cs.Kept+s.Kept, cs.Abandoned+s.Abandoned, cs.Accepted+s.Accepted, cs.Refused+s.Refused
		cs.RunningSent, cs.RunningAdopted, cs.RunningRefused = cs.RunningSent+s.RunningSent, cs.RunningAdopted+s.RunningAdopted, cs.RunningRefused+s.RunningRefused
	}
	return cs
}

// startWorkers starts n Workers of 16 credits on addrs (clientAddrs), each run until ctx ends on a
// goroutine wg counts, that report their ACKs' answers to l and handle typ: a handler
// that records its run in l, works lo..hi (cut short when its context ends: its time to
// run passed, Run stopped, or the leader refused the run handed in after a failover) and,
// if its work completed, calls done (if not nil).
func (l *wfLedger) startWorkers(t *testing.T, ctx context.Context, wg *sync.WaitGroup, addrs string, n int, typ string, lo, hi time.Duration, done func()) []*client.Worker {
	t.Helper()
	fast := client.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)
	var ws []*client.Worker
	for range n {
		w, err := client.NewWorker(addrs, client.WithConcurrency(16), fast,
			client.WithOnAcked(func(f *client.Fire, _, ackErr error) { l.ackAnswered(f, ackErr) }))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Handle(typ, func(ctx context.Context, f *client.Fire) error {
			r := l.started(f)
			d := lo + rand.N(hi-lo)
			if l.slow != nil && l.slow(f.TaskID) {
				d = l.slowWork
			}
			work := time.NewTimer(d)
			defer work.Stop()
			select {
			case <-work.C:
				l.ended(r, true)
				if done != nil {
					done()
				}
				return nil
			case <-ctx.Done():
				l.ended(r, false)
				return ctx.Err()
			}
		}); err != nil {
			t.Fatal(err)
		}
		runWorker(t, ctx, wg, w)
		ws = append(ws, w)
	}
	return ws
}
