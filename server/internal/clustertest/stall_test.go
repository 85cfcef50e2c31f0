package clustertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// Shape of TestStalledLeaderFiresNothingAfterResume: stallTasks durable tasks come due
// between stallFirstDue and stallFirstDue+stallSpread after their submit, all within
// the stall of stallFor (twice the session TTL: etcd expires the lease and elects
// another node meanwhile).
const (
	stallTasks    = 200
	stallFirstDue = time.Second
	stallSpread   = 2 * time.Second
	stallFor      = 2 * store.DefaultSessionTTL
	// stallHeartbeat keeps the worker on the frozen node's connection through the stall
	// (the default, SessionTTL/4 with 3 misses, would have it leave after 1.5 s): the
	// worker of a node without heartbeats, or one whose deadline has not run out yet.
	stallHeartbeat = time.Minute
	// stallSettle is how long, after the old node says it no longer leads, FIREs it
	// pushed may still be on their way to the worker: slack for a loaded machine.
	stallSettle = time.Second
)

// waitFollows waits, up to electBound, until n, resumed after a stall, says that it no
// longer leads.
func waitFollows(t *testing.T, n *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), electBound)
	defer cancel()
	if err := pollUntil(ctx, func() (bool, error) {
		leads, _, err := n.IsLeader(ctx)
		return err == nil && !leads, nil
	}); err != nil {
		t.Fatalf("%s still leads (or does not answer) after its resume: %v", n.Name(), err)
	}
}

type seenFire struct {
	id       string
	epoch    uint64
	due, got time.Time
}

// TestStalledLeaderFiresNothingAfterResume: a worker connected to the leader only; tasks
// due during a stall of the leader (SIGSTOP for twice the session TTL); another node
// leads; on SIGCONT the old node must not FIRE at its old epoch, though its dispatch
// goroutines may run before the goroutine that ends its term: a leader acts only while
// its lease is certainly alive (store.Leadership.Valid, checked on every FIRE).
func TestStalledLeaderFiresNothingAfterResume(t *testing.T) {
	multiProcess(t)
	e := StartEtcd(t, 3)
	bin := BuildTockd(t)
	eps := strings.Join(e.Endpoints(), ",")
	nodes := make([]*Node, 3)
	for i := range nodes {
		nodes[i] = StartTockd(t, bin, "-etcd", eps, "-node-name", fmt.Sprintf("n%d", i+1),
			"-heartbeat", stallHeartbeat.String())
	}
	leader, epoch := waitLeader(t, nodes...)
	fast := client.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)

	var mu sync.Mutex
	var fires []seenFire
	ctx, stop := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	defer func() { stop(); workers.Wait() }()
	w, err := client.NewWorker(leader.Addr(), client.WithConcurrency(stallTasks), fast)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{}, 1)
	if err := w.Handle("stall", func(_ context.Context, f *client.Fire) error {
		mu.Lock()
		fires = append(fires, seenFire{f.TaskID, f.Epoch, f.Due, time.Now()})
		mu.Unlock()
		select {
		case first <- struct{}{}:
		default:
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	runWorker(t, ctx, &workers, w)
	c, err := client.Dial(ctx, leader.Addr(), fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The worker is subscribed once a probe runs.
	if _, err := c.Submit(ctx, task.Task{ID: "probe", Type: "stall", Schedule: task.After(0)}, protocol.Durable); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first:
	case <-time.After(electBound):
		t.Fatal("the probe never ran")
	}
	batch := make([]task.Task, stallTasks)
	for i := range batch {
		batch[i] = task.Task{ID: fmt.Sprintf("due-%d", i), Type: "stall",
			Schedule: task.After(stallFirstDue + time.Duration(i)*stallSpread/stallTasks)}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	res, err := c.SubmitBatch(sctx, batch, protocol.Durable)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("submit %s: %v", batch[i].ID, r.Err)
		}
	}
	if err := leader.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumeOnce := sync.OnceFunc(func() { _ = leader.Resume() })
	defer resumeOnce()
	next, nextEpoch := waitLeader(t, without(nodes, leader)...)
	led := time.Now()
	t.Logf("%s stopped at epoch %d; %s leads at epoch %d after %v", leader.Name(), epoch, next.Name(), nextEpoch, time.Since(paused).Round(time.Millisecond))
	time.Sleep(time.Until(paused.Add(stallFor))) // the fault itself: a stall of stallFor
	resumed := time.Now()
	resumeOnce()
	waitFollows(t, leader)
	time.Sleep(stallSettle) // FIREs it pushed before stepping down reach the worker meanwhile

	mu.Lock()
	defer mu.Unlock()
	var stale []seenFire
	for _, f := range fires {
		// Due after the stall began: the old node pushed it after its resume.
		if f.epoch == epoch && f.due.After(paused) {
			stale = append(stale, f)
		}
	}
	if len(stale) > 0 {
		f := stale[0]
		t.Fatalf("%d FIREs at the deposed epoch %d after the resume (of %d FIREs seen); first: %s due %v after the stall began, received %v after the resume, %v after %s led at epoch %d",
			len(stale), epoch, len(fires), f.id, f.due.Sub(paused).Round(time.Millisecond),
			f.got.Sub(resumed).Round(time.Millisecond), f.got.Sub(led).Round(time.Millisecond), next.Name(), nextEpoch)
	}
	t.Logf("%d FIREs seen, none at the deposed epoch %d after the resume", len(fires), epoch)
}
