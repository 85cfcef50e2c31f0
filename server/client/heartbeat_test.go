package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// silentHB is the heartbeat the silent node states: its deadline is 3 of them.
const silentHB = 50 * time.Millisecond

// leaveBound bounds how long leaving a silent node may take: its deadline (150 ms) plus
// a redial, with slack for a loaded 2-core machine, and far below the 10 s a call waits
// (tockdtest.Limit) when the silence goes unnoticed.
const leaveBound = 3 * time.Second

// A node that stops answering while its socket stays open (a fake that completes the
// handshake, stating a heartbeat, then answers nothing: a frozen leader) is declared
// dead within three heartbeat intervals. The call in flight on it fails with
// ErrConnectionLost (ErrHeartbeat), and the next call goes to the next address, a live
// tockd.
func TestClientLeavesASilentNode(t *testing.T) {
	silent := startFakeHB(t, "127.0.0.1:0", silentHB)
	live := tockdtest.Start(t)
	c := dialT(t, silent.ln.Addr().String()+","+live.Addr)
	if got := c.Welcome().Heartbeat; got != silentHB {
		t.Fatalf("Welcome().Heartbeat = %v, want %v", got, silentHB)
	}
	start := time.Now()
	_, err := c.Submit(bounded(t), oneShot("a", "job", time.Hour), protocol.Ephemeral)
	if took := time.Since(start); !errors.Is(err, ErrConnectionLost) || !errors.Is(err, ErrHeartbeat) || took > leaveBound {
		t.Fatalf("Submit to a silent node: %v after %v; want ErrConnectionLost (ErrHeartbeat) within %v", err, took, leaveBound)
	}
	if _, err := c.Submit(bounded(t), oneShot("a", "job", time.Hour), protocol.Ephemeral); err != nil {
		t.Fatalf("Submit after the silent node was left: %v", err)
	}
	if c.Welcome().Node != "node-test" {
		t.Fatalf("now connected to %q, want the live node", c.Welcome().Node)
	}
	// The live tockd states a heartbeat too (DefaultHeartbeat without a store), and its
	// PONGs keep an idle connection alive.
	if got := c.Welcome().Heartbeat; got != tockd.DefaultHeartbeat {
		t.Fatalf("tockd's heartbeat = %v, want %v", got, tockd.DefaultHeartbeat)
	}
}

// A Worker whose node goes silent after the handshake (its SUBSCRIBE is never answered)
// leaves it within the deadline and serves at the next address.
func TestWorkerLeavesASilentNode(t *testing.T) {
	silent := startFakeHB(t, "127.0.0.1:0", silentHB)
	live := tockdtest.Start(t)
	c := dialT(t, live.Addr)
	w := newWorkerT(t, silent.ln.Addr().String()+","+live.Addr)
	ran := make(chan string, 1)
	if err := w.Handle("job", func(_ context.Context, f *Fire) error { ran <- f.TaskID; return nil }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runWorker(t, w) // returns once a SUBSCRIBE was accepted: the live node's
	if took := time.Since(start); took > leaveBound {
		t.Fatalf("the worker subscribed at the live node after %v; want within %v", took, leaveBound)
	}
	if _, err := c.Submit(bounded(t), oneShot("w", "job", 0), protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	if id := tockdtest.Receive(t, ran, "the worker running the task at the live node"); id != "w" {
		t.Fatalf("ran %q", id)
	}
	waitState(t, c, "w", task.Succeeded)
}

// A node that accepts connections but never answers HELLO (a frozen process: the kernel
// still completes the TCP handshake) holds a redial for no longer than the heartbeat
// deadline the last WELCOME stated, not for the whole DialTimeout (5 s).
func TestRedialSkipsANodeFrozenAtTheHandshake(t *testing.T) {
	silent := startFakeHB(t, "127.0.0.1:0", silentHB)
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			nc, err := frozen.Accept()
			if err != nil {
				return
			}
			held = append(held, nc) // read nothing, answer nothing
		}
	}()
	t.Cleanup(func() {
		frozen.Close()
		<-accepted
		for _, nc := range held {
			nc.Close()
		}
	})
	live := tockdtest.Start(t)
	c := dialT(t, silent.ln.Addr().String()+","+frozen.Addr().String()+","+live.Addr)
	start := time.Now()
	if _, err := c.Submit(bounded(t), oneShot("a", "job", time.Hour), protocol.Ephemeral); !errors.Is(err, ErrHeartbeat) {
		t.Fatalf("Submit to the silent node: %v, want ErrHeartbeat", err)
	}
	// The redial tries the frozen node first, then the live one.
	if _, err := c.Submit(bounded(t), oneShot("a", "job", time.Hour), protocol.Ephemeral); err != nil {
		t.Fatalf("Submit after leaving the silent node: %v", err)
	}
	if took := time.Since(start); took > leaveBound {
		t.Fatalf("reaching the live node past a frozen one took %v; want within %v (DialTimeout is %v)", took, leaveBound, DefaultDialTimeout)
	}
}
