package clustertest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// Bounds of these tests. electBound is generous (a first election is one campaign,
// ~tens of ms) because a loaded 2-core machine can stall processes for seconds; it only
// fires when something is stuck. failoverGoal is the product goal itself (DESIGN.md:
// a new leader within the session TTL + 1 s of the old one's death).
const (
	electBound   = 20 * time.Second
	failoverGoal = store.DefaultSessionTTL + time.Second
	// timingSlack is added to the timing goals in make test's short run, which shares
	// the machine with every other package's tests: measured takeovers here are 1.4-2.5 s
	// against the 3 s goal, and a stall of a second would fail a correct run. make chaos
	// (TOCK_FAILOVER_ROUNDS set) asserts the goals themselves. Safety (never two
	// dispatchers, nothing lost, no run after a confirmed ACK) has no slack anywhere.
	timingSlack = 5 * time.Second
)

// timingBound is goal under make chaos, and goal plus timingSlack otherwise.
func timingBound(goal time.Duration) time.Duration {
	if os.Getenv(failoverRoundsEnv) != "" {
		return goal
	}
	return goal + timingSlack
}

// startCluster starts 3 etcd members and 3 tockd nodes (n1..n3) using all of them.
func startCluster(t *testing.T) (*Etcd, []*Node) {
	t.Helper()
	e := StartEtcd(t, 3)
	bin := BuildTockd(t)
	eps := strings.Join(e.Endpoints(), ",")
	nodes := make([]*Node, 3)
	for i := range nodes {
		nodes[i] = StartTockd(t, bin, "-etcd", eps, "-node-name", fmt.Sprintf("n%d", i+1))
	}
	return e, nodes
}

// clientAddrs is nodes' client addresses, comma-separated, as client.Dial and
// client.NewWorker take them (a node started again at its address keeps its place).
func clientAddrs(nodes []*Node) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return strings.Join(addrs, ",")
}

// etcdClient is a client of e's members, closed when t ends.
func etcdClient(t *testing.T, e *Etcd) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func without(nodes []*Node, gone *Node) []*Node {
	var rest []*Node
	for _, n := range nodes {
		if n != gone {
			rest = append(rest, n)
		}
	}
	return rest
}

func waitLeader(t *testing.T, nodes ...*Node) (*Node, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), electBound)
	defer cancel()
	l, err := WaitLeader(ctx, nodes...)
	if err != nil {
		t.Fatal(err)
	}
	leads, epoch, err := l.IsLeader(ctx)
	if err != nil || !leads {
		t.Fatalf("%s: leads=%v, %v right after WaitLeader chose it", l.Name(), leads, err)
	}
	return l, epoch
}

// TestFailoverAfterLeaderKill: exactly one of three nodes leads; SIGKILL the leader and
// another leads within the goal, twice, with a higher epoch each time.
func TestFailoverAfterLeaderKill(t *testing.T) {
	multiProcess(t)
	_, nodes := startCluster(t)
	leader, epoch := waitLeader(t, nodes...)
	t.Logf("first leader %s at epoch %d", leader.Name(), epoch)

	live := nodes
	for round := 1; round <= 2; round++ {
		live = without(live, leader)
		killed := time.Now()
		leader.Kill()
		next, nextEpoch := waitLeader(t, live...)
		took := time.Since(killed)
		t.Logf("round %d: killed %s; %s leads at epoch %d after %v (goal %v)", round, leader.Name(), next.Name(), nextEpoch, took.Round(time.Millisecond), failoverGoal)
		if took > timingBound(failoverGoal) {
			t.Errorf("round %d: takeover took %v, goal %v (bound here %v)", round, took, failoverGoal, timingBound(failoverGoal))
		}
		if nextEpoch <= epoch {
			t.Errorf("round %d: new epoch %d not above the dead leader's %d", round, nextEpoch, epoch)
		}
		leader, epoch = next, nextEpoch
	}
}

// TestLeaderSurvivesEtcdMemberStop: stopping etcd's raft leader member (the harshest
// single member to lose) neither moves tockd's leadership nor stops durable submits,
// over a window longer than the session TTL (a lost session would show within it).
func TestLeaderSurvivesEtcdMemberStop(t *testing.T) {
	multiProcess(t)
	e, nodes := startCluster(t)
	leader, epoch := waitLeader(t, nodes...)

	ctx, cancel := context.WithTimeout(context.Background(), electBound)
	defer cancel()
	var member int
	if err := pollUntil(ctx, func() (bool, error) {
		var err error
		member, err = e.Leader(ctx)
		return member >= 0, err
	}); err != nil {
		t.Fatalf("finding etcd's leader: %v", err)
	}
	c, err := client.Dial(ctx, leader.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	e.Stop(member)
	t.Logf("stopped etcd member %d (raft leader); tockd leader %s at epoch %d", member, leader.Name(), epoch)
	window := time.Now().Add(store.DefaultSessionTTL + time.Second)
	submits := 0
	for i := 0; time.Now().Before(window) || submits < 10; i++ {
		tk := task.Task{ID: fmt.Sprint("during-stop-", i), Type: "job", Schedule: task.After(time.Hour)}
		if _, err := c.Submit(ctx, tk, protocol.Durable); err != nil {
			t.Fatalf("durable submit %d after stopping etcd member %d: %v", i, member, err)
		}
		submits++
		leads, now, err := leader.IsLeader(ctx)
		if err != nil || !leads || now != epoch {
			t.Fatalf("after %d submits: %s leads=%v epoch %d (was %d), err %v", submits, leader.Name(), leads, now, epoch, err)
		}
	}
	if l, _ := waitLeader(t, nodes...); l != leader {
		t.Fatalf("%s leads, want %s still", l.Name(), leader.Name())
	}
	t.Logf("%d durable submits while etcd member %d was down; %s led throughout", submits, member, leader.Name())

	e.Start(member)
	if err := e.WaitHealthy(ctx); err != nil {
		t.Fatalf("etcd after restarting member %d: %v", member, err)
	}
	if _, err := c.Submit(ctx, task.Task{ID: "after-restart", Type: "job", Schedule: task.After(time.Hour)}, protocol.Durable); err != nil {
		t.Fatalf("durable submit after restarting member %d: %v", member, err)
	}
}

// TestLeaderCutOffFromEtcd: the leader reaches etcd only through proxies; blackholing
// them makes it stop leading and another node lead (never both), within the goal; once
// restored it follows.
func TestLeaderCutOffFromEtcd(t *testing.T) {
	multiProcess(t)
	e := StartEtcd(t, 3)
	bin := BuildTockd(t)
	var proxied []string
	var proxies []*Proxy
	for _, ep := range e.Endpoints() {
		p := StartProxy(t, strings.TrimPrefix(ep, "http://"))
		proxies = append(proxies, p)
		proxied = append(proxied, "http://"+p.Addr())
	}
	n1 := StartTockd(t, bin, "-etcd", strings.Join(proxied, ","), "-node-name", "n1")
	if l, _ := waitLeader(t, n1); l != n1 { // alone, it leads
		t.Fatalf("%s leads", l.Name())
	}
	eps := strings.Join(e.Endpoints(), ",")
	nodes := []*Node{n1,
		StartTockd(t, bin, "-etcd", eps, "-node-name", "n2"),
		StartTockd(t, bin, "-etcd", eps, "-node-name", "n3")}
	if l, _ := waitLeader(t, nodes...); l != n1 {
		t.Fatalf("%s leads, want n1 (it campaigned first)", l.Name())
	}
	// Who dispatched what, and when: one worker can reach only n1, another only n2 and
	// n3; tasks keep coming due through the cut. Every run's epoch and arrival is kept.
	l := newLedger()
	stopLoad := startDispatchLoad(t, l, n1.Addr()+","+nodes[1].Addr()+","+nodes[2].Addr(),
		n1.Addr(), nodes[1].Addr()+","+nodes[2].Addr())
	oldEpoch := waitRunAtEpochAbove(t, l, 0) // n1 dispatches

	cutAt := time.Now()
	for _, p := range proxies {
		p.Blackhole()
	}
	ctx, cancel := context.WithTimeout(context.Background(), electBound)
	defer cancel()
	var next *Node
	if err := pollUntil(ctx, func() (bool, error) {
		l, err := WaitLeader(ctx, nodes...) // fails on two leaders at once
		next = l
		return l != n1, err
	}); err != nil {
		t.Fatalf("after cutting n1 off etcd: %v", err)
	}
	took := time.Since(cutAt)
	t.Logf("n1 cut off etcd; %s leads after %v (goal %v)", next.Name(), took.Round(time.Millisecond), failoverGoal)
	if took > timingBound(failoverGoal) {
		t.Errorf("takeover after the cut took %v, goal %v (bound here %v)", took, failoverGoal, timingBound(failoverGoal))
	}
	waitRunAtEpochAbove(t, l, oldEpoch) // the new leader dispatches
	stopLoad()
	// n1's last run came before the new leader's first: never two dispatchers at once.
	l.mu.Lock()
	var lastOld, firstNew time.Time
	for _, rs := range l.runs {
		for _, r := range rs {
			if r.epoch == oldEpoch && r.started.After(lastOld) {
				lastOld = r.started
			}
			if r.epoch > oldEpoch && (firstNew.IsZero() || r.started.Before(firstNew)) {
				firstNew = r.started
			}
		}
	}
	l.mu.Unlock()
	t.Logf("n1 (epoch %d) last dispatched %v after the cut; the new leader first %v after it",
		oldEpoch, lastOld.Sub(cutAt).Round(time.Millisecond), firstNew.Sub(cutAt).Round(time.Millisecond))
	if !lastOld.Before(firstNew) {
		t.Errorf("n1 dispatched at %v, after the new leader began at %v: two dispatchers at once", lastOld, firstNew)
	}
	if stoppedAfter := lastOld.Sub(cutAt); stoppedAfter > timingBound(store.DefaultSessionTTL) {
		t.Errorf("n1 dispatched %v after the cut, beyond the session TTL %v (bound here %v)", stoppedAfter, store.DefaultSessionTTL, timingBound(store.DefaultSessionTTL))
	}

	for _, p := range proxies {
		p.Restore()
	}
	if l, _ := waitLeader(t, nodes...); l != next {
		t.Fatalf("after restoring n1's etcd: %s leads, want %s", l.Name(), next.Name())
	}
	if leads, _, err := n1.IsLeader(ctx); err != nil || leads {
		t.Fatalf("n1 after restore: leads=%v, %v; want a follower", leads, err)
	}
}

// pollUntil calls cond every PollInterval until it returns true or an error, or ctx ends.
func pollUntil(ctx context.Context, cond func() (bool, error)) error {
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// startDispatchLoad submits an ephemeral task due at once every few milliseconds through
// clientAddrs, and runs two workers, one per address list in workerAddrs, recording
// every run in l. The returned func stops it all.
func startDispatchLoad(t *testing.T, l *ledger, clientAddrs string, workerAddrs ...string) (stop func()) {
	t.Helper()
	fast := client.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, addrs := range workerAddrs {
		w, err := client.NewWorker(addrs, client.WithConcurrency(8), fast)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Handle("tick", func(ctx context.Context, f *client.Fire) error { l.ran(f); return nil }); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
	}
	c, err := client.Dial(ctx, clientAddrs, fast)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for seq := 0; ; seq++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			_, _ = c.Submit(sctx, task.Task{ID: fmt.Sprint("tick-", seq), Type: "tick", Schedule: task.After(0)}, protocol.Ephemeral)
			scancel()
		}
	}()
	return func() { cancel(); c.Close(); wg.Wait() }
}

// waitRunAtEpochAbove waits for a run at an epoch above epoch and returns that epoch.
func waitRunAtEpochAbove(t *testing.T, l *ledger, epoch uint64) uint64 {
	t.Helper()
	var above uint64
	tockdtest.EventuallyWithin(t, fmt.Sprintf("a run at an epoch above %d", epoch), electBound, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for e := range l.epochs {
			if e > epoch {
				above = e
				return true
			}
		}
		return false
	})
	return above
}
