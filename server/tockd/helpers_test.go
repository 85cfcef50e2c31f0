package tockd

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"
)

// baseline ignores the goroutines that exist before any test runs (ants starts a default
// pool at init), so tests can check for leaks with goleak.VerifyNone(t, baseline).
var baseline goleak.Option

func TestMain(m *testing.M) {
	baseline = goleak.IgnoreCurrent()
	goleak.VerifyTestMain(m, baseline)
}

// replyWait bounds every wait for a reply or a close. A loopback reply takes
// microseconds; the bound is generous so that a loaded CI machine never fails a correct
// test, and exists only so that a broken server fails the test instead of hanging it.
const replyWait = 10 * time.Second

// testServer is a live server on 127.0.0.1 with its engine.
type testServer struct {
	srv    *Server
	addr   string
	engine *task.Engine
}

// startServer starts a server on a fresh loopback port. If opts has no Engine, one is
// made (2 workers). Cleanup shuts the server down, waits for Serve to return, closes
// opts.Engine (the test's engine is handed over; closing it twice is harmless) and
// checks that no goroutine leaked.
func startServer(t *testing.T, opts Options) *testServer {
	t.Helper()
	if opts.Engine == nil && opts.EngineOptions == nil {
		e, err := task.New(task.WithWorkers(2))
		if err != nil {
			t.Fatal(err)
		}
		opts.Engine = e
	}
	ownEngine := opts.Engine
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), replyWait)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, ErrServerClosed) {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		if ownEngine != nil {
			if err := ownEngine.Close(ctx); err != nil && !errors.Is(err, task.ErrClosed) {
				t.Errorf("engine Close: %v", err)
			}
		}
		goleak.VerifyNone(t, baseline)
	})
	return &testServer{srv: srv, addr: ln.Addr().String(), engine: srv.Engine()}
}

// client speaks the wire format on one raw connection.
type client struct {
	t     *testing.T
	nc    net.Conn
	dec   *protocol.Decoder
	buf   []byte
	beats int // heartbeats (PONG with ID 0) next skipped
}

// dial connects without a handshake.
func dial(t *testing.T, addr string) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, replyWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, dec: protocol.NewDecoder(protocol.MaxFrameLimit), buf: make([]byte, 64<<10)}
}

// connect dials and completes the handshake as a client.
func connect(t *testing.T, addr string) *client {
	t.Helper()
	c := dial(t, addr)
	c.hello(&protocol.Hello{ID: 1, Version: protocol.Version, Name: "test", Role: protocol.RoleClient})
	return c
}

// hello sends h and requires a WELCOME.
func (c *client) hello(h *protocol.Hello) *protocol.Welcome {
	c.t.Helper()
	c.send(h)
	w, ok := c.recv().(*protocol.Welcome)
	if !ok {
		c.t.Fatalf("want WELCOME")
	}
	return w
}

// send writes one message as a frame.
func (c *client) send(m protocol.Message) {
	c.t.Helper()
	b, err := protocol.AppendFrame(nil, m, protocol.MaxFrameLimit)
	if err != nil {
		c.t.Fatalf("encode %v: %v", m.Type(), err)
	}
	c.write(b)
}

// write writes raw bytes.
func (c *client) write(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(replyWait))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next returns the next message, or the read error (io.EOF once the server closed).
// The server's heartbeats (PONG with ID 0) are skipped and counted in c.beats.
func (c *client) next() (protocol.Message, error) {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(replyWait))
	for {
		m, err := c.dec.Next()
		if err != nil {
			c.t.Fatalf("the server sent a frame the codec refuses: %v", err)
		}
		if p, ok := m.(*protocol.Pong); ok && p.ID == 0 {
			c.beats++
			continue
		}
		if m != nil {
			return m, nil
		}
		n, rerr := c.nc.Read(c.buf)
		c.dec.Feed(c.buf[:n])
		if rerr != nil && n == 0 {
			return nil, rerr
		}
	}
}

// recv returns the next message; a read error fails the test.
func (c *client) recv() protocol.Message {
	c.t.Helper()
	m, err := c.next()
	if err != nil {
		c.t.Fatalf("waiting for a reply: %v", err)
	}
	return m
}

// call sends m and returns the reply, which must carry m's request ID.
func (c *client) call(m protocol.Message) protocol.Message {
	c.t.Helper()
	c.send(m)
	r := c.recv()
	if r.RequestID() != m.RequestID() {
		c.t.Fatalf("%v reply has id %d, want %d", r.Type(), r.RequestID(), m.RequestID())
	}
	return r
}

// wantError requires r to be an ERROR with code (and field, if not "-").
func wantError(t *testing.T, r protocol.Message, code protocol.Code, field string) *protocol.Error {
	t.Helper()
	e, ok := r.(*protocol.Error)
	if !ok {
		t.Fatalf("got %v %+v, want ERROR %v", r.Type(), r, code)
	}
	if e.Code != code || (field != "-" && e.Field != field) {
		t.Fatalf("got ERROR %v field %q (%s), want %v field %q", e.Code, e.Field, e.Message, code, field)
	}
	return e
}

// wantClosed requires the server to close the connection: every byte it sends from now
// on is read and then EOF (or a reset) must come, within replyWait.
func (c *client) wantClosed() {
	c.t.Helper()
	for {
		m, err := c.next()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.t.Fatalf("the server did not close the connection within %v", replyWait)
			}
			return // io.EOF, or a reset: closed either way
		}
		c.t.Logf("before close: %v %+v", m.Type(), m)
	}
}

// ping checks the connection answers.
func (c *client) ping(id uint64) {
	c.t.Helper()
	if r, ok := c.call(&protocol.Ping{ID: id}).(*protocol.Pong); !ok {
		c.t.Fatalf("PING answered with %v", r.Type())
	}
}

// frame prefixes body with its length.
func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// body encodes a map with msgpack, for hand-made (possibly ill-typed) messages.
func body(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wireTask returns a valid ephemeral one-shot task due after d.
func wireTask(id string, d time.Duration) protocol.Task {
	return protocol.Task{ID: id, Type: "t", Durability: protocol.Ephemeral,
		Schedule: protocol.Schedule{Kind: task.KindAfter, Delay: int64(d)}}
}

// waitState polls GET until the task is in state want; polling only observes, the wait
// is bounded by replyWait.
func (c *client) waitState(id uint64, tid string, want task.State) protocol.Info {
	c.t.Helper()
	deadline := time.Now().Add(replyWait)
	for {
		r := c.call(&protocol.Get{ID: id, TaskRef: protocol.TaskRef{TaskID: tid}})
		if ti, ok := r.(*protocol.TaskInfo); ok && ti.Info.State == want {
			return ti.Info
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s not %v within %v; last reply %v %+v", tid, want, replyWait, r.Type(), r)
		}
		time.Sleep(time.Millisecond)
	}
}
