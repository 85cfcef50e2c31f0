package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EtcdOptions configures StartEtcdWith. The zero value of a field means its default.
type EtcdOptions struct {
	// Members is the cluster size (default 3).
	Members int
	// HeartbeatMs and ElectionMs are etcd's --heartbeat-interval and --election-timeout
	// (defaults 10 and 100: a member starts in ~50 ms and a lost etcd leader is replaced
	// in a few hundred ms, which keeps tests short; etcd's own defaults are 100 and 1000).
	HeartbeatMs, ElectionMs int
	// ExtraArgs are appended to every member's command line.
	ExtraArgs []string
}

func (o *EtcdOptions) setDefaults() error {
	if o.Members == 0 {
		o.Members = 3
	}
	if o.HeartbeatMs == 0 {
		o.HeartbeatMs = 10
	}
	if o.ElectionMs == 0 {
		o.ElectionMs = 100
	}
	switch {
	case o.Members < 1:
		return fmt.Errorf("clustertest: EtcdOptions.Members %d must be at least 1", o.Members)
	case o.HeartbeatMs < 1:
		return fmt.Errorf("clustertest: EtcdOptions.HeartbeatMs %d must be positive", o.HeartbeatMs)
	case o.ElectionMs < 5*o.HeartbeatMs:
		return fmt.Errorf("clustertest: EtcdOptions.ElectionMs %d must be at least 5 x HeartbeatMs (%d)", o.ElectionMs, o.HeartbeatMs)
	}
	return nil
}

// Etcd is a multi-member etcd cluster of OS processes on 127.0.0.1, each member's data
// in the test's temporary directory. Its methods are called from the test goroutine;
// they fail the test (t.Fatal) when a member cannot be started or stopped.
type Etcd struct {
	t       testing.TB
	bin     string
	members []*member
	mu      sync.Mutex // guards member.p
}

type member struct {
	name      string
	clientURL string
	args      []string
	logPath   string
	p         *proc // guarded by Etcd.mu; nil while stopped
}

// StartEtcd starts an n-member cluster with the test timings of EtcdOptions and waits
// until every member reports healthy; it is stopped when the test ends. EtcdBinary must
// be able to build or find etcd (call it in TestMain to build it once, up front).
func StartEtcd(t testing.TB, n int) *Etcd {
	t.Helper()
	return StartEtcdWith(t, EtcdOptions{Members: n})
}

// StartEtcdWith is StartEtcd with options.
func StartEtcdWith(t testing.TB, o EtcdOptions) *Etcd {
	t.Helper()
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), EtcdBuildTimeout)
	dir, err := EtcdBinary(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	e := &Etcd{t: t, bin: filepath.Join(dir, "etcd")}
	t.Cleanup(e.stopAll)
	for attempt := 1; ; attempt++ {
		err := e.start(o)
		if err == nil {
			return e
		}
		if attempt >= StartAttempts || !errors.Is(err, ErrExited) {
			t.Fatalf("clustertest: starting %d etcd members (attempt %d): %v", o.Members, attempt, err)
		}
		t.Logf("clustertest: etcd start attempt %d failed, retrying with fresh ports: %v", attempt, err)
		e.stopAll()
	}
}

// start picks ports, starts every member and waits for the cluster's health.
func (e *Etcd) start(o EtcdOptions) error {
	ports, err := freePorts(2 * o.Members)
	if err != nil {
		return err
	}
	base := e.t.TempDir()
	var initial []string
	for i := range o.Members {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	e.members = e.members[:0]
	for i := range o.Members {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			clientURL: client,
			logPath:   filepath.Join(base, fmt.Sprintf("etcd-m%d.log", i)),
		}
		m.args = append([]string{
			"--name", m.name,
			"--data-dir", filepath.Join(base, m.name),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "tock-test",
			"--heartbeat-interval", strconv.Itoa(o.HeartbeatMs),
			"--election-timeout", strconv.Itoa(o.ElectionMs),
		}, o.ExtraArgs...)
		logOnFailure(e.t, "etcd "+m.name, m.logPath)
		e.members = append(e.members, m)
	}
	for i := range e.members {
		if err := e.startMember(i); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	return e.waitHealthy(ctx, len(e.members))
}

func (e *Etcd) startMember(i int) error {
	m := e.members[i]
	p, err := startProc("etcd "+m.name, m.logPath, e.bin, m.args, nil)
	if err != nil {
		return err
	}
	e.mu.Lock()
	m.p = p
	e.mu.Unlock()
	return nil
}

// Endpoints returns the members' client URLs, in member order.
func (e *Etcd) Endpoints() []string {
	eps := make([]string, len(e.members))
	for i, m := range e.members {
		eps[i] = m.clientURL
	}
	return eps
}

// Pid returns member i's process ID, or 0 while it is stopped.
func (e *Etcd) Pid(i int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.members[i].p; p != nil {
		return p.pid()
	}
	return 0
}

// take detaches member i's process; it fails the test if the member is not running.
func (e *Etcd) take(i int) *proc {
	e.t.Helper()
	if i < 0 || i >= len(e.members) {
		e.t.Fatalf("clustertest: etcd member %d of %d", i, len(e.members))
	}
	e.mu.Lock()
	p := e.members[i].p
	e.members[i].p = nil
	e.mu.Unlock()
	if p == nil {
		e.t.Fatalf("clustertest: etcd member %d is not running", i)
	}
	return p
}

// Stop sends member i SIGTERM and waits for it to exit (SIGKILL after StopTimeout).
func (e *Etcd) Stop(i int) {
	e.t.Helper()
	if !e.take(i).term(StopTimeout) {
		e.t.Logf("clustertest: etcd member %d ignored SIGTERM for %v; killed", i, StopTimeout)
	}
}

// Kill sends member i SIGKILL and waits for it to exit.
func (e *Etcd) Kill(i int) {
	e.t.Helper()
	e.take(i).kill()
}

// Start restarts stopped member i on its old ports with its data, and waits until its
// client port answers /health (healthy or not: a lone member of a cluster that lost
// quorum cannot be healthy; use WaitHealthy for that).
func (e *Etcd) Start(i int) {
	e.t.Helper()
	if i < 0 || i >= len(e.members) {
		e.t.Fatalf("clustertest: etcd member %d of %d", i, len(e.members))
	}
	e.mu.Lock()
	running := e.members[i].p != nil
	e.mu.Unlock()
	if running {
		e.t.Fatalf("clustertest: etcd member %d is already running", i)
	}
	if err := e.startMember(i); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := e.poll(ctx, func() (bool, error) {
		_, err := e.health(ctx, i)
		return err == nil, nil
	}, i); err != nil {
		e.t.Fatalf("clustertest: restarting etcd member %d: %v", i, err)
	}
}

// WaitHealthy waits until every running member reports healthy (which needs quorum).
func (e *Etcd) WaitHealthy(ctx context.Context) error {
	return e.waitHealthy(ctx, -1)
}

// waitHealthy polls until every running member is healthy; want members must be
// running (-1: any number).
func (e *Etcd) waitHealthy(ctx context.Context, want int) error {
	return e.poll(ctx, func() (bool, error) {
		running := 0
		for i := range e.members {
			e.mu.Lock()
			p := e.members[i].p
			e.mu.Unlock()
			if p == nil {
				continue
			}
			running++
			if ok, err := e.health(ctx, i); err != nil || !ok {
				return false, nil
			}
		}
		if want >= 0 && running != want {
			return false, fmt.Errorf("clustertest: %d etcd members running, want %d", running, want)
		}
		return true, nil
	}, -1)
}

// poll calls cond every PollInterval until it returns true or an error, ctx ends, or a
// watched member (all when watch is -1) exits.
func (e *Etcd) poll(ctx context.Context, cond func() (bool, error), watch int) error {
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		for i, m := range e.members {
			e.mu.Lock()
			p := m.p
			e.mu.Unlock()
			if (watch < 0 || watch == i) && p != nil && p.exited() {
				return fmt.Errorf("%w: etcd %s: %v; its log ends:\n%s", ErrExited, m.name, exitText(p.err), tailFile(m.logPath, 2<<10))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clustertest: etcd not healthy: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// healthClient keeps no idle connections, so no transport goroutine outlives a check.
var healthClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// health asks member i's /health: an error when it does not answer, else whether it
// reports healthy.
func (e *Etcd) health(ctx context.Context, i int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.members[i].clientURL+"/health", nil)
	if err != nil {
		return false, err
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return false, err
	}
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"health":"true"`), nil
}

// stopAll kills every running member (test cleanup: the data is thrown away).
func (e *Etcd) stopAll() {
	e.mu.Lock()
	ps := make([]*proc, 0, len(e.members))
	for _, m := range e.members {
		if m.p != nil {
			ps = append(ps, m.p)
			m.p = nil
		}
	}
	e.mu.Unlock()
	for _, p := range ps {
		p.kill()
	}
}

// Leader returns the index of the member that is etcd's raft leader, from each running
// member's /metrics (etcd_server_is_leader); -1 and no error when none is.
func (e *Etcd) Leader(ctx context.Context) (int, error) {
	for i, m := range e.members {
		e.mu.Lock()
		running := m.p != nil
		e.mu.Unlock()
		if !running {
			continue
		}
		ok, err := e.isLeader(ctx, i)
		if err != nil {
			return -1, err
		}
		if ok {
			return i, nil
		}
	}
	return -1, nil
}

func (e *Etcd) isLeader(ctx context.Context, i int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.members[i].clientURL+"/metrics", nil)
	if err != nil {
		return false, err
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("clustertest: etcd %s /metrics: %w", e.members[i].name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd_server_is_leader "); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	return false, fmt.Errorf("clustertest: etcd %s /metrics has no etcd_server_is_leader", e.members[i].name)
}
