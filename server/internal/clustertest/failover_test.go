package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// failoverRoundsEnv sets how many times TestDurableFailover and
// TestDurableWorkflowSurvivesLeaderKill kill the leader (and TestDurableFailoverStall
// stalls it): 1 in make test, 5 in make chaos.
const failoverRoundsEnv = "TOCK_FAILOVER_ROUNDS"

// Load shape of TestDurableFailover: batches of durable one-shot tasks due within
// failoverSpread, submitted for failoverLoad before each fault and after the takeover.
const (
	failoverBatch  = 20
	failoverSpread = 200 * time.Millisecond
	failoverLoad   = 700 * time.Millisecond
	// failoverDrain bounds the wait, after the load, for every acknowledged task to run:
	// generous for a loaded 2-core machine; only a lost task makes the test wait it out.
	failoverDrain = 60 * time.Second
)

// runRecord is one run a test worker executed.
type runRecord struct {
	runID   uint64
	epoch   uint64
	started time.Time
	acked   time.Time // when the server confirmed the ACK; zero if it never did
}

// ledger records every run of every task, and the tasks the cluster acknowledged.
type ledger struct {
	mu       sync.Mutex
	runs     map[string][]*runRecord
	accepted map[string]bool
	accepts  []time.Time          // when each batch with an accepted task was answered, in order
	epochs   map[uint64]time.Time // first run seen at each epoch
}

func newLedger() *ledger {
	return &ledger{runs: map[string][]*runRecord{}, accepted: map[string]bool{}, epochs: map[uint64]time.Time{}}
}

func (l *ledger) ran(f *client.Fire) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.runs[f.TaskID] = append(l.runs[f.TaskID], &runRecord{runID: f.RunID, epoch: f.Epoch, started: now})
	if _, ok := l.epochs[f.Epoch]; !ok {
		l.epochs[f.Epoch] = now
	}
}

func (l *ledger) ackAnswered(f *client.Fire, ackErr error) {
	if ackErr != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.runs[f.TaskID] {
		if r.runID == f.RunID {
			r.acked = time.Now()
		}
	}
}

// firstRunAfter is when a run at an epoch above epoch was first seen; zero if none yet.
func (l *ledger) firstRunAfter(epoch uint64) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for e, at := range l.epochs {
		if e > epoch && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// longestWait is the longest time within [from, to] that the producers went without an
// accepted batch, from counting as an answer: how long submits stalled across a fault.
func (l *ledger) longestWait(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var most time.Duration
	last := from
	for _, at := range l.accepts {
		if at.Before(from) || at.After(to) {
			continue
		}
		most, last = max(most, at.Sub(last)), at
	}
	return max(most, to.Sub(last))
}

// producer submits durable batches through c until stop is closed; a batch whose call
// failed (a connection lost mid-failover) is not acknowledged, so not counted.
func producer(c *client.Client, l *ledger, prefix string, stop <-chan struct{}, done chan<- int) {
	n := 0
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			done <- n
			return
		default:
		}
		batch := make([]task.Task, failoverBatch)
		for i := range batch {
			batch[i] = task.Task{ID: fmt.Sprintf("%s-%d-%d", prefix, seq, i), Type: "durable",
				Schedule: task.After(rand.N(failoverSpread))}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := c.SubmitBatch(ctx, batch, protocol.Durable)
		cancel()
		if err != nil {
			continue
		}
		answered := time.Now()
		l.mu.Lock()
		took := n
		for i, r := range res {
			if r.Err == nil && r.Status.Durability == protocol.Durable {
				l.accepted[batch[i].ID] = true
				n++
			}
		}
		if n > took {
			l.accepts = append(l.accepts, answered)
		}
		l.mu.Unlock()
	}
}

// failoverFault is what a round of durableFailover does to the leader: begin starts the
// fault; end, called once a run at the next epoch was seen, brings the node back (as a
// follower) and returns the node that now stands in its place among the three.
type failoverFault struct {
	did   string // for the log: "killed", "stalled"
	begin func(n *Node) error
	end   func(t *testing.T, n *Node, began time.Time) *Node
}

// killFault SIGKILLs the leader and starts it again, at its address, once the next
// leader dispatches.
func killFault(bin, eps string) failoverFault {
	return failoverFault{did: "killed",
		begin: func(n *Node) error { n.Kill(); return nil },
		end: func(t *testing.T, n *Node, _ time.Time) *Node {
			return StartTockd(t, bin, "-etcd", eps, "-node-name", n.Name(), "-addr", n.Addr(), "-advertise-addr", n.Addr())
		}}
}

// stallFault SIGSTOPs the leader for stallFor (twice the session TTL: etcd expires its
// lease and elects another node meanwhile), then SIGCONTs it and waits until it says it
// no longer leads. The frozen process keeps its sockets open: its clients and workers
// learn of the stall only from the silence (the heartbeat deadline, a quarter of the
// session TTL times protocol.HeartbeatMisses).
func stallFault() failoverFault {
	return failoverFault{did: "stalled",
		begin: func(n *Node) error { return n.Pause() },
		end: func(t *testing.T, n *Node, began time.Time) *Node {
			time.Sleep(time.Until(began.Add(stallFor)))
			if err := n.Resume(); err != nil {
				t.Fatal(err)
			}
			waitFollows(t, n)
			return n
		}}
}

// TestDurableFailover is issue 5's failover check, on separate OS processes and a real
// 3-member etcd: under steady durable submits and fires, SIGKILL the leading tockd; a new
// leader dispatches within the session TTL + 1 s; every durable task the cluster
// acknowledged runs; a task runs again only if an earlier run of it was in flight at the
// kill (its ACK never confirmed), never after an ACK the cluster confirmed. Rounds: the
// TOCK_FAILOVER_ROUNDS environment variable (default 1; make chaos runs 5).
func TestDurableFailover(t *testing.T) {
	multiProcess(t)
	durableFailover(t, killFault)
}

// TestDurableFailoverStall is TestDurableFailover with the leader SIGSTOPped past its
// session TTL instead of killed (issue 11, defect 9): the worker and the client, connected
// to the frozen node, must leave it on their own (heartbeats) and find the next leader,
// so that the first run at the new epoch comes within the session TTL + 1 s of the
// stop, not at the SIGCONT; the resumed node FIREs nothing more (no run after a
// confirmed ACK) and follows.
func TestDurableFailoverStall(t *testing.T) {
	multiProcess(t)
	durableFailover(t, func(string, string) failoverFault { return stallFault() })
}

// failoverRounds is TOCK_FAILOVER_ROUNDS, or 1 where it is unset.
func failoverRounds(t *testing.T) int {
	t.Helper()
	v := os.Getenv(failoverRoundsEnv)
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", failoverRoundsEnv, v)
	}
	return n
}

// durableFailover runs the rounds of TestDurableFailover with the fault fault makes
// (from the tockd binary and the etcd endpoints).
func durableFailover(t *testing.T, fault func(bin, eps string) failoverFault) {
	rounds := failoverRounds(t)
	e, nodes := startCluster(t)
	f := fault(BuildTockd(t), strings.Join(e.Endpoints(), ","))
	leader, epoch := waitLeader(t, nodes...)
	all := clientAddrs(nodes)
	// Redial quickly: the takeover is measured at the worker, whose backoff must not be
	// what it measures.
	fast := client.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)

	l := newLedger()
	w, err := client.NewWorker(all, client.WithConcurrency(32), fast,
		client.WithOnAcked(func(f *client.Fire, _, ackErr error) { l.ackAnswered(f, ackErr) }))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("durable", func(ctx context.Context, f *client.Fire) error { l.ran(f); return nil }); err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	defer func() {
		stopWorker()
		if err := <-workerDone; !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
	}()
	c, err := client.Dial(context.Background(), all, fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var takeovers, dispatches []time.Duration
	submitted := 0
	for round := 1; round <= rounds; round++ {
		stop := make(chan struct{})
		done := make(chan int, 1)
		go producer(c, l, fmt.Sprintf("r%d", round), stop, done)
		time.Sleep(failoverLoad) // load before the fault (the point is to fault under load)
		began := time.Now()
		if err := f.begin(leader); err != nil {
			t.Fatal(err)
		}
		live := without(nodes, leader)
		next, nextEpoch := waitLeader(t, live...)
		takeover := time.Since(began)
		// Dispatch at the new epoch, seen by the worker (tasks are always due: the
		// producer keeps submitting through the failover).
		var dispatch time.Duration
		tockdtest.EventuallyWithin(t, fmt.Sprintf("round %d: a run at an epoch above %d after the fault", round, epoch), electBound, func() bool {
			at := l.firstRunAfter(epoch)
			dispatch = at.Sub(began)
			return !at.IsZero()
		})
		// The node comes back as a follower, so every round has three nodes.
		nodes[slices.Index(nodes, leader)] = f.end(t, leader, began)
		time.Sleep(failoverLoad) // load after the takeover
		close(stop)
		submitted += <-done
		waited := l.longestWait(began, time.Now())
		t.Logf("round %d: %s %s (epoch %d); %s leads at epoch %d after %v, first dispatch at the new epoch %v after the fault; submits waited at most %v",
			round, f.did, leader.Name(), epoch, next.Name(), nextEpoch, takeover.Round(time.Millisecond), dispatch.Round(time.Millisecond), waited.Round(time.Millisecond))
		if dispatch > timingBound(failoverGoal) {
			t.Errorf("round %d: first dispatch %v after the fault, goal %v (session TTL + 1 s; bound here %v)", round, dispatch, failoverGoal, timingBound(failoverGoal))
		}
		takeovers, dispatches = append(takeovers, takeover), append(dispatches, dispatch)
		leader, epoch = next, nextEpoch
	}

	// Every acknowledged task runs.
	missing := 0
	defer func() {
		if missing > 0 {
			t.Logf("%d of %d acknowledged durable tasks had not run", missing, submitted)
		}
	}()
	tockdtest.EventuallyWithin(t, "every acknowledged durable task runs after the last fault", failoverDrain, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		missing = 0
		for id := range l.accepted {
			if len(l.runs[id]) == 0 {
				missing++
			}
		}
		return missing == 0
	})

	// Duplicates: allowed only after a run whose ACK was never confirmed.
	l.mu.Lock()
	defer l.mu.Unlock()
	runs, dupTasks, extraRuns := 0, 0, 0
	for id, rs := range l.runs {
		runs += len(rs)
		if len(rs) > 1 {
			dupTasks++
			extraRuns += len(rs) - 1
		}
		for _, r := range rs {
			if r.acked.IsZero() {
				continue
			}
			for _, later := range rs {
				if later.started.After(r.acked) {
					t.Errorf("task %s ran again (run %d, epoch %d) after run %d's ACK was confirmed (epoch %d)",
						id, later.runID, later.epoch, r.runID, r.epoch)
				}
			}
		}
	}
	t.Logf("%d rounds, leader %s: %d durable tasks acknowledged, %d runs, 0 lost; %d tasks ran more than once (%d extra runs), each after a run in flight at a fault; takeovers %v, first dispatches %v",
		rounds, f.did, submitted, runs, dupTasks, extraRuns, takeovers, dispatches)
}
