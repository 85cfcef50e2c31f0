package tockdtest

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/store"
	"github.com/tock-sched/tock/server/tockd"
)

// Test timings of the embedded etcd: a raft heartbeat and election timeout ten times
// shorter than etcd's defaults, so that it elects itself in ~0.1 s instead of ~1 s.
const (
	EtcdTick     = 10 * time.Millisecond
	EtcdElection = 100 * time.Millisecond
)

// DefaultNodeName is the node name of a server whose options name none.
const DefaultNodeName = "node-test"

// DefaultWorkers is the engine's handler pool size of a server whose options give no
// engine: two, so that a handler that blocks does not stop every other.
const DefaultWorkers = 2

// Server is a live tockd.Server on loopback, started by Start.
type Server struct {
	*tockd.Server
	// Addr is the address it serves clients on (127.0.0.1 and the port it got).
	Addr string
	// Store is the store it records durable tasks in; nil unless started with Etcd or
	// EtcdOf.
	Store *store.Store

	tb     testing.TB
	served chan error // Serve's result
	once   sync.Once  // Stop's
}

// Option configures Start.
type Option func(*config)

type config struct {
	opts  tockd.Options
	addr  string
	etcd  bool
	peer  *Server // EtcdOf's
	store *store.Store
}

// Options sets the server's options (tockd.Options' zero fields take its defaults;
// NodeName defaults to DefaultNodeName and, without Engine or EngineOptions, the
// engine has DefaultWorkers workers). Opts.Addr is ignored: see Addr.
func Options(o tockd.Options) Option { return func(c *config) { c.opts = o } }

// Addr has the server listen on addr instead of a fresh port, for a test that starts a
// server again where one was.
func Addr(addr string) Option { return func(c *config) { c.addr = addr } }

// Etcd makes the server durable: it records in a store over an etcd embedded in the
// test process (its data in tb.TempDir(), EtcdTick and EtcdElection for timings).
func Etcd() Option { return func(c *config) { c.etcd = true } }

// EtcdOf makes the server durable over peer's embedded etcd (peer started with Etcd),
// with a store client of its own: two nodes of one cluster, one etcd.
func EtcdOf(peer *Server) Option { return func(c *config) { c.peer = peer } }

// Start serves a tockd.Server on 127.0.0.1 and returns it once it accepts connections.
// Its cleanup (registered on tb) shuts it down within Limit and requires Serve to
// return ErrServerClosed; then it closes the store Start opened, if any.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	c := config{addr: "127.0.0.1:0"}
	for _, o := range opts {
		o(&c)
	}
	if c.opts.NodeName == "" {
		c.opts.NodeName = DefaultNodeName
	}
	if c.opts.Engine == nil && c.opts.EngineOptions == nil {
		c.opts.EngineOptions = []task.Option{task.WithWorkers(DefaultWorkers)}
	}
	if c.etcd || c.peer != nil {
		c.opts.Store = openStore(tb, c)
	}
	c.opts.Addr = c.addr
	srv, err := tockd.New(tockd.WithOptions(c.opts))
	if err != nil {
		tb.Fatalf("tockd.New: %v", err)
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		tb.Fatalf("listen on %s: %v", c.addr, err)
	}
	s := &Server{Server: srv, Addr: ln.Addr().String(), Store: c.opts.Store, tb: tb, served: make(chan error, 1)}
	go func() { s.served <- srv.Serve(ln) }()
	tb.Cleanup(s.Stop)
	return s
}

// openStore opens the store c asks for and closes it at tb's cleanup, which runs after
// the server's (registered later).
func openStore(tb testing.TB, c config) *store.Store {
	tb.Helper()
	o := store.Options{Embedded: tb.TempDir(), EmbeddedTick: EtcdTick, EmbeddedElection: EtcdElection,
		EmbeddedLog: zap.NewNop()}
	if c.peer != nil {
		if c.peer.Store == nil {
			tb.Fatal("tockdtest.EtcdOf: the peer was not started with Etcd")
		}
		o = c.peer.Store.ClientOptions() // the embedded etcd wants its root password
	}
	o.Node = c.opts.NodeName
	ctx, cancel := context.WithTimeout(context.Background(), Limit)
	defer cancel()
	st, err := store.Open(ctx, store.WithOptions(o))
	if err != nil {
		tb.Fatalf("store.Open (embedded %t): %v", c.peer == nil, err)
	}
	tb.Cleanup(func() {
		if err := st.Close(); err != nil {
			tb.Errorf("store Close: %v", err)
		}
	})
	return st
}

// Stop shuts the server down (its connections closed; its engine too, unless the test
// gave one in Options: that is the test's to close) and waits for Serve to return; a second call does nothing. The cleanup calls it; a test calls
// it to take a node away mid-test.
func (s *Server) Stop() {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Limit)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil && !errors.Is(err, tockd.ErrServerClosed) {
			s.tb.Errorf("Shutdown: %v", err)
		}
		select {
		case err := <-s.served:
			if !errors.Is(err, tockd.ErrServerClosed) {
				s.tb.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-ctx.Done():
			s.tb.Errorf("Serve did not return within %v of Shutdown", Limit)
		}
	})
}
