package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

func TestParseChaos(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"kill-leader:2s":    2 * time.Second,
		"kill-leader:1s":    time.Second, // the minimum itself
		"kill-leader:1m30s": 90 * time.Second,
	} {
		s, err := parseChaos(in)
		if err != nil || s.Kind != chaosKillLeader || s.Every != want {
			t.Errorf("%q: %+v, %v", in, s, err)
		}
	}
	for _, in := range []string{"", "kill-leader", "kill-leader:", "kill-leader:999ms", "kill-leader:0s",
		"kill-leader:-2s", "kill-leader:2", "kill-follower:2s", "2s", "kill-leader:2s:3s"} {
		if _, err := parseChaos(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestChaosFlags(t *testing.T) {
	base := []string{"-target", "server", "-addr", "127.0.0.1:1,127.0.0.1:2", "-durable", "-chaos", "kill-leader:2s"}
	c, err := parseFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	if c.chaosSpec.Every != 2*time.Second || c.submitRetry != defaultChaosSubmitRetry {
		t.Fatalf("spec %+v, submit retry %v", c.chaosSpec, c.submitRetry)
	}
	c, err = parseFlags(append(base, "-submit-retry", "0s"))
	if err != nil || c.submitRetry != 0 {
		t.Fatalf("explicit -submit-retry 0s: %v, %v", c.submitRetry, err)
	}
	if c, err = parseFlags([]string{"-target", "server"}); err != nil || c.submitRetry != 0 {
		t.Fatalf("without chaos: submit retry %v, %v", c.submitRetry, err)
	}
	for args, want := range map[string]string{
		"-target server -addr 127.0.0.1:1,127.0.0.1:2 -chaos kill-leader:2s":                          "-durable",
		"-target server -addr 127.0.0.1:1 -durable -chaos kill-leader:2s":                             "the cluster's nodes",
		"-target server,beanstalkd -addr 127.0.0.1:1,127.0.0.1:2 -durable -chaos kill-leader:2s":      "-target server",
		"-target core -chaos kill-leader:2s":                                                          "-target server",
		"-target server -addr 127.0.0.1:1,127.0.0.1:2 -durable -chaos kill-leader:500ms":              "below 1s",
		"-target server -addr 127.0.0.1:1,127.0.0.1:2 -durable -chaos crash:2s":                       "kill-leader:EVERY",
		"-target server -addr 127.0.0.1:1,127.0.0.1:2 -durable -chaos kill-leader:2s -chaos-kills -1": "-chaos-kills",
		"-target server -submit-retry -1s":                                                            "-submit-retry",
	} {
		_, err := parseFlags(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %q", args, err, want)
		}
	}
}

func TestFailoverStats(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		in          []time.Duration
		lo, med, hi time.Duration
	}{
		{nil, 0, 0, 0},
		{ms(1900), 1900 * time.Millisecond, 1900 * time.Millisecond, 1900 * time.Millisecond},
		{ms(2500, 1800), 1800 * time.Millisecond, 2150 * time.Millisecond, 2500 * time.Millisecond},
		{ms(2100, 1700, 2600), 1700 * time.Millisecond, 2100 * time.Millisecond, 2600 * time.Millisecond},
		{ms(4, 1, 3, 2), time.Millisecond, 2500 * time.Microsecond, 4 * time.Millisecond},
	} {
		orig := append([]time.Duration(nil), tc.in...)
		lo, med, hi := failoverStats(tc.in)
		if lo != tc.lo || med != tc.med || hi != tc.hi {
			t.Errorf("%v: %v %v %v, want %v %v %v", tc.in, lo, med, hi, tc.lo, tc.med, tc.hi)
		}
		for i := range orig {
			if orig[i] != tc.in[i] {
				t.Errorf("failoverStats reordered its input: %v", tc.in)
			}
		}
	}
}

// TestCheckPid: the test process's own pid is refused for a run dir its command line
// does not name, and accepted for the directory of its own binary (which it names).
func TestCheckPid(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "tock-cluster")
	if err := checkPid(os.Getpid(), fake); !errors.Is(err, errNotOurs) {
		t.Fatalf("own pid with a fake run dir: %v, want errNotOurs", err)
	}
	exe := os.Args[0]
	if !filepath.IsAbs(exe) {
		t.Skipf("the test binary's path %q is relative: no directory its command line names as a path", exe)
	}
	if err := checkPid(os.Getpid(), filepath.Dir(exe)); err != nil {
		t.Fatalf("own pid with its binary's directory: %v", err)
	}
	if err := checkPid(1<<30, fake); err == nil || errors.Is(err, errNotOurs) {
		t.Fatalf("a pid that does not run: %v", err)
	}
}

// writeRunDir makes a run dir as cluster.sh up leaves it, for nodes n1..n3 at addrs,
// every pid the given one.
func writeRunDir(t *testing.T, addrs []string, pid int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tock-cluster")
	if err := os.MkdirAll(filepath.Join(dir, "cmd"), 0o755); err != nil {
		t.Fatal(err)
	}
	var pids strings.Builder
	for i, a := range addrs {
		name := fmt.Sprintf("tockd-n%d", i+1)
		args := []string{dir + "/bin/tockd", "-addr", a, "-admin-addr", "127.0.0.1:9", "-node-name", name}
		if err := os.WriteFile(filepath.Join(dir, "cmd", name), []byte(strings.Join(args, "\x00")+"\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&pids, "%s %d\n", name, pid)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids"), []byte("etcd-m0 1\n"+pids.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLocalClusterRefusesForeignPid: a run dir whose pids names the test process (a
// recycled pid) is read, and Kill refuses that pid: the test survives to check.
func TestLocalClusterRefusesForeignPid(t *testing.T) {
	addrs := []string{"127.0.0.1:17460", "127.0.0.1:17461", "127.0.0.1:17462"}
	dir := writeRunDir(t, addrs, os.Getpid())
	names, err := clusterNodes(dir)
	if err != nil || len(names) != 3 || names["127.0.0.1:17461"] != "tockd-n2" {
		t.Fatalf("nodes %v, %v", names, err)
	}
	if pid, err := readPid(dir, "tockd-n3"); err != nil || pid != os.Getpid() {
		t.Fatalf("pid %d, %v", pid, err)
	}
	if _, err := readPid(dir, "tockd-n9"); err == nil {
		t.Fatal("readPid of an unknown node: no error")
	}
	lc, err := newLocalCluster(dir, addrs, "true {name}")
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if err := lc.Kill(context.Background(), addrs[1]); !errors.Is(err, errNotOurs) {
		t.Fatalf("Kill of the test's own pid: %v, want errNotOurs", err)
	}
	if _, err := newLocalCluster(dir, []string{"127.0.0.1:1"}, "true"); err == nil {
		t.Fatal("an address that is no node of the cluster: no error")
	}
	if _, err := newLocalCluster(t.TempDir(), addrs, "true"); err == nil {
		t.Fatal("a run dir without a cluster: no error")
	}
}

// TestLocalClusterRevive runs the revive template with the node's short name and the
// run dir in TOCK_CLUSTER_DIR; a failing command is an error carrying its output.
func TestLocalClusterRevive(t *testing.T) {
	addrs := []string{"127.0.0.1:17460", "127.0.0.1:17461"}
	dir := writeRunDir(t, addrs, os.Getpid())
	out := filepath.Join(t.TempDir(), "revived")
	lc, err := newLocalCluster(dir, addrs, `echo "{name} $TOCK_CLUSTER_DIR" >`+shellQuote(out))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if err := lc.Revive(context.Background(), addrs[1]); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "n2 "+dir+"\n" {
		t.Fatalf("revive command saw %q", b)
	}
	lc.revive = "echo node {name} is running >&2; exit 1"
	if err := lc.Revive(context.Background(), addrs[0]); err == nil || !strings.Contains(err.Error(), "node n1 is running") {
		t.Fatalf("failing revive: %v", err)
	}
}

// fakeCluster leads with nodes in turn: after a kill, no node leads for gap polls, then
// the next one does.
type fakeCluster struct {
	mu      sync.Mutex
	addrs   []string
	leader  int // index; -1 while electing
	gap     int // polls left without a leader
	next    int
	killed  []string
	revived []string
}

func (f *fakeCluster) Leader(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader < 0 {
		if f.gap > 0 {
			f.gap--
			return "", nil
		}
		f.leader = f.next
	}
	return f.addrs[f.leader], nil
}

func (f *fakeCluster) Kill(_ context.Context, addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, addr)
	f.next = (f.leader + 1) % len(f.addrs)
	f.leader, f.gap = -1, 3
	return nil
}

func (f *fakeCluster) Revive(_ context.Context, addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revived = append(f.revived, addr)
	return nil
}

// TestChaosKillRounds drives two kill rounds on a fake cluster and checks the records:
// who was killed and revived, a failover of at least the polls without a leader, and
// the unconfirmed ACKs attributed to the kill they followed.
func TestChaosKillRounds(t *testing.T) {
	f := &fakeCluster{addrs: []string{"a", "b", "c"}}
	rec := NewRecorder(10)
	clk := clock{t0: time.Now()}
	var log bytes.Buffer
	c := &chaosRun{spec: chaosSpec{chaosKillLeader, time.Second}, cl: f, rec: rec, clk: clk, start: clk.now(), log: &log}
	rec.Acked(0, false) // before any kill
	if err := c.kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.Acked(1, false)
	rec.Acked(2, false)
	if err := c.kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.Acked(3, false)
	rec.Acked(3, true)
	rec.Record(3, 0, 0)
	rec.Record(3, 0, 0) // a duplicate after a confirmed ACK
	if strings.Join(f.killed, ",") != "a,b" || strings.Join(f.revived, ",") != "a,b" {
		t.Fatalf("killed %v, revived %v", f.killed, f.revived)
	}
	r := c.report(rec.Summary())
	if len(r.Kills) != 2 || r.Kills[0].NewLeader != "b" || r.Kills[1].NewLeader != "c" {
		t.Fatalf("kills %+v", r.Kills)
	}
	for _, k := range r.Kills {
		// Three polls without a leader, chaosPoll apart, come before the new one.
		if k.FailoverNs < int64(3*chaosPoll) {
			t.Errorf("failover %v shorter than 3 polls", time.Duration(k.FailoverNs))
		}
	}
	if r.UnconfirmedBeforeKills != 1 || r.Kills[0].UnconfirmedAcks != 2 || r.Kills[1].UnconfirmedAcks != 1 {
		t.Fatalf("unconfirmed before %d, per kill %d %d", r.UnconfirmedBeforeKills, r.Kills[0].UnconfirmedAcks, r.Kills[1].UnconfirmedAcks)
	}
	if r.Duplicates != 1 || r.DupAfterConfirmed != 1 || r.DupAfterUnconfirmed != 0 {
		t.Fatalf("duplicates %+v", r)
	}
	if r.FailoverMinNs > r.FailoverMedianNs || r.FailoverMedianNs > r.FailoverMaxNs || r.FailoverMinNs <= 0 {
		t.Fatalf("failover stats %d %d %d", r.FailoverMinNs, r.FailoverMedianNs, r.FailoverMaxNs)
	}
	var out bytes.Buffer
	r.print(&out)
	if !strings.Contains(out.String(), "duplicates 1, of which after an unconfirmed ACK 0 (after a confirmed ACK 1") ||
		!strings.Contains(out.String(), "2 kills") || !strings.Contains(log.String(), "killed the leader a") {
		t.Fatalf("summary:\n%s\nlog:\n%s", out.String(), log.String())
	}
}

// TestRecorderAcked: a duplicate after a confirmed ACK is counted and fails the run; one
// after only unconfirmed ACKs does not.
func TestRecorderAcked(t *testing.T) {
	r := NewRecorder(3)
	r.Record(0, 0, 1)
	r.Acked(0, false)
	r.Record(0, 0, 2) // redelivered after an unconfirmed ACK: at-least-once
	r.Acked(0, true)
	r.Record(1, 0, 1)
	r.Acked(1, true)
	r.Acked(7, true) // out of range: ignored
	r.Record(2, 0, 1)
	if c := r.Summary(); c.Duplicates != 1 || c.DupAfterConfirmed != 0 || c.UnconfirmedAcks != 1 || c.Failed() {
		t.Fatalf("counts %+v", c)
	}
	if !r.Ran(1) || r.Ran(-1) || r.Ran(3) {
		t.Fatal("Ran")
	}
	r.Record(1, 0, 3) // again after a confirmed ACK
	if c := r.Summary(); c.Duplicates != 2 || c.DupAfterConfirmed != 1 || !c.Failed() {
		t.Fatalf("counts %+v", c)
	}
}

// TestRetrying: a call that fails without an answer is sent again for the tasks still
// open, EXISTS on a retry counts as accepted, a task that ran meanwhile is not sent
// again, and a definite refusal is not retried.
func TestRetrying(t *testing.T) {
	rec := NewRecorder(10)
	var calls [][]string
	fake := func(_ context.Context, lo int, ts []task.Task) ([]error, error) {
		var ids []string
		for _, x := range ts {
			ids = append(ids, x.ID)
		}
		calls = append(calls, ids)
		switch len(calls) {
		case 1:
			rec.Record(lo+1, 0, 0) // task "1" ran: its submit got through before the loss
			return nil, errors.New("connection reset")
		case 2:
			errs := make([]error, len(ts))
			errs[0] = &protocol.Error{Code: protocol.CodeExists}     // "0": the first try got through
			errs[1] = &protocol.Error{Code: protocol.CodeOverloaded} // "2": again
			errs[2] = &protocol.Error{Code: protocol.CodeInvalidTask}
			errs[3] = &protocol.Error{Code: protocol.CodeUncertain} // "4": may have landed
			return errs, nil
		default:
			return make([]error, len(ts)), nil
		}
	}
	ts := []task.Task{{ID: "0"}, {ID: "1"}, {ID: "2"}, {ID: "3"}, {ID: "4"}}
	errs, err := retrying(fake, rec, 10*time.Second)(context.Background(), 0, ts)
	if err != nil {
		t.Fatal(err)
	}
	want := "[0 1 2 3 4] [0 2 3 4] [2 4]"
	if got := fmt.Sprint(calls); got != "["+want+"]" {
		t.Fatalf("calls %s, want [%s]", got, want)
	}
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || !errors.Is(errs[3], protocol.ErrInvalidTask) || errs[4] != nil {
		t.Fatalf("errs %v", errs)
	}

	// EXISTS on the first try is another task's ID: an error. A window that ends stops
	// the retries with the last error.
	calls = nil
	fail := func(_ context.Context, _ int, ts []task.Task) ([]error, error) {
		calls = append(calls, nil)
		errs := make([]error, len(ts))
		for k, x := range ts {
			if x.ID == "0" {
				errs[k] = &protocol.Error{Code: protocol.CodeExists}
			} else {
				errs[k] = &protocol.Error{Code: protocol.CodeNotLeader}
			}
		}
		return errs, nil
	}
	errs, _ = retrying(fail, NewRecorder(2), 120*time.Millisecond)(context.Background(), 0, ts[:2])
	if !errors.Is(errs[0], protocol.ErrExists) || !errors.Is(errs[1], protocol.ErrNotLeader) || len(calls) < 2 {
		t.Fatalf("errs %v after %d calls", errs, len(calls))
	}
}
