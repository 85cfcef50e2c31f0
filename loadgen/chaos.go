package main

// Chaos: -chaos kill-leader:EVERY against a cluster of tockd nodes (-target server with
// several -addr addresses, -durable).
//
// Every EVERY the chaos loop finds the leading node (STATS gauge is_leader over every
// address), SIGKILLs it, measures the failover time (from the kill until another address
// reports is_leader=1, polled every chaosPoll) and revives the killed node, so the
// cluster stays at full size. One kill at a time; a kill that has begun always runs to
// its revive, even when the load ends meanwhile. The first error (no leader, a refused
// kill, no failover within chaosFailoverBound, a failed revive) stops the chaos and
// fails the run.
//
// Duplicates are made explainable: the Worker reports each ACK's answer (OnAcked), the
// Recorder classes every duplicate as after a confirmed ACK (a failure) or not, and each
// kill records the ACKs left unconfirmed from it to the next kill.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
)

const (
	// chaosKillLeader is the one chaos action: SIGKILL the leading node.
	chaosKillLeader = "kill-leader"
	// minChaosEvery keeps kills apart by more than a failover (~2 s here with the 2 s
	// session TTL) would need to be meaningful at all; below 1 s the cluster would only
	// ever be electing.
	minChaosEvery = time.Second
	// chaosPoll is how often the failover wait asks every node whether it leads: the
	// resolution of the failover times.
	chaosPoll = 50 * time.Millisecond
	// chaosCallTimeout bounds one STATS round trip (dial included) to one node, so a
	// stalled node cannot stall a poll of all.
	chaosCallTimeout = time.Second
	// chaosLeaderBound bounds the wait for a leader before a kill, and
	// chaosFailoverBound the wait for another node to lead after it: generous (a
	// failover takes ~2 s), because the machine may be loaded; past them something is
	// broken, not slow.
	chaosLeaderBound   = 30 * time.Second
	chaosFailoverBound = 30 * time.Second
	// chaosReviveTimeout bounds one revive (cluster.sh restart waits up to its own
	// CLUSTER_START_TIMEOUT, 60 s by default, for the node to listen).
	chaosReviveTimeout = 90 * time.Second
	// chaosReconnectInitial and chaosReconnectMax are the Worker's and the producers'
	// redial backoff under chaos: short, so that the lateness measured after a failover
	// is the cluster's, not a client backoff grown to its 5 s default cap.
	chaosReconnectInitial = 20 * time.Millisecond
	chaosReconnectMax     = 500 * time.Millisecond
	// defaultChaosSubmitRetry is -submit-retry when -chaos is given without it: long
	// enough to outlast several failovers.
	defaultChaosSubmitRetry = 30 * time.Second
	// submitRetryInitial and submitRetryMax bound the wait between two submits of the
	// same tasks (doubling).
	submitRetryInitial = 50 * time.Millisecond
	submitRetryMax     = time.Second
)

// chaosSpec is a parsed -chaos value.
type chaosSpec struct {
	Kind  string        // chaosKillLeader
	Every time.Duration // between two kills
}

func (s chaosSpec) String() string { return s.Kind + ":" + s.Every.String() }

// parseChaos parses a -chaos value: kill-leader:EVERY, EVERY a Go duration of at least
// minChaosEvery.
func parseChaos(v string) (chaosSpec, error) {
	kind, every, ok := strings.Cut(v, ":")
	if !ok || kind != chaosKillLeader {
		return chaosSpec{}, fmt.Errorf("-chaos %q: want %s:EVERY (e.g. %s:10s)", v, chaosKillLeader, chaosKillLeader)
	}
	d, err := time.ParseDuration(every)
	if err != nil {
		return chaosSpec{}, fmt.Errorf("-chaos %q: EVERY: %v", v, err)
	}
	if d < minChaosEvery {
		return chaosSpec{}, fmt.Errorf("-chaos %q: EVERY %v is below %v", v, d, minChaosEvery)
	}
	return chaosSpec{Kind: kind, Every: d}, nil
}

// splitAddrs returns the comma-separated addresses of -addr, trimmed, empty ones dropped.
func splitAddrs(addr string) []string {
	var out []string
	for a := range strings.SplitSeq(addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// defaultClusterDir is cluster.sh's run dir, spelled as cluster.sh spells it (the pid
// check compares command lines with it as a string).
func defaultClusterDir() string {
	if d := os.Getenv("TOCK_CLUSTER_DIR"); d != "" {
		return d
	}
	tmp := os.Getenv("TMPDIR")
	if tmp == "" {
		tmp = "/tmp"
	}
	return tmp + "/tock-cluster"
}

// chaosCluster is what the chaos loop acts on. Nodes are named by their client address
// (an -addr entry). Methods are called from one goroutine at a time.
type chaosCluster interface {
	// Leader asks every node once whether it leads and returns the address of the one
	// that does ("" when none does), bounded by ctx.
	Leader(ctx context.Context) (string, error)
	// Kill SIGKILLs the node at addr.
	Kill(ctx context.Context, addr string) error
	// Revive starts the killed node at addr again, with the same addresses, and
	// returns once it accepts connections.
	Revive(ctx context.Context, addr string) error
}

// leaderProbe answers Leader for a set of addresses with the STATS gauges is_leader and
// epoch, over one connection per address kept between calls (dropped after an error,
// redialled by the next call). With two nodes reporting leading (a handover seen
// mid-poll) the higher epoch wins.
type leaderProbe struct {
	addrs []string

	mu      sync.Mutex
	clients map[string]*client.Client // guarded by mu
}

func newLeaderProbe(addrs []string) *leaderProbe {
	return &leaderProbe{addrs: addrs, clients: make(map[string]*client.Client)}
}

// Leader implements chaosCluster.Leader: every address at once, each bounded by
// chaosCallTimeout.
func (p *leaderProbe) Leader(ctx context.Context) (string, error) {
	type answer struct {
		leads bool
		epoch int64
	}
	answers := make([]answer, len(p.addrs))
	var wg sync.WaitGroup
	for i, a := range p.addrs {
		wg.Go(func() {
			leads, epoch, err := p.ask(ctx, a)
			if err == nil {
				answers[i] = answer{leads, epoch}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return "", err
	}
	best, bestEpoch := "", int64(-1)
	for i, a := range answers {
		if a.leads && a.epoch > bestEpoch {
			best, bestEpoch = p.addrs[i], a.epoch
		}
	}
	return best, nil
}

// ask makes one STATS round trip to addr.
func (p *leaderProbe) ask(ctx context.Context, addr string) (bool, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, chaosCallTimeout)
	defer cancel()
	p.mu.Lock()
	c := p.clients[addr]
	p.mu.Unlock()
	if c == nil {
		var err error
		if c, err = client.Dial(ctx, addr, client.WithClientName("loadgen-chaos")); err != nil {
			return false, 0, err
		}
		p.mu.Lock()
		if old := p.clients[addr]; old != nil {
			_ = old.Close() // never: one goroutine per address
		}
		p.clients[addr] = c
		p.mu.Unlock()
	}
	st, err := c.Stats(ctx)
	if err != nil {
		p.mu.Lock()
		delete(p.clients, addr)
		p.mu.Unlock()
		_ = c.Close()
		return false, 0, err
	}
	return st.Gauges["is_leader"] == 1, st.Gauges["epoch"], nil
}

// Close closes the connections.
func (p *leaderProbe) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.clients {
		_ = c.Close()
		delete(p.clients, a)
	}
}

// localCluster is the cluster `make cluster` runs (server/internal/clustertest/cluster.sh): its run
// dir holds pids ("name pid" a line) and cmd/<name> (each process's command line,
// NUL-separated), from which the tockd nodes' client addresses are read.
type localCluster struct {
	*leaderProbe
	dir    string
	names  map[string]string // client address -> node name in pids (tockd-n1)
	revive string            // a sh command line; {name} is the node's name (n1)
}

// newLocalCluster reads the run dir and maps every address in addrs to a node of it.
// revive is the revive command template ("" finds cluster.sh above the working
// directory and runs its restart).
func newLocalCluster(dir string, addrs []string, revive string) (*localCluster, error) {
	names, err := clusterNodes(dir)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if _, ok := names[a]; !ok {
			return nil, fmt.Errorf("chaos: -addr %s is not a tockd node of the cluster in %s (its nodes: %s)", a, dir, strings.Join(sortedKeys(names), ", "))
		}
	}
	if revive == "" {
		sh, err := findClusterScript()
		if err != nil {
			return nil, err
		}
		revive = shellQuote(sh) + " restart {name}"
	}
	return &localCluster{leaderProbe: newLeaderProbe(addrs), dir: dir, names: names, revive: revive}, nil
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// clusterNodes maps each tockd node's client address (its -addr) to its name, from the
// run dir's cmd/tockd-* files.
func clusterNodes(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "cmd", "tockd-*"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("chaos: no cluster in %s (no cmd/tockd-* files: start one with make cluster, or set -cluster-dir)", dir)
	}
	names := make(map[string]string)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-addr" || args[i] == "--addr" {
				names[args[i+1]] = filepath.Base(f)
			}
		}
	}
	return names, nil
}

// findClusterScript returns server/internal/clustertest/cluster.sh of the repository that holds the
// working directory (searched upward).
func findClusterScript() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "server", "internal", "clustertest", "cluster.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("chaos: no server/internal/clustertest/cluster.sh in %s or above: run loadgen inside the repository, or give -chaos-revive", wd)
		}
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Kill implements chaosCluster.Kill: the node's pid from pids, checked to be the run
// dir's process (checkPid), then SIGKILL.
func (c *localCluster) Kill(_ context.Context, addr string) error {
	name := c.names[addr]
	pid, err := readPid(c.dir, name)
	if err != nil {
		return err
	}
	if err := checkPid(pid, c.dir); err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("chaos: kill -KILL %d (%s): %w", pid, name, err)
	}
	return nil
}

// Revive implements chaosCluster.Revive: runs the revive command with {name} replaced
// by the node's short name (n1) and TOCK_CLUSTER_DIR set to the run dir.
func (c *localCluster) Revive(ctx context.Context, addr string) error {
	name := strings.TrimPrefix(c.names[addr], "tockd-")
	ctx, cancel := context.WithTimeout(ctx, chaosReviveTimeout)
	defer cancel()
	line := strings.ReplaceAll(c.revive, "{name}", name)
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Env = append(os.Environ(), "TOCK_CLUSTER_DIR="+c.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: revive %s: %s: %w: %s", name, line, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// readPid returns name's pid from dir/pids (the last line naming it).
func readPid(dir, name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		return 0, fmt.Errorf("chaos: %w", err)
	}
	pid := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			if pid, err = strconv.Atoi(f[1]); err != nil || pid <= 0 {
				return 0, fmt.Errorf("chaos: %s/pids: bad pid %q for %s", dir, f[1], name)
			}
		}
	}
	if pid == 0 {
		return 0, fmt.Errorf("chaos: %s/pids names no %s", dir, name)
	}
	return pid, nil
}

// errNotOurs is checkPid's refusal.
var errNotOurs = errors.New("chaos: refusing to kill a process that is not the cluster's")

// checkPid returns nil when pid runs and its command line names dir (as a path prefix,
// dir + "/"), as every process cluster.sh starts does (bin/tockd, data/). A pid that
// names something else (recycled since pids was written) is refused with errNotOurs.
func checkPid(pid int, dir string) error {
	args, err := cmdline(pid)
	if err != nil {
		return fmt.Errorf("chaos: pid %d is not running: %w", pid, err)
	}
	if !strings.Contains(args, strings.TrimSuffix(dir, "/")+"/") {
		return fmt.Errorf("%w: pid %d's command line %q does not name the run dir %s", errNotOurs, pid, args, dir)
	}
	return nil
}

// cmdline returns pid's command line, its arguments separated by spaces: from /proc
// where there is one, else from ps.
func cmdline(pid int) (string, error) {
	if _, err := os.Stat("/proc/self/cmdline"); err == nil {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return "", err
		}
		if len(b) == 0 {
			return "", errors.New("no command line (a zombie, or a kernel thread)")
		}
		return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")), nil
	}
	out, err := exec.Command("ps", "-o", "args=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// killRecord is one kill of a chaos run.
type killRecord struct {
	Node      string  `json:"node"`       // the killed leader's address
	AtSeconds float64 `json:"at_seconds"` // since the run's start
	// FailoverNs is from the kill until another node reported is_leader=1.
	FailoverNs int64  `json:"failover_ns"`
	NewLeader  string `json:"new_leader"`
	// UnconfirmedAcks is the ACKs answered with an error from this kill until the next
	// one (or the end): the runs in flight at the kill, which may run again.
	UnconfirmedAcks int64  `json:"unconfirmed_acks"`
	ReviveErr       string `json:"revive_error,omitempty"`

	unconfirmedAt int64 // rec.Unconfirmed() at the kill
}

// chaosReport is a chaos run's part of the summary.
type chaosReport struct {
	Spec  string       `json:"spec"`
	Kills []killRecord `json:"kills"`
	// Failover times over the kills (0 without kills).
	FailoverMinNs    int64 `json:"failover_min_ns"`
	FailoverMedianNs int64 `json:"failover_median_ns"`
	FailoverMaxNs    int64 `json:"failover_max_ns"`
	// UnconfirmedBeforeKills is the ACKs answered with an error before the first kill.
	UnconfirmedBeforeKills int64 `json:"unconfirmed_acks_before_kills"`
	// Duplicates, split by what came before each: DupAfterUnconfirmed must equal
	// Duplicates (DupAfterConfirmed 0) for durable tasks.
	Duplicates          int64  `json:"duplicates"`
	DupAfterUnconfirmed int64  `json:"duplicates_after_unconfirmed_ack"`
	DupAfterConfirmed   int64  `json:"duplicates_after_confirmed_ack"`
	Lost                int64  `json:"lost"`
	Err                 string `json:"error,omitempty"`
}

// failoverStats returns the minimum, median (the mean of the two middle values for an
// even count) and maximum of ds; zeros for none. It does not modify ds.
func failoverStats(ds []time.Duration) (lo, med, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], med, s[n-1]
}

// chaosRun is one run's chaos loop. start, stop; busy says whether a kill is under way
// (the run's wait for stragglers does not give up during one).
type chaosRun struct {
	spec     chaosSpec
	cl       chaosCluster
	rec      *Recorder
	clk      clock
	start    int64     // the run's start on clk
	maxKills int       // 0: no limit
	log      io.Writer // a line per kill; written while the progress line may be (os.Stderr is safe for that)

	busy atomic.Bool
	stop chan struct{}
	done chan struct{}

	mu    sync.Mutex
	kills []killRecord // guarded by mu
	err   error        // guarded by mu; the first failure, which ended the loop
}

func (c *chaosRun) begin(ctx context.Context) {
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go c.loop(ctx)
}

// end stops the loop (after a kill under way has been revived) and waits for it.
func (c *chaosRun) end() {
	close(c.stop)
	<-c.done
}

func (c *chaosRun) loop(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.spec.Every)
	defer t.Stop()
	for n := 0; c.maxKills == 0 || n < c.maxKills; n++ {
		select {
		case <-c.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.busy.Store(true)
		err := c.kill(ctx)
		c.busy.Store(false)
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
	}
}

// kill is one round: find the leader, kill it, wait for another, revive the killed one.
func (c *chaosRun) kill(ctx context.Context) error {
	leader, err := c.waitLeader(ctx, "", chaosLeaderBound)
	if err != nil {
		return fmt.Errorf("chaos: before a kill: %w", err)
	}
	k := killRecord{Node: leader, unconfirmedAt: c.rec.Unconfirmed()}
	killed := c.clk.now()
	k.AtSeconds = time.Duration(killed - c.start).Seconds()
	if err := c.cl.Kill(ctx, leader); err != nil {
		return err
	}
	next, err := c.waitLeader(ctx, leader, chaosFailoverBound)
	if err != nil {
		k.FailoverNs = -1
	} else {
		k.FailoverNs = c.clk.now() - killed
		k.NewLeader = next
	}
	// Revive even without a new leader: the cluster is left at full size either way.
	rerr := c.cl.Revive(ctx, leader)
	if rerr != nil {
		k.ReviveErr = rerr.Error()
	}
	c.mu.Lock()
	c.kills = append(c.kills, k)
	c.mu.Unlock()
	if c.log != nil {
		fmt.Fprintf(c.log, "loadgen chaos: killed the leader %s at %.1fs; %s leads after %v%s\n",
			leader, k.AtSeconds, next, time.Duration(k.FailoverNs).Round(time.Millisecond), reviveText(rerr))
	}
	if err != nil {
		return fmt.Errorf("chaos: after killing %s: %w", leader, err)
	}
	return rerr
}

func reviveText(err error) string {
	if err != nil {
		return "; revive FAILED: " + err.Error()
	}
	return "; revived"
}

// waitLeader polls every chaosPoll until a node other than exclude leads, within bound.
func (c *chaosRun) waitLeader(ctx context.Context, exclude string, bound time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	t := time.NewTicker(chaosPoll)
	defer t.Stop()
	for {
		l, err := c.cl.Leader(ctx)
		if err == nil && l != "" && l != exclude {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no node other than %q reported leading within %v", exclude, bound)
		case <-t.C:
		}
	}
}

// report summarises the kills with the final counts.
func (c *chaosRun) report(counts Counts) *chaosReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &chaosReport{Spec: c.spec.String(), Kills: slices.Clone(c.kills), Duplicates: counts.Duplicates,
		DupAfterConfirmed: counts.DupAfterConfirmed, DupAfterUnconfirmed: counts.Duplicates - counts.DupAfterConfirmed,
		Lost: counts.Lost, UnconfirmedBeforeKills: counts.UnconfirmedAcks}
	if r.Kills == nil {
		r.Kills = []killRecord{}
	}
	var ds []time.Duration
	for i := range r.Kills {
		k := &r.Kills[i]
		next := counts.UnconfirmedAcks
		if i+1 < len(r.Kills) {
			next = r.Kills[i+1].unconfirmedAt
		}
		k.UnconfirmedAcks = next - k.unconfirmedAt
		if i == 0 {
			r.UnconfirmedBeforeKills = k.unconfirmedAt
		}
		if k.FailoverNs >= 0 {
			ds = append(ds, time.Duration(k.FailoverNs))
		}
	}
	lo, med, hi := failoverStats(ds)
	r.FailoverMinNs, r.FailoverMedianNs, r.FailoverMaxNs = int64(lo), int64(med), int64(hi)
	if c.err != nil {
		r.Err = c.err.Error()
	}
	return r
}

func (r *chaosReport) print(w io.Writer) {
	d := func(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }
	fmt.Fprintf(w, "  chaos %s: %d kills; failover min %v  median %v  max %v\n",
		r.Spec, len(r.Kills), d(r.FailoverMinNs), d(r.FailoverMedianNs), d(r.FailoverMaxNs))
	for i, k := range r.Kills {
		fo := "no new leader"
		if k.FailoverNs >= 0 {
			fo = fmt.Sprintf("%s leads after %v", k.NewLeader, d(k.FailoverNs))
		}
		rv := "revived"
		if k.ReviveErr != "" {
			rv = "revive FAILED: " + k.ReviveErr
		}
		fmt.Fprintf(w, "    kill %d at %.1fs: %s; %s; %d ACKs unconfirmed until the next kill; %s\n",
			i+1, k.AtSeconds, k.Node, fo, k.UnconfirmedAcks, rv)
	}
	fmt.Fprintf(w, "  lost %d; duplicates %d, of which after an unconfirmed ACK %d (after a confirmed ACK %d: must be 0); ACKs unconfirmed before the first kill %d\n",
		r.Lost, r.Duplicates, r.DupAfterUnconfirmed, r.DupAfterConfirmed, r.UnconfirmedBeforeKills)
	if r.Err != "" {
		fmt.Fprintf(w, "  chaos FAILED: %s\n", r.Err)
	}
}

// retrying wraps a server submitter for a cluster whose leader may die: a task whose
// submit got no definite answer (the call failed: the connection was lost at a leader's
// death, or no leader was elected within the client's redirects; or the task was refused
// OVERLOADED, NOT_LEADER or SHUTTING_DOWN) is submitted again, with the same ID, until
// window has passed since its batch's first failure. On a retry, EXISTS means an earlier
// try got through: accepted. A task that has already run is not submitted again: it was
// accepted, and once it has finished its durable record is gone, so a new submit could
// make it run a second time. Calls to submit keep the batch's lo (the server target only
// uses it to pick the producer's connection).
func retrying(submit submitter, rec *Recorder, window time.Duration) submitter {
	return func(ctx context.Context, lo int, ts []task.Task) ([]error, error) {
		errs := make([]error, len(ts))
		pending := make([]int, len(ts))
		for k := range pending {
			pending[k] = k
		}
		sub := make([]task.Task, 0, len(ts))
		var deadline time.Time
		wait := submitRetryInitial
		for try := 0; ; try++ {
			sub = sub[:0]
			for _, k := range pending {
				sub = append(sub, ts[k])
			}
			res, err := submit(ctx, lo, sub)
			again := pending[:0:0]
			for j, k := range pending {
				e := err
				if e == nil {
					e = res[j]
				}
				switch {
				case e == nil, try > 0 && errors.Is(e, protocol.ErrExists):
					errs[k] = nil
				case ctx.Err() == nil && retryable(e):
					errs[k] = e
					again = append(again, k)
				default:
					errs[k] = e
				}
			}
			if len(again) == 0 {
				return errs, nil
			}
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(window)
			}
			if !now.Before(deadline) {
				return errs, nil
			}
			t := time.NewTimer(min(wait, deadline.Sub(now)))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return errs, nil
			}
			wait = min(2*wait, submitRetryMax)
			pending = again[:0]
			for _, k := range again {
				if rec.Ran(lo + k) {
					errs[k] = nil
					continue
				}
				pending = append(pending, k)
			}
			if len(pending) == 0 {
				return errs, nil
			}
		}
	}
}

// retryable reports whether a submit error leaves the task's fate open or refused it for
// a passing reason: a failed call (not an ERROR the server answered for the whole
// frame), OVERLOADED, NOT_LEADER, SHUTTING_DOWN, and UNCERTAIN (the record may have been
// written: the task may run, so it is resubmitted, which the server makes idempotent).
func retryable(err error) bool {
	var perr *protocol.Error
	if errors.As(err, &perr) {
		switch perr.Code {
		case protocol.CodeOverloaded, protocol.CodeNotLeader, protocol.CodeShuttingDown, protocol.CodeUncertain:
			return true
		}
		return false
	}
	return !errors.Is(err, client.ErrClosed) && !errors.Is(err, client.ErrInvalidOption)
}
