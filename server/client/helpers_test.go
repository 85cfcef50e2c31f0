package client

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

func TestMain(m *testing.M) { tockdtest.Main(m) }

// bounded is a context for one call: it ends at tockdtest.Limit or with the test.
func bounded(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tockdtest.Limit)
	t.Cleanup(cancel)
	return ctx
}

func dialT(t *testing.T, addr string, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(bounded(t), addr, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// oneShot is a task due after d.
func oneShot(id, typ string, d time.Duration) task.Task {
	return task.Task{ID: id, Type: typ, Schedule: task.After(d)}
}

// waitState polls GET (observing only) until the task is in state want.
func waitState(t *testing.T, c *Client, id string, want task.State) protocol.Info {
	t.Helper()
	var in protocol.Info
	tockdtest.Eventually(t, fmt.Sprintf("task %s %v", id, want), func() bool {
		var err error
		in, err = c.Get(bounded(t), "", id)
		return err == nil && in.State == want
	})
	return in
}

// fake is a scripted server: it completes the handshake, then hands every request to
// the test on reqs and answers only what the test tells it to.
type fake struct {
	hb     time.Duration // the heartbeat its WELCOME states (0: none)
	max    uint64        // the max_frame its WELCOME states
	leader string        // when set, its WELCOME says it follows this leader
	parts  uint64        // the partitions its WELCOME states (0: none)
	prev   uint64        // the partition_rev its WELCOME states
	node   string        // the node its WELCOME names ("": fake)
	ln     net.Listener
	reqs   chan fakeReq
	wg     sync.WaitGroup
	mu     sync.Mutex
	ncs    []net.Conn
}

// fakeMaxFrame is the max_frame a fake's WELCOME states unless a test sets another.
const fakeMaxFrame = 1 << 20

type fakeReq struct {
	nc net.Conn
	m  protocol.Message
}

func startFake(t *testing.T, addr string) *fake {
	t.Helper()
	return startFakeHB(t, addr, 0)
}

// startFakeHB is startFake with a WELCOME that states heartbeat hb.
func startFakeHB(t *testing.T, addr string, hb time.Duration) *fake {
	t.Helper()
	return startFakeWelcome(t, addr, hb, fakeMaxFrame)
}

// startFakeWelcome is startFake with a WELCOME that states heartbeat hb and max_frame
// maxFrame.
func startFakeWelcome(t *testing.T, addr string, hb time.Duration, maxFrame uint64) *fake {
	t.Helper()
	return listenFake(t, addr, &fake{hb: hb, max: maxFrame})
}

// startFakeFollower is startFake with a WELCOME that says it follows leader.
func startFakeFollower(t *testing.T, leader string) *fake {
	t.Helper()
	return listenFake(t, "127.0.0.1:0", &fake{max: fakeMaxFrame, leader: leader})
}

// listenFake starts f, with its WELCOME's fields set, on addr.
func listenFake(t *testing.T, addr string, f *fake) *fake {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f.ln, f.reqs = ln, make(chan fakeReq, 64)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.ncs = append(f.ncs, nc)
			f.mu.Unlock()
			f.wg.Add(1)
			go f.serve(nc)
		}
	}()
	t.Cleanup(f.close)
	return f
}

func (f *fake) serve(nc net.Conn) {
	defer f.wg.Done()
	dec := protocol.NewDecoder(0)
	buf := make([]byte, 4096)
	hello := true
	for {
		n, err := nc.Read(buf)
		dec.Feed(buf[:n])
		for {
			m, derr := dec.Next()
			if m == nil || derr != nil {
				break
			}
			if hello {
				hello = false
				node := f.node
				if node == "" {
					node = "fake"
				}
				f.send(nc, &protocol.Welcome{ID: m.RequestID(), Version: 1, Name: "fake", Node: node, MaxFrame: f.max, Heartbeat: int64(f.hb),
					Follower: f.leader != "", Leader: f.leader, Partitions: f.parts, PartitionRev: f.prev})
				continue
			}
			f.reqs <- fakeReq{nc, m}
		}
		if err != nil {
			return
		}
	}
}

func (f *fake) send(nc net.Conn, m protocol.Message) {
	b, _ := protocol.AppendFrame(nil, m, 0)
	_, _ = nc.Write(b)
}

// next returns the next request the fake received.
func (f *fake) next(t *testing.T) fakeReq {
	t.Helper()
	return tockdtest.Receive(t, f.reqs, "a request at the fake server")
}

// close stops accepting, drops every connection and waits for the fake's goroutines.
func (f *fake) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, nc := range f.ncs {
		nc.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
