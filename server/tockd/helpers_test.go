package tockd

// The test support of this package's own tests, one of each: the wait bound and the wait
// on a condition, the servers (with and without a store), and the raw connections that
// speak the wire format to them. These tests are package tockd, so they cannot import the
// external tockdtest package (it imports tockd); what this file guarantees is the same:
//   - every server a test starts is stopped when the test ends, at the latest, and
//     before the stores it runs on are closed (Cleanup runs last-registered first);
//   - a test that starts a server with startServer fails if a goroutine outlives it
//     (goleak), checked after everything else the test started has stopped;
//   - every wait is bounded by waitBound: a broken server fails a test, never hangs it.

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/internal/leaktest"
	"github.com/tock-sched/tock/server/internal/wiretest"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"
)

// TestMain fails the test binary if a goroutine outlives the tests (leaktest: what ran
// before any test, ants's default pool, is no leak).
func TestMain(m *testing.M) { leaktest.Main(m) }

// waitBound bounds every wait in these tests for something that must happen: a reply, a
// close, an election, a write seen in etcd. On loopback these take microseconds to a few
// milliseconds; the bound is generous so that a loaded 2-core machine running -race never
// fails a correct test, and exists only so that a broken server fails the test instead of
// hanging it. It also serves where a test needs a server's allowance to outlast any such
// wait (a carry grace the test must never sit out).
const waitBound = 10 * time.Second

// waitUntil looks at its condition again after pollFirst, then doubles the pause up to
// pollMost: a state that holds soon is seen within a millisecond, and a long wait (an
// election; an etcd read at every look) does not load the machine it waits on.
const (
	pollFirst = time.Millisecond
	pollMost  = 16 * time.Millisecond
)

// waitUntil calls cond until it returns true, and reports whether it did within
// waitBound. It is for states that no event announces (a gauge, a task's state as GET
// reads it, a record in etcd); where there is an event, wait on the event instead. cond
// runs on the caller's goroutine, so it may fail the test itself; when waitUntil returns
// false, the caller fails the test with what it last saw.
func waitUntil(cond func() bool) bool { return waitWithin(waitBound, cond) }

// waitWithin is waitUntil bounded by limit.
func waitWithin(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for pause := pollFirst; !cond(); pause = min(2*pause, pollMost) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}

// TestWaitUntil: waitUntil returns true once another goroutine makes the condition hold,
// having looked again after each pause; a condition that never holds is given up on
// once the bound has passed, not before.
func TestWaitUntil(t *testing.T) {
	var set atomic.Bool
	looks := 0
	go set.Store(true)
	if !waitUntil(func() bool { looks++; return set.Load() }) || looks < 1 {
		t.Fatalf("waitUntil gave up on a condition that holds (%d looks)", looks)
	}
	const limit = 20 * time.Millisecond
	start := time.Now()
	if waitWithin(limit, func() bool { return false }) {
		t.Fatal("waitWithin reported a condition that never holds")
	}
	if waited := time.Since(start); waited < limit {
		t.Fatalf("waitWithin gave up after %v, before its limit %v", waited, limit)
	}
}

// testServer is a live server on 127.0.0.1 with its engine.
type testServer struct {
	srv     *Server
	addr    string
	engine  *task.Engine
	served  chan error // Serve's result
	stopped bool
}

// handle registers h as the handler of taskType in the server's engine.
func (ts *testServer) handle(t *testing.T, taskType string, h task.Handler) {
	t.Helper()
	if err := ts.engine.Register(taskType, h); err != nil {
		t.Fatal(err)
	}
}

// newServer is New(WithOptions(opts)); an error fails the test.
func newServer(t *testing.T, opts Options) *Server {
	t.Helper()
	srv, err := New(WithOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// serve serves srv on a fresh loopback port until stop, which Cleanup calls if the test
// has not (a test stops a node itself to fail over or to restart it).
func serve(t *testing.T, srv *Server) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{srv: srv, addr: ln.Addr().String(), engine: srv.Engine(), served: make(chan error, 1)}
	go func() { ts.served <- srv.Serve(ln) }()
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

// stop shuts the server down (a node with a store resigns on the way) and waits for Serve
// to return; a second stop does nothing. Shutdown answers ErrServerClosed if the test
// shut the server down itself, which is no failure here.
func (ts *testServer) stop(t *testing.T) {
	t.Helper()
	if ts.stopped {
		return
	}
	ts.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil && !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-ts.served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve returned %v, want ErrServerClosed", err)
	}
}

// startServer starts a server without a store (serveAlso) and checks, once the test has
// ended and everything it started has stopped, that no goroutine leaked.
func startServer(t *testing.T, opts Options) *testServer {
	t.Helper()
	t.Cleanup(func() { leaktest.VerifyNone(t) }) // registered first: runs last
	return serveAlso(t, opts)
}

// serveAlso starts a server beside the test's startServer, whose leak check waits for
// it. If opts has no Engine, one is made (2 workers). opts.Engine is handed over: it is
// closed once the server is stopped (closing it twice is harmless).
func serveAlso(t *testing.T, opts Options) *testServer {
	t.Helper()
	if opts.Engine == nil && opts.EngineOptions == nil {
		e, err := task.New(task.WithWorkers(2))
		if err != nil {
			t.Fatal(err)
		}
		opts.Engine = e
	}
	if e := opts.Engine; e != nil {
		t.Cleanup(func() { // registered before serve's stop: runs after it
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			if err := e.Close(ctx); err != nil && !errors.Is(err, task.ErrClosed) {
				t.Errorf("engine Close: %v", err)
			}
		})
	}
	return serve(t, newServer(t, opts))
}

// openStore opens an embedded etcd on dir (free ports, fast elections), as server/store's
// tests do; Cleanup closes it, after the servers started on it later have stopped (a test
// may close it itself first: a second Close does nothing).
func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	st, err := store.Open(ctx, store.WithEmbedded(dir), store.WithNode("n1"), store.WithEmbeddedTick(10*time.Millisecond),
		store.WithEmbeddedElection(100*time.Millisecond), store.WithEmbeddedLog(zap.NewNop()))
	if err != nil {
		t.Fatalf("open embedded etcd: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openPeerStore connects a second node's store to the etcd of st; Cleanup closes it.
func openPeerStore(t *testing.T, st *store.Store, node string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	peer, err := store.Open(ctx, store.WithOptions(st.ClientOptions()), store.WithNode(node))
	if err != nil {
		t.Fatalf("open a peer store: %v", err)
	}
	t.Cleanup(func() { peer.Close() })
	return peer
}

// startDurable serves a node over st (engine: 2 workers, and onEvent if not nil) and
// waits until it leads: with a store a node serves requests once elected, and a lone
// node is elected at once.
func startDurable(t *testing.T, st *store.Store, onEvent func(task.Event)) *testServer {
	t.Helper()
	return startDurableRunning(t, st, onEvent, "", nil)
}

// startDurableRunning is startDurable with h registered as the handler of taskType (if h
// is not nil) before the node serves, so before its takeover's load: a loaded durable
// task that is due already runs at h, not at the fallback that FIREs at remote workers
// (with none connected it would stay RUNNING for its time to run). Registering after
// startDurable returns races the load.
func startDurableRunning(t *testing.T, st *store.Store, onEvent func(task.Event), taskType string, h task.Handler) *testServer {
	t.Helper()
	eopts := []task.Option{task.WithWorkers(2)}
	if onEvent != nil {
		eopts = append(eopts, task.WithOnEvent(onEvent))
	}
	srv := newServer(t, Options{Store: st, EngineOptions: eopts})
	if h != nil {
		if err := srv.Engine().Register(taskType, h); err != nil {
			t.Fatal(err)
		}
	}
	ts := serve(t, srv)
	waitLeading(t, ts.srv, "the lone node was not elected")
	return ts
}

// startLeader is startDurable on a fresh embedded etcd: a lone node, leading.
func startLeader(t *testing.T) (*store.Store, *testServer) {
	t.Helper()
	st := openStore(t, t.TempDir())
	return st, startDurable(t, st, nil)
}

// waitLeading waits until srv leads; why says what failed.
func waitLeading(t *testing.T, srv *Server, why string) {
	t.Helper()
	if !waitUntil(func() bool { return srv.Stats().IsLeader }) {
		t.Fatalf("%s within %v", why, waitBound)
	}
}

// twoNodes is a leader and a follower on one embedded etcd.
type twoNodes struct {
	st1, st2   *store.Store
	leader, fd *testServer // fd serves follower
	follower   *Server
}

// startTwoNodes starts the leader (elected first: the only candidate yet), then the
// follower, made with follower (its Store is st2), and waits until the follower
// campaigns: its election key is next in line, so that when the leader's term ends the
// follower is elected. Without the wait a test that ends the term soon after may end it
// before the follower's key exists (on a loaded machine its campaign came within a few
// ms of such a test's delete), and the deposed leader, campaigning again, is elected
// again, the only candidate.
func startTwoNodes(t *testing.T, follower Options) *twoNodes {
	t.Helper()
	n := &twoNodes{st1: openStore(t, t.TempDir())}
	n.st2 = openPeerStore(t, n.st1, "n2")
	n.leader = startDurable(t, n.st1, nil)
	follower.Store = n.st2
	n.follower = newServer(t, follower)
	n.fd = serve(t, n.follower)
	if !waitUntil(func() bool { return electionKeys(t, n.st1) >= 2 }) {
		t.Fatalf("the follower never campaigned within %v", waitBound)
	}
	return n
}

// client speaks the wire format on one raw connection (wiretest's, each read and write
// bounded by waitBound), under the names these tests use.
type client struct {
	*wiretest.Conn
	t  *testing.T
	nc net.Conn // the socket, for tests that close or half-close it
}

// dial connects without a handshake.
func dial(t *testing.T, addr string) *client {
	t.Helper()
	c := wiretest.Dial(t, addr, waitBound)
	return &client{Conn: c, t: t, nc: c.Conn}
}

// helloAs is the HELLO (ID 1, no token) of a connection in role, as name.
func helloAs(role protocol.Role, name string) *protocol.Hello {
	return &protocol.Hello{ID: 1, Version: protocol.Version, Name: name, Role: role}
}

// connectAs dials and completes the handshake in role, as name.
func connectAs(t *testing.T, addr string, role protocol.Role, name string) *client {
	t.Helper()
	c := dial(t, addr)
	c.hello(helloAs(role, name))
	return c
}

// connect dials and completes the handshake as a client.
func connect(t *testing.T, addr string) *client {
	t.Helper()
	return connectAs(t, addr, protocol.RoleClient, "test")
}

// hello sends h and requires a WELCOME.
func (c *client) hello(h *protocol.Hello) *protocol.Welcome {
	c.t.Helper()
	return c.Hello(h)
}

// send writes one message as a frame.
func (c *client) send(m protocol.Message) {
	c.t.Helper()
	c.Send(m)
}

// write writes raw bytes.
func (c *client) write(b []byte) {
	c.t.Helper()
	c.WriteRaw(b)
}

// next returns the next message, or the read error (io.EOF once the server closed).
// The server's heartbeats (PONG with ID 0) are skipped and counted in c.Beats.
func (c *client) next() (protocol.Message, error) {
	c.t.Helper()
	return c.Next()
}

// recv returns the next message; a read error fails the test.
func (c *client) recv() protocol.Message {
	c.t.Helper()
	return c.Recv()
}

// call sends m and returns the reply, which must carry m's request ID.
func (c *client) call(m protocol.Message) protocol.Message {
	c.t.Helper()
	return c.Call(m)
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
// on is read and then EOF (or a reset) must come, within waitBound.
func (c *client) wantClosed() {
	c.t.Helper()
	for {
		m, err := c.next()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.t.Fatalf("the server did not close the connection within %v", waitBound)
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

// waitState polls GET until the task is in state want (GET only observes).
func (c *client) waitState(id uint64, tid string, want task.State) protocol.Info {
	c.t.Helper()
	var r protocol.Message
	var info protocol.Info
	if !waitUntil(func() bool {
		r = c.call(&protocol.Get{ID: id, TaskRef: protocol.TaskRef{TaskID: tid}})
		ti, ok := r.(*protocol.TaskInfo)
		if ok {
			info = ti.Info
		}
		return ok && ti.Info.State == want
	}) {
		c.t.Fatalf("task %s not %v within %v; last reply %v %+v", tid, want, waitBound, r.Type(), r)
	}
	return info
}
