package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/internal/clustertest/history"
	"github.com/tock-sched/tock/server/store"
)

// Environment of TestChaosHistory. Unset, it runs its short form (make test): one fault
// of each kind in an order drawn from chaosDefaultSeed, ~40-60 s in all. make chaos sets
// TOCK_CHAOS_DURATION (minutes of faults) and, to replay a run, TOCK_CHAOS_SEED.
const (
	chaosSeedEnv     = "TOCK_CHAOS_SEED"
	chaosDurationEnv = "TOCK_CHAOS_DURATION"
	// chaosOutEnv names a directory where the run's whole history is written as JSON
	// (history-<seed>.json), for reading beside a violation's excerpt.
	chaosOutEnv      = "TOCK_CHAOS_OUT"
	chaosDefaultSeed = 1
)

// The nemesis's timings. Each fault outlasts the session TTL, so that every one of them
// makes (or, for an etcd member, must not make) a new leader.
const (
	// chaosGapMin and chaosGapMax bound the load without faults before each fault.
	chaosGapMin = 2 * time.Second
	chaosGapMax = 4 * time.Second
	// chaosStall is how long a leader stays SIGSTOPped: past its session TTL, with a
	// second for the new leader to take over while it is still stopped.
	chaosStall = store.DefaultSessionTTL + 2*time.Second
	// chaosEtcdDown is how long an etcd member stays stopped: past the session TTL, so a
	// leader that lost its session over it would show.
	chaosEtcdDown = store.DefaultSessionTTL + time.Second
	// chaosCutHold is how long a cut leader stays cut after another node leads.
	chaosCutHold = time.Second
	// chaosQuiet is the load without faults after the last one, before the recurring
	// tasks are cancelled: longer than history.DefaultRecovery, so the occurrences just
	// before the cancel are judged with the cluster settled.
	chaosQuiet = history.DefaultRecovery + 2*time.Second
	// chaosDrain bounds the wait, after the load, for etcd to hold no record, progress
	// key or run lock: generous (the last one-shots are due within 3 s, and a task's
	// retries end within ~10 s), as only state the cluster lost track of waits it out.
	chaosDrain = 30 * time.Second
	// chaosCancelTries bounds the final cancel of each recurring task.
	chaosCancelTries = 20
	// chaosShown is how many violations of one check are printed with their excerpts.
	chaosShown = 3
)

// chaosCluster is the cluster under test: 3 etcd members and 3 tockd nodes, each node
// reaching every member only through a Proxy of its own, so that any node can be cut
// from etcd; a node restarted after a kill keeps its client address and its proxies.
type chaosCluster struct {
	t       *testing.T
	e       *Etcd
	cli     *clientv3.Client // the nemesis's own etcd client, to the members directly
	bin     string
	nodes   []*Node
	etcd    []string // per node: its -etcd (its proxies' URLs)
	proxies [][]*Proxy
	addrs   []string
}

func startChaosCluster(t *testing.T) *chaosCluster {
	c := &chaosCluster{t: t, e: StartEtcd(t, 3), bin: BuildTockd(t)}
	c.cli = etcdClient(t, c.e)
	for i := range 3 {
		var urls []string
		var ps []*Proxy
		for _, ep := range c.e.Endpoints() {
			p := StartProxy(t, strings.TrimPrefix(ep, "http://"))
			ps = append(ps, p)
			urls = append(urls, "http://"+p.Addr())
		}
		c.proxies = append(c.proxies, ps)
		c.etcd = append(c.etcd, strings.Join(urls, ","))
		n := StartTockd(t, c.bin, "-etcd", c.etcd[i], "-node-name", fmt.Sprintf("n%d", i+1))
		c.nodes = append(c.nodes, n)
		c.addrs = append(c.addrs, n.Addr())
	}
	return c
}

func (c *chaosCluster) restart(i int) {
	c.nodes[i] = StartTockd(c.t, c.bin, "-etcd", c.etcd[i], "-node-name", c.nodes[i].Name(),
		"-addr", c.addrs[i], "-advertise-addr", c.addrs[i])
}

// leader waits (electBound) for exactly one node of nodes to lead.
func (c *chaosCluster) leader(nodes ...*Node) (*Node, uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), electBound)
	defer cancel()
	l, err := WaitLeader(ctx, nodes...)
	if err != nil {
		return nil, 0, err
	}
	_, epoch, err := l.IsLeader(ctx)
	return l, epoch, err
}

// notLeading waits (electBound) until n answers that it does not lead.
func notLeading(n *Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), electBound)
	defer cancel()
	return pollUntil(ctx, func() (bool, error) {
		leads, _, err := n.IsLeader(ctx)
		return err == nil && !leads, nil
	})
}

// fault injects one fault of kind k and returns its record; an error means the cluster
// did not recover within the harness's bounds (itself a finding).
func (c *chaosCluster) fault(k history.FaultKind, rng *rand.Rand) (history.Fault, error) {
	f := history.Fault{Kind: k}
	if k == history.EtcdStop {
		m := rng.IntN(len(c.e.Endpoints()))
		f.Target, f.Start = fmt.Sprintf("etcd m%d", m), time.Now()
		c.e.Stop(m)
		time.Sleep(chaosEtcdDown)
		c.e.Start(m)
		ctx, cancel := context.WithTimeout(context.Background(), electBound)
		defer cancel()
		if err := c.e.WaitHealthy(ctx); err != nil {
			return f, err
		}
		l, epoch, err := c.leader(c.nodes...)
		if err != nil {
			return f, err
		}
		f.End, f.Note = time.Now(), fmt.Sprintf("%s leads at epoch %d", l.Name(), epoch)
		return f, nil
	}
	l, epoch, err := c.leader(c.nodes...)
	if err != nil {
		return f, err
	}
	i := slices.Index(c.nodes, l)
	others := without(c.nodes, l)
	f.Target, f.Epoch, f.Start = fmt.Sprintf("%s (epoch %d)", l.Name(), epoch), epoch, time.Now()
	var next *Node
	var nextEpoch uint64
	// seen waits for another node to lead and records when the nemesis saw it.
	seen := func() error {
		next, nextEpoch, err = c.leader(others...)
		if err == nil {
			f.NewEpoch, f.LeaderSeen = nextEpoch, time.Now()
		}
		return err
	}
	switch k {
	case history.Kill:
		l.Kill()
		if err := seen(); err != nil {
			return f, err
		}
		c.restart(i)
	case history.Stall:
		if err := l.Pause(); err != nil {
			return f, err
		}
		err := seen()
		time.Sleep(time.Until(f.Start.Add(chaosStall)))
		if rerr := l.Resume(); rerr != nil || err != nil {
			return f, fmt.Errorf("stalled leader: %w (resume: %v)", err, rerr)
		}
		if err := notLeading(l); err != nil {
			return f, fmt.Errorf("%s resumed and still leads: %w", l.Name(), err)
		}
	case history.Reelect:
		if err := c.reelect(l, epoch, others, &f); err != nil {
			return f, err
		}
		next, nextEpoch = l, f.NewEpoch
	case history.Cut:
		for _, p := range c.proxies[i] {
			p.Blackhole()
		}
		err := seen()
		if err == nil {
			time.Sleep(chaosCutHold)
		}
		for _, p := range c.proxies[i] {
			p.Restore()
		}
		if err != nil {
			return f, err
		}
		if err := notLeading(l); err != nil {
			return f, fmt.Errorf("%s restored and still leads: %w", l.Name(), err)
		}
	}
	f.End, f.Note = time.Now(), fmt.Sprintf("%s leads at epoch %d", next.Name(), nextEpoch)
	return f, nil
}

// reelect is the Reelect fault on leader l (at epoch): the other nodes are SIGSTOPped,
// then l's election key is deleted, as a resign would (etcd's Resign is that delete),
// while its session lives on. l's watch on its key ends its term (it steps down, drops
// its durable tasks, sends its workers away) and it campaigns again, behind the frozen
// nodes' keys; those go when their leases lapse (a session TTL after their last
// keep-alive), and l is elected again at a new epoch: it loads its own durable tasks
// back, beside the finished copies its engine kept. Then the others get SIGCONT and
// must follow. f gets NewEpoch and LeaderSeen.
func (c *chaosCluster) reelect(l *Node, epoch uint64, others []*Node, f *history.Fault) error {
	resume := func() error {
		var errs []error
		for _, n := range others {
			if err := n.Resume(); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, n := range others {
		if err := n.Pause(); err != nil {
			return errors.Join(err, resume())
		}
	}
	if err := c.deleteLeaderKey(l); err != nil {
		return errors.Join(err, resume())
	}
	ctx, cancel := context.WithTimeout(context.Background(), electBound)
	defer cancel()
	err := pollUntil(ctx, func() (bool, error) {
		leads, e, err := l.IsLeader(ctx)
		if err == nil && leads && e > epoch {
			f.NewEpoch, f.LeaderSeen = e, time.Now()
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		err = fmt.Errorf("%s was not elected again after its key went: %w", l.Name(), err)
	}
	if err := errors.Join(err, resume()); err != nil {
		return err
	}
	for _, n := range others {
		if err := notLeading(n); err != nil {
			return fmt.Errorf("%s resumed and leads: %w", n.Name(), err)
		}
	}
	return nil
}

// deleteLeaderKey deletes the election key with the lowest create revision (the
// leader's), which must name l (its value is the leader's advertised address).
func (c *chaosCluster) deleteLeaderKey(l *Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	keys, err := c.cli.Get(ctx, store.DefaultPrefix+"leader/", clientv3.WithFirstCreate()...)
	if err != nil {
		return err
	}
	if len(keys.Kvs) != 1 || string(keys.Kvs[0].Value) != l.Addr() {
		return fmt.Errorf("the first election key is %v, want %s's", keys.Kvs, l.Name())
	}
	del, err := c.cli.Delete(ctx, string(keys.Kvs[0].Key))
	if err == nil && del.Deleted != 1 {
		err = fmt.Errorf("deleted %d keys, want the leader's", del.Deleted)
	}
	return err
}

// chaosSchedule returns the faults to inject: one of each kind in a seeded order, then,
// for a long run, seeded kinds until the duration is spent (decided as it goes).
func chaosSchedule(rng *rand.Rand) []history.FaultKind {
	var kinds []history.FaultKind
	for _, i := range rng.Perm(len(history.FaultKinds)) {
		kinds = append(kinds, history.FaultKinds[i])
	}
	return kinds
}

// TestChaosHistory is issue 11's history checker, in the style of Jepsen, on separate
// tockd processes and a real 3-member etcd: several clients submit durable tasks (one-
// shot, recurring every or cron under either misfire policy, exclusive, versioned
// replacements), cancel some, and several Workers run and ACK them, while a nemesis on
// a seeded schedule SIGKILLs the leader (then restarts it), SIGSTOPs it past its session
// TTL (then SIGCONTs it), stops an etcd member (then restarts it), cuts the leader
// from etcd (then heals), and has the leader resign and win the election again
// (reelect). Every client call, FIRE, handler return, ACK answer and fault is logged;
// after the load drains, etcd's revision history and its remaining keys are read, and
// history.Check judges it all (the properties are listed in that package's doc). The
// seed is printed; TOCK_CHAOS_SEED replays its choices (the timing of a real cluster is
// not replayed).
func TestChaosHistory(t *testing.T) {
	multiProcess(t)
	seed := uint64(chaosDefaultSeed)
	if v := os.Getenv(chaosSeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", chaosSeedEnv, v)
		}
		seed = s
	} else if os.Getenv(chaosDurationEnv) != "" {
		seed = uint64(time.Now().UnixNano())
	}
	var duration time.Duration
	if v := os.Getenv(chaosDurationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", chaosDurationEnv, v)
		}
		duration = d
	}
	t.Logf("chaos seed %d (replay: %s=%d), faults for %v after one of each kind", seed, chaosSeedEnv, seed, duration)
	rng := rand.New(rand.NewPCG(seed, 0))

	c := startChaosCluster(t)
	if _, _, err := c.leader(c.nodes...); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(c.addrs, ",")
	rec := newRecorder(seed, store.DefaultPrefix)

	stopWorkers, err := startWorkers(all, rec)
	if err != nil {
		t.Fatal(err)
	}
	workersStopped := false
	defer func() {
		if !workersStopped {
			_ = stopWorkers()
		}
	}()
	stopLoad := make(chan struct{})
	var load sync.WaitGroup
	var clients []*client.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	loadStopped := false
	endLoad := func() {
		if !loadStopped {
			loadStopped = true
			close(stopLoad)
			load.Wait()
		}
	}
	defer endLoad()
	for n := range chaosClients {
		cl, err := client.Dial(context.Background(), all, chaosBackoff)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, cl)
		lc := &loadClient{n: n, c: cl, rng: rand.New(rand.NewPCG(seed, uint64(n+1))), rec: rec,
			live: map[string]bool{}, excl: map[string]bool{}}
		load.Go(func() { lc.run(stopLoad) })
	}

	// The nemesis, on this goroutine (its harness calls may fail the test).
	kinds := chaosSchedule(rng)
	deadline := time.Now().Add(duration)
	for i := 0; i < len(kinds) || time.Now().Before(deadline); i++ {
		k := history.FaultKinds[rng.IntN(len(history.FaultKinds))]
		if i < len(kinds) {
			k = kinds[i]
		}
		time.Sleep(chaosGapMin + time.Duration(rng.Int64N(int64(chaosGapMax-chaosGapMin))))
		f, err := c.fault(k, rng)
		if f.End.IsZero() {
			f.End = time.Now()
		}
		rec.fault(f)
		if err != nil {
			t.Errorf("nemesis: %s of %s at %v: the cluster did not recover: %v", k, f.Target, f.Start.Format(time.StampMilli), err)
			break
		}
		t.Logf("fault %d: %s of %s, %v until healed; %s", i+1, k, f.Target, f.End.Sub(f.Start).Round(time.Millisecond), f.Note)
	}

	time.Sleep(chaosQuiet)
	endLoad()
	// Cancel every recurring task ever submitted, whatever its submit's outcome was.
	closer := &loadClient{n: chaosClients, c: clients[0], rec: rec}
	ids := rec.recurringIDs()
	slices.Sort(ids)
	for _, id := range ids {
		closer.cancel(id, chaosCancelTries)
	}

	cli := c.cli
	ctx, cancel := context.WithTimeout(context.Background(), chaosDrain)
	defer cancel()
	var leftover []string // as last read
	if err := pollUntil(ctx, func() (bool, error) {
		rctx, rcancel := context.WithTimeout(context.Background(), CallTimeout)
		defer rcancel()
		keys, err := taskKeys(rctx, cli, store.DefaultPrefix)
		if err == nil {
			leftover = keys
		}
		return err == nil && len(keys) == 0, nil
	}); err != nil {
		t.Logf("after %v, %d keys of tasks still in etcd", chaosDrain, len(leftover))
	}
	workersStopped = true
	if err := stopWorkers(); err != nil {
		t.Errorf("%v", err)
	}

	hctx, hcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer hcancel()
	events, err := etcdHistory(hctx, cli, store.DefaultPrefix)
	if err != nil {
		t.Fatalf("reading etcd's history: %v", err)
	}
	rec.mu.Lock()
	h := rec.h
	rec.mu.Unlock()
	h.Events, h.Leftover = events, leftover
	if dir := os.Getenv(chaosOutEnv); dir != "" {
		writeHistory(t, dir, &h)
	}
	t.Logf("seed %d: %s", seed, history.Summarize(&h))
	vs := history.Check(&h, history.Options{})
	// The first chaosShown violations of each check in full, then a count and the tasks.
	var order []string
	more := map[string][]string{}
	shown := map[string]int{}
	for _, v := range vs {
		if shown[v.Check] == 0 {
			order = append(order, v.Check)
		}
		if shown[v.Check]++; shown[v.Check] <= chaosShown {
			t.Errorf("seed %d: %s", seed, v)
		} else {
			more[v.Check] = append(more[v.Check], v.Task)
		}
	}
	for _, check := range order {
		if rest := more[check]; len(rest) > 0 {
			t.Errorf("seed %d: %s: %d more violations, of tasks %v", seed, check, len(rest), rest)
		}
	}
	if len(vs) > 0 {
		var tally []string
		for _, check := range order {
			tally = append(tally, fmt.Sprintf("%s %d", check, shown[check]))
		}
		t.Logf("seed %d: %d violations (%s); replay the choices with %s=%d", seed, len(vs), strings.Join(tally, ", "), chaosSeedEnv, seed)
	}
}

// taskKeys returns the keys of task state in etcd now: records, packs and their done
// keys, progress, run locks.
func taskKeys(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error) {
	var keys []string
	for _, kind := range []string{"tasks/", "packs/", "packdone/", "next/", "locks/"} {
		resp, err := cli.Get(ctx, prefix+kind, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
	}
	return keys, nil
}

// etcdHistory returns every change under prefix since etcd began (nothing compacts in
// these tests), by watching from revision 1 until a progress notification says the
// watch has caught up with the revision etcd was at when it started.
func etcdHistory(ctx context.Context, cli *clientv3.Client, prefix string) ([]history.KeyEvent, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, err
	}
	rev := resp.Header.Revision
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(1))
	var events []history.KeyEvent
	var last int64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for last < rev {
		select {
		case wr, ok := <-ch:
			if !ok {
				return nil, fmt.Errorf("etcd watch closed at revision %d of %d: %w", last, rev, ctx.Err())
			}
			if err := wr.Err(); err != nil {
				return nil, err
			}
			for _, ev := range wr.Events {
				events = append(events, history.KeyEvent{Rev: ev.Kv.ModRevision, Key: string(ev.Kv.Key),
					Delete: ev.Type == clientv3.EventTypeDelete, Value: ev.Kv.Value, CreateRev: ev.Kv.CreateRevision})
				last = max(last, ev.Kv.ModRevision)
			}
			if wr.IsProgressNotify() {
				last = max(last, wr.Header.Revision)
			}
		case <-tick.C:
			// Answered only once the watch is synced: its revision then covers rev.
			if err := cli.RequestProgress(wctx); err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("etcd watch at revision %d of %d: %w", last, rev, ctx.Err())
		}
	}
	return events, nil
}

func writeHistory(t *testing.T, dir string, h *history.History) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("%s: %v", chaosOutEnv, err)
		return
	}
	b, err := json.MarshalIndent(h, "", " ")
	if err == nil {
		path := filepath.Join(dir, fmt.Sprintf("history-%d.json", h.Seed))
		err = os.WriteFile(path, b, 0o644)
		t.Logf("history written to %s", path)
	}
	if err != nil {
		t.Errorf("writing the history: %v", err)
	}
}
