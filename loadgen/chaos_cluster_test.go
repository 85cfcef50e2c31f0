package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Ports of the cluster the test starts with cluster.sh: four groups of three (etcd
// clients, etcd peers, tockd clients, tockd admin), consecutive, as cluster.sh numbers
// them from its bases. They are drawn below the kernel's ephemeral range (32768 up on
// Linux), so that no port the kernel hands out meanwhile takes one.
const (
	clusterPortsLow  = 20000
	clusterPortsHigh = 32000
	clusterPorts     = 12
	// clusterUpAttempts is how many times up is tried, with fresh ports each time: a
	// port drawn free may be taken by another process before cluster.sh binds it.
	clusterUpAttempts = 3
	// clusterTimeout bounds each cluster.sh call (building tockd, etcd's start and
	// election, one tockd leading: ~5 s here; etcd's build the first time on a machine:
	// minutes) and, in the test, the whole run.
	clusterTimeout = 5 * time.Minute
)

// freePortBase returns a port p with p..p+clusterPorts-1 all free on 127.0.0.1 now.
func freePortBase(t *testing.T, rng *rand.Rand) int {
	t.Helper()
	for range 100 {
		base := clusterPortsLow + rng.IntN(clusterPortsHigh-clusterPortsLow-clusterPorts)
		var lns []net.Listener
		for p := base; p < base+clusterPorts; p++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == clusterPorts {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports in %d-%d", clusterPorts, clusterPortsLow, clusterPortsHigh)
	return 0
}

// clusterUp starts `make cluster`'s cluster (cluster.sh up) in a run dir of the test's,
// on free ports, and returns the run dir and the tockd nodes' client addresses;
// cleanup runs cluster.sh down.
func clusterUp(t *testing.T) (dir string, addrs []string) {
	t.Helper()
	sh, err := findClusterScript()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	script := func(env []string, args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, sh, args...)
		cmd.Env = append(os.Environ(), env...)
		return cmd.CombinedOutput()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	for attempt := 1; ; attempt++ {
		base := freePortBase(t, rng)
		env := []string{"TOCK_CLUSTER_DIR=" + dir, "ETCD_CLIENT_BASE=" + strconv.Itoa(base), "ETCD_PEER_BASE=" + strconv.Itoa(base+3),
			"TOCK_CLIENT_BASE=" + strconv.Itoa(base+6), "TOCK_ADMIN_BASE=" + strconv.Itoa(base+9)}
		out, err := script(env, "up")
		if err == nil {
			t.Cleanup(func() {
				if out, err := script(env, "down"); err != nil {
					t.Errorf("cluster.sh down: %v\n%s", err, out)
				}
			})
			for i := range 3 {
				addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(base+6+i))
			}
			return dir, addrs
		}
		// A failed up stops what it started (its ERR trap).
		if attempt == clusterUpAttempts {
			t.Fatalf("cluster.sh up, %d attempts: %v\n%s", attempt, err, out)
		}
		t.Logf("cluster.sh up on ports from %d failed, retrying with fresh ports: %v\n%s", base, err, out)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestChaosKillLeaderCluster runs a small durable load through `make cluster`'s cluster
// (3 tockd processes on a 3-member etcd, started by cluster.sh), killing the leader
// once under load as `make loadgen-cluster` does: no task is lost or refused, none runs
// after a confirmed ACK, the failover is measured, and the killed node is revived
// (cluster.sh restart) on its addresses.
func TestChaosKillLeaderCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 etcd members and 3 tockd processes")
	}
	dir, addrs := clusterUp(t)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()

	// 3,000 tasks at 1,000/s: the kill (after 1 s) falls in the middle of the submits
	// and the runs; the submits in flight at it are sent again once a node leads.
	c, err := parseFlags([]string{"-target", "server", "-addr", strings.Join(addrs, ","), "-durable",
		"-tasks", "3000", "-rate", "1000", "-batch", "50", "-producers", "2", "-concurrency", "256",
		"-chaos", "kill-leader:1s", "-chaos-kills", "1", "-cluster-dir", dir})
	if err != nil {
		t.Fatal(err)
	}
	progress := &lockedBuffer{}
	c.progress = progress // written by the progress line and the chaos loop at once
	res, err := run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res.print(&out)
	t.Logf("summary:\n%s", out.String())
	n, ch := res.Counts, res.Chaos
	if ch == nil || len(ch.Kills) != 1 || ch.Err != "" {
		t.Fatalf("chaos report %+v\nprogress:\n%s", ch, progress.String())
	}
	k := ch.Kills[0]
	if k.FailoverNs <= 0 || k.NewLeader == "" || k.NewLeader == k.Node || k.ReviveErr != "" {
		t.Fatalf("kill %+v", k)
	}
	if n.Lost != 0 || n.Rejected != 0 || n.Early != 0 || n.Unique != 3000 || n.DupAfterConfirmed != 0 || res.failed() {
		t.Fatalf("counts %+v (first submit error %q)", n, res.SubmitErr)
	}
	if ch.DupAfterUnconfirmed != n.Duplicates {
		t.Fatalf("duplicates %d, after an unconfirmed ACK %d", n.Duplicates, ch.DupAfterUnconfirmed)
	}
	// The revived node runs again, on the killed one's address: the run dir records a
	// live process of its for it.
	nodes, err := clusterNodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := readPid(dir, nodes[k.Node])
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPid(pid, dir); err != nil {
		t.Fatalf("revived node at %s: %v", k.Node, err)
	}
}
