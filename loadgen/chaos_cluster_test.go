package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/cluster"
)

// harnessCluster is a chaosCluster over server/cluster's processes: Leader through the
// same STATS probe loadgen uses, Kill with the harness's SIGKILL, Revive by starting
// tockd again on the killed node's addresses.
type harnessCluster struct {
	*leaderProbe
	t   testing.TB
	bin string
	eps string

	mu    sync.Mutex
	nodes map[string]*cluster.Node // guarded by mu; by client address
}

func (h *harnessCluster) node(addr string) (*cluster.Node, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.nodes[addr]
	if n == nil {
		return nil, fmt.Errorf("no node at %s", addr)
	}
	return n, nil
}

func (h *harnessCluster) Kill(_ context.Context, addr string) error {
	n, err := h.node(addr)
	if err != nil {
		return err
	}
	n.Kill()
	return nil
}

// fatal is what a harness call's t.Fatal raises in Revive, which runs on the chaos
// goroutine, where t.Fatal must not be called.
type fatal struct{ msg string }

// goroutineTB turns t.Fatal* into a panic with fatal, which Revive recovers.
type goroutineTB struct{ testing.TB }

func (g goroutineTB) Fatal(args ...any)                 { panic(fatal{fmt.Sprint(args...)}) }
func (g goroutineTB) Fatalf(format string, args ...any) { panic(fatal{fmt.Sprintf(format, args...)}) }
func (g goroutineTB) FailNow()                          { panic(fatal{"FailNow"}) }

func (h *harnessCluster) Revive(_ context.Context, addr string) (err error) {
	old, err := h.node(addr)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(fatal)
			if !ok {
				panic(p)
			}
			err = fmt.Errorf("revive %s: %s", old.Name(), f.msg)
		}
	}()
	n := cluster.StartTockd(goroutineTB{h.t}, h.bin, "-etcd", h.eps, "-node-name", old.Name(),
		"-addr", addr, "-advertise-addr", addr, "-admin-addr", old.AdminAddr())
	h.mu.Lock()
	h.nodes[addr] = n
	h.mu.Unlock()
	return nil
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

// TestChaosKillLeaderCluster runs a small durable load through 3 tockd processes on a
// 3-member etcd (server/cluster's harness), killing the leader once under load: no
// task is lost or refused, none runs after a confirmed ACK, the failover is measured,
// and the killed node is revived on its addresses.
func TestChaosKillLeaderCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 etcd members and 3 tockd processes")
	}
	e := cluster.StartEtcd(t, 3)
	bin := cluster.BuildTockd(t)
	eps := strings.Join(e.Endpoints(), ",")
	h := &harnessCluster{t: t, bin: bin, eps: eps, nodes: map[string]*cluster.Node{}}
	var addrs []string
	var nodes []*cluster.Node
	for i := range 3 {
		n := cluster.StartTockd(t, bin, "-etcd", eps, "-node-name", fmt.Sprintf("n%d", i+1))
		h.nodes[n.Addr()] = n
		addrs = append(addrs, n.Addr())
		nodes = append(nodes, n)
	}
	h.leaderProbe = newLeaderProbe(addrs)
	defer h.Close()
	// Bounds: generous for a loaded 2-core machine; they only fire when something hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cluster.WaitLeader(ctx, nodes...); err != nil {
		t.Fatal(err)
	}

	// 3,000 tasks at 1,000/s: the kill (after 1 s) falls in the middle of the submits
	// and the runs; the submits in flight at it are sent again once a node leads.
	c, err := parseFlags([]string{"-target", "server", "-addr", strings.Join(addrs, ","), "-durable",
		"-tasks", "3000", "-rate", "1000", "-batch", "50", "-producers", "2", "-concurrency", "256",
		"-chaos", "kill-leader:1s", "-chaos-kills", "1"})
	if err != nil {
		t.Fatal(err)
	}
	c.cluster = h
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
	// The revived node runs again, on the killed one's address.
	if rn, err := h.node(k.Node); err != nil || rn.Exited() {
		t.Fatalf("revived node at %s: %v", k.Node, err)
	}
}
