package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// The attack of issue 12: one connection pipelines attackLists LISTs of attackLimit tasks
// (attackTasks tasks with attackPayload-byte payloads) and reads nothing for a while.
// A page of all of them is ~4 MB, so an unbounded reply queue would hold gigabytes.
const (
	attackTasks   = 1000
	attackPayload = 4 << 10
	attackLists   = 3000
	attackLimit   = 1000
	// attackRSS is the bound on tockd's peak resident memory (VmHWM) through the attack.
	// A bare tockd peaks at ~15 MB and the tasks' payloads are 4 MB; the reply queue may
	// add its budget (-max-queued-reply-bytes, 4 MiB by default) and the Go runtime's
	// slack. Before the byte budget the queue pinned ~430 MB.
	attackRSS = 200 << 20
	// attackHold is the longest the attacker reads nothing while waiting for the server
	// to stop reading its requests (reply_stalls in STATS); that takes well under a
	// second, and the bound is generous for a loaded 2-core machine.
	attackHold = 20 * time.Second
)

// rawConn is a connection that speaks frames by hand, as an attacker would.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	dec  *protocol.Decoder
	buf  []byte
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, e2eWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rawConn{t: t, conn: conn, dec: protocol.NewDecoder(protocol.MaxFrameLimit), buf: make([]byte, 256<<10)}
	c.write(&protocol.Hello{ID: 1, Version: protocol.Version, Name: "attack", Role: protocol.RoleClient})
	if _, ok := c.recv().(*protocol.Welcome); !ok {
		t.Fatal("HELLO not answered WELCOME")
	}
	return c
}

func (c *rawConn) write(ms ...protocol.Message) {
	c.t.Helper()
	var b []byte
	for _, m := range ms {
		var err error
		if b, err = protocol.AppendFrame(b, m, protocol.MaxFrameLimit); err != nil {
			c.t.Fatal(err)
		}
	}
	c.conn.SetWriteDeadline(time.Now().Add(e2eWait))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// recv returns the next message; a read silent for e2eWait fails the test.
func (c *rawConn) recv() protocol.Message {
	c.t.Helper()
	for {
		m, err := c.dec.Next()
		if err != nil {
			c.t.Fatal(err)
		}
		if m != nil {
			return m
		}
		c.conn.SetReadDeadline(time.Now().Add(e2eWait))
		n, err := c.conn.Read(c.buf)
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		c.dec.Feed(c.buf[:n])
	}
}

// buildTockd builds this command (without -race, whatever the test's flags: the race
// detector's shadow memory would be measured too) and returns the binary's path.
func buildTockd(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command builds tockd for this test: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "tockd")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startTockd starts bin with args and returns its process and its client address, read
// from its "tockd listening" log line.
func startTockd(t *testing.T, bin string, args ...string) (*os.Process, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addrs := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, "tockd listening") {
				continue
			}
			for _, f := range strings.Fields(line) {
				if a, ok := strings.CutPrefix(f, "addr="); ok {
					addrs <- a
				}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case a := <-addrs:
		return cmd.Process, a
	case <-time.After(e2eWait):
		t.Fatal("tockd did not log its address")
		return nil, ""
	}
}

// peakRSS reads VmHWM, the process's peak resident set size, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// TestNeverReadingConnectionMemory is issue 12's memory attack against a real tockd
// process: one socket pipelines attackLists LISTs over attackTasks tasks of
// attackPayload bytes and reads nothing until the server stops reading its requests.
// tockd's peak RSS stays under attackRSS, another connection is answered meanwhile, and
// then every reply arrives, in order.
func TestNeverReadingConnectionMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc/PID/status (Linux) for the process's peak RSS")
	}
	if testing.Short() {
		t.Skip("builds tockd and moves ~3 GB of replies over loopback: not with -short")
	}
	proc, addr := startTockd(t, buildTockd(t), "-addr", "127.0.0.1:0", "-admin-addr", "off",
		"-log-level", "info")

	setup := dialRaw(t, addr)
	subs := make([]protocol.Message, attackTasks)
	for i := range subs {
		subs[i] = &protocol.Submit{ID: uint64(10 + i), Task: protocol.Task{ID: fmt.Sprintf("big%04d", i), Type: "t",
			Durability: protocol.Ephemeral, Payload: bytes.Repeat([]byte{byte(i)}, attackPayload),
			Schedule: protocol.Schedule{Kind: task.KindAfter, Delay: int64(time.Hour)}}}
	}
	setup.write(subs...)
	for i := range subs {
		if r, ok := setup.recv().(*protocol.TaskStatus); !ok {
			t.Fatalf("SUBMIT %d answered %v", i, r.Type())
		}
	}

	attacker := dialRaw(t, addr)
	lists := make([]protocol.Message, attackLists)
	for i := range lists {
		lists[i] = &protocol.List{ID: uint64(100 + i), Limit: attackLimit}
	}
	// The whole pipeline is ~50 KB, which the kernel's socket buffers take at once.
	attacker.write(lists...)

	// Hold: the attacker reads nothing until another connection sees the server stall
	// its reader (or the process passes the bound, or attackHold passes).
	deadline := time.Now().Add(attackHold)
	for ping := uint64(1000); ; ping++ {
		if rss := peakRSS(t, proc.Pid); rss > attackRSS {
			t.Fatalf("tockd's peak RSS reached %d MB with one connection that never reads, over the %d MB bound",
				rss>>20, attackRSS>>20)
		}
		setup.write(&protocol.Stats{ID: ping})
		st, ok := setup.recv().(*protocol.StatsReply)
		if !ok {
			t.Fatal("another connection's STATS was not answered")
		}
		if st.Counters["reply_stalls"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never stopped reading the attacker's requests within %v (peak RSS %d MB)",
				attackHold, peakRSS(t, proc.Pid)>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
	setup.write(&protocol.List{ID: 2, Limit: 1})
	if r, ok := setup.recv().(*protocol.TaskPage); !ok || len(r.Items) != 1 {
		t.Fatalf("another connection's LIST answered %v", r.Type())
	}

	for i := range attackLists {
		r := attacker.recv()
		p, ok := r.(*protocol.TaskPage)
		if !ok || p.ID != uint64(100+i) || len(p.Items) == 0 {
			t.Fatalf("reply %d: %v id %d, want a non-empty TASK_PAGE %d", i, r.Type(), r.RequestID(), 100+i)
		}
	}
	rss := peakRSS(t, proc.Pid)
	if rss > attackRSS {
		t.Fatalf("tockd's peak RSS reached %d MB with one connection that never reads, over the %d MB bound",
			rss>>20, attackRSS>>20)
	}
	t.Logf("tockd's peak RSS through the attack: %d MB", rss>>20)
}
