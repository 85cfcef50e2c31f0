package tockd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/internal/leaktest"
	"github.com/tock-sched/tock/server/protocol"
)

// waitConns polls STATS on c until the server serves want connections (c included).
func (c *client) waitConns(id uint64, want int64) {
	c.t.Helper()
	var got int64
	if !waitUntil(func() bool {
		got = c.call(&protocol.Stats{ID: id}).(*protocol.StatsReply).Gauges["connections"]
		return got == want
	}) {
		c.t.Fatalf("connections gauge %d, want %d within %v", got, want, waitBound)
	}
}

func TestMaxConns(t *testing.T) {
	ts := startServer(t, Options{MaxConns: 2})
	a := connect(t, ts.addr)
	b := connect(t, ts.addr)
	extra := dial(t, ts.addr)
	wantError(t, extra.recv(), protocol.CodeOverloaded, "")
	extra.wantClosed()
	extra.nc.Close()
	b.ping(2)
	a.nc.Close()
	b.waitConns(3, 1)
	connect(t, ts.addr).ping(4) // a freed slot is usable again
}

// slowReader connects, makes a task whose GET reply is ~60 KiB, and writes n GETs of it
// without ever reading the replies: megabytes the kernel's socket buffers cannot hold.
func slowReader(t *testing.T, addr string, n int) *client {
	t.Helper()
	c := connect(t, addr)
	w := wireTask("big", time.Hour)
	w.Payload = make([]byte, 60<<10)
	c.call(&protocol.Submit{ID: 2, Task: w})
	var buf []byte
	for i := range n {
		buf, _ = protocol.AppendFrame(buf, &protocol.Get{ID: uint64(10 + i), TaskRef: protocol.TaskRef{TaskID: "big"}}, 0)
	}
	c.write(buf)
	return c
}

// stuck reports whether some connection's reply queue is full: its reader is blocked in
// send, its writer in a Write the peer does not drain.
func (s *Server) stuck() bool {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	for c := range s.conns.served {
		if len(c.out) == cap(c.out) {
			return true
		}
	}
	return false
}

// waitStuck waits until some connection's reply queue is full.
func waitStuck(t *testing.T, s *Server) {
	t.Helper()
	if !waitUntil(s.stuck) {
		t.Fatalf("no connection's reply queue filled within %v", waitBound)
	}
}

func TestSlowReaderIsDisconnected(t *testing.T) {
	e, err := task.New(task.WithOptions(task.Options{Workers: 1, MaxPayload: 64 << 10}))
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{Engine: e, MaxFrame: 128 << 10, MaxPendingPerConn: 4, WriteTimeout: 300 * time.Millisecond})
	good := connect(t, ts.addr)
	slowReader(t, ts.addr, 400) // 24 MiB of replies
	waitStuck(t, ts.srv)
	good.ping(2) // served while the slow one is stuck
	good.waitConns(3, 1)
	good.ping(4)
}

func TestShutdownGraceful(t *testing.T) {
	ts := startServer(t, Options{EngineOptions: []task.Option{task.WithWorkers(1)}})
	idle := connect(t, ts.addr)
	noHello := dial(t, ts.addr)
	busy := connect(t, ts.addr)
	var buf []byte
	const n = 50
	for i := range n {
		buf, _ = protocol.AppendFrame(buf, &protocol.Submit{ID: uint64(10 + i), Task: wireTask(fmt.Sprint("s", i), time.Hour)}, 0)
	}
	busy.write(buf)
	idle.ping(2) // the server has taken all three connections

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		done <- ts.srv.Shutdown(ctx)
	}()
	for _, c := range []*client{idle, noHello} {
		wantError(t, c.recv(), protocol.CodeShuttingDown, "")
		c.wantClosed()
		c.nc.Close()
	}
	// Every request the server read before draining is answered, in order, then
	// SHUTTING_DOWN; nothing after it.
	next := uint64(10)
	for {
		r := busy.recv()
		if e, ok := r.(*protocol.Error); ok {
			wantError(t, e, protocol.CodeShuttingDown, "")
			break
		}
		if r.Type() != protocol.TypeTaskStatus || r.RequestID() != next {
			t.Fatalf("got %v id %d, want TASK_STATUS id %d", r.Type(), r.RequestID(), next)
		}
		next++
	}
	busy.wantClosed()
	busy.nc.Close()
	t.Logf("%d of %d pipelined submits were answered before the drain", next-10, n)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := ts.srv.Shutdown(context.Background()); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("second Shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", ts.addr, waitBound); err == nil {
		t.Fatal("the listener still accepts")
	}
	if _, err := ts.engine.Submit(task.Task{ID: "x", Type: "t", Schedule: task.After(0)}); !errors.Is(err, task.ErrClosed) {
		t.Fatalf("the server's own engine is not closed: %v", err)
	}
	leaktest.VerifyNone(t)
}

func TestShutdownForcesStuckConnection(t *testing.T) {
	e, err := task.New(task.WithOptions(task.Options{Workers: 1, MaxPayload: 64 << 10}))
	if err != nil {
		t.Fatal(err)
	}
	// A WriteTimeout far beyond the test: only Shutdown's deadline can end the connection.
	ts := startServer(t, Options{Engine: e, MaxFrame: 128 << 10, MaxPendingPerConn: 4, WriteTimeout: time.Hour})
	good := connect(t, ts.addr)
	slowReader(t, ts.addr, 400)
	waitStuck(t, ts.srv)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	good.wantClosed() // after SHUTTING_DOWN, unless the forced close came first
	if n := ts.srv.conns.numConns(); n != 0 {
		t.Fatalf("%d connections left after Shutdown", n)
	}
}

// queuedPeak is the most reply bytes any served connection has had queued.
func (s *Server) queuedPeak() int64 {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	var p int64
	for c := range s.conns.served {
		p = max(p, c.queuedPeak.Load())
	}
	return p
}

// A connection that pipelines thousands of LISTs over large tasks and never reads holds
// at most MaxQueuedReplyBytes of replies: its reader stops reading (back-pressure, not
// an error) while other connections are served; once it reads, every reply arrives.
func TestQueuedReplyBytesBounded(t *testing.T) {
	const bound, pages = 512 << 10, 2000
	// WriteTimeout is far above the test's stall, so that only a broken bound fails it.
	ts := startServer(t, Options{MaxFrame: 256 << 10, MaxQueuedReplyBytes: bound, WriteTimeout: time.Minute})
	c := connect(t, ts.addr)
	for i := range 8 { // a page of ~64 KiB
		w := wireTask(fmt.Sprintf("big%d", i), time.Hour)
		w.Payload = make([]byte, 8<<10)
		if r, ok := c.call(&protocol.Submit{ID: 2, Task: w}).(*protocol.TaskStatus); !ok {
			t.Fatalf("SUBMIT answered %v", r.Type())
		}
	}
	var buf []byte
	for i := range pages {
		buf, _ = protocol.AppendFrame(buf, &protocol.List{ID: uint64(100 + i), Limit: 8}, 0)
	}
	c.write(buf) // ~40 KB of requests; ~128 MB of replies, none read yet
	if !waitUntil(func() bool { return ts.srv.Stats().ReplyStalls != 0 }) {
		t.Fatalf("the reader never stalled within %v; queued reply bytes peaked at %d", waitBound, ts.srv.queuedPeak())
	}
	other := connect(t, ts.addr)
	other.ping(2)
	if r, ok := other.call(&protocol.List{ID: 3, Limit: 1}).(*protocol.TaskPage); !ok || len(r.Items) != 1 {
		t.Fatalf("another connection's LIST answered %v %+v", r.Type(), r)
	}
	// The writer moves in bursts while the kernel's socket buffers fill, so the gauge can
	// read 0 between two of them; once they are full it holds the stalled replies.
	if !waitUntil(func() bool {
		st := other.call(&protocol.Stats{ID: 4}).(*protocol.StatsReply)
		q := st.Gauges["queued_reply_bytes"]
		if q > bound || st.Counters["reply_stalls"] == 0 {
			t.Fatalf("STATS queued_reply_bytes %d, reply_stalls %d: want at most %d, and stalls", q, st.Counters["reply_stalls"], bound)
		}
		return q > 0
	}) {
		t.Fatalf("STATS queued_reply_bytes still 0 after %v", waitBound)
	}
	if p := ts.srv.queuedPeak(); p > bound {
		t.Fatalf("queued reply bytes peaked at %d, over MaxQueuedReplyBytes %d", p, bound)
	}
	for i := range pages {
		r := c.recv()
		if p, ok := r.(*protocol.TaskPage); !ok || p.ID != uint64(100+i) || len(p.Items) != 8 {
			t.Fatalf("reply %d: %v id %d, want TASK_PAGE %d of 8 items", i, r.Type(), r.RequestID(), 100+i)
		}
	}
	if p := ts.srv.queuedPeak(); p > bound {
		t.Fatalf("queued reply bytes peaked at %d, over MaxQueuedReplyBytes %d", p, bound)
	}
	c.ping(5)
}
