package tockd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/tracing"
)

// ServerName is the software name sent in WELCOME.
const ServerName = "tockd/0.1"

// Server serves the tock protocol over TCP. Create it with New, run it with Serve or
// ListenAndServe, stop it with Shutdown. All methods are safe for concurrent use.
//
// It is the public API and the composition of the parts, each a type with its own
// invariants and locking (see the package doc): conns (connset.go) and each conn
// (conn.go), the connection layer; requests (requests.go), the answers to them; runs
// (workers.go, carry.go) and router (router.go), the runs that workers execute; owners
// (ownership.go), the partition map; config (liveconfig.go), the runtime configuration;
// and, with a Store, replica (replica.go). Every field is set by New and never replaced; each
// part guards its own state.
type Server struct {
	opts      Options
	log       *slog.Logger
	engine    *task.Engine
	ownEngine bool // the engine was made by New: Shutdown closes it

	conns    *connSet        // listeners, served connections, admission limits (connset.go)
	requests *requests       // answers each request after the handshake (requests.go)
	runs     *remoteRuns     // the engine handler and the workers' requests (workers.go)
	router   router[*conn]   // routes due runs to worker connections (router.go)
	replica  *replica        // durable tasks and leadership; nil without Options.Store (replica.go)
	tracer   *tracing.Tracer // of Options.TracerProvider or OTLPEndpoint; off without either (spans.go)
	owners   *ownership      // the partition map: this node's registration and view (ownership.go)
	config   *liveConfig     // the runtime configuration, followed and applied (liveconfig.go)
}

// New checks the options, fills in defaults and returns a server that is not yet
// listening. Bad options give an error wrapping ErrInvalidOption that names the field. If
// Options.Engine is nil it starts an engine of its own (Options.EngineOptions). With a
// Store it first reads the cluster's partition count from etcd, creating it as
// Options.Partitions if the cluster has none, and refuses another count with
// ErrPartitionCount (one transaction, bounded by 10 s).
func New(options ...Option) (*Server, error) {
	var opts Options
	for _, opt := range options {
		opt(&opts)
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, engine: opts.Engine}
	s.owners = newOwnership(&s.opts)
	if opts.Store != nil {
		// Before anything starts: a node with another partition count does not start.
		if err := s.owners.checkCount(); err != nil {
			return nil, err
		}
	}
	s.conns = newConnSet(&s.opts)
	if opts.Store != nil { // validate: then New makes the engine, and hooks its events here
		s.replica = newReplica(&s.opts, &s.router)
	}
	tr, err := tracing.New(tracing.Options{Endpoint: opts.OTLPEndpoint, Provider: opts.TracerProvider, ServiceName: "tockd"})
	if err != nil {
		return nil, fmt.Errorf("%w: OTLPEndpoint: %w", ErrInvalidOption, err)
	}
	s.tracer = tr
	sp := spans{tracer: tr}
	if s.engine == nil {
		// DefaultTTR is the engine's default attempt timeout, so that a FIRE's ttr is
		// enforced for tasks submitted without a timeout; EngineOptions may override it.
		eopts := append([]task.Option{task.WithDefaultTimeout(opts.DefaultTTR)}, opts.EngineOptions...)
		var hooks []func(task.Event) // the server's, then the caller's
		if s.replica != nil {
			hooks = append(hooks, s.replica.dur.onEvent)
		}
		if sp.on() {
			hooks = append(hooks, sp.onEvent)
		}
		if len(hooks) > 0 {
			var eo task.Options
			for _, o := range eopts {
				o(&eo)
			}
			if eo.OnEvent != nil {
				hooks = append(hooks, eo.OnEvent)
			}
			eopts = append(eopts, task.WithOnEvent(func(ev task.Event) {
				for _, h := range hooks {
					h(ev)
				}
			}))
		}
		// A broadcast occurrence fans out to the workers subscribed to its type (broadcast.go).
		eopts = append(eopts, task.WithBroadcastWidth(func(t *task.Task) int { return s.router.broadcasts.fanOut(t) }))
		e, err := task.New(eopts...)
		if err != nil {
			_ = tr.Shutdown(context.Background()) // its exporter's goroutine; nothing was traced
			return nil, fmt.Errorf("tockd: engine: %w", err)
		}
		s.engine, s.ownEngine = e, true
	}
	// Without a store this node is alone and always leads, at epoch 0; with one it leads
	// once elected (leadership.loop).
	s.router.init(s.engine, &s.opts, s.replica == nil)
	s.runs = &remoteRuns{engine: s.engine, opts: &s.opts, log: s.log, router: &s.router, replica: s.replica, spans: sp}
	s.requests = &requests{engine: s.engine, opts: &s.opts, log: s.log, router: &s.router, runs: s.runs,
		replica: s.replica, spans: sp, snapshot: s.Stats, partitions: s.Partitions}
	s.engine.RegisterFallback(s.runs.handler)
	s.config = newLiveConfig(&s.opts, s.engine, &s.router)
	s.requests.config = s.config
	if s.replica != nil {
		s.replica.lead.config = s.config
		s.replica.start(s.engine)
	}
	// Last: nothing fails after it, so its goroutine never outlives a failed New.
	s.config.start()
	return s, nil
}

// Engine returns the engine the server submits to (for registering handlers when the
// server made it).
func (s *Server) Engine() *task.Engine { return s.engine }

// Addr returns the address of the first listener Serve was given, or nil before that.
func (s *Server) Addr() net.Addr { return s.conns.address() }

// ListenAndServe listens on Options.Addr and serves it (see Serve).
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("tockd: listen: %w", err)
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln until Shutdown (then it returns ErrServerClosed) or
// until ln fails for good. It closes ln when it returns. Transient accept errors (out of
// file descriptors) are logged and retried with a growing pause, up to 1 s. With
// Options.TLS, connections accepted on ln speak TLS.
func (s *Server) Serve(ln net.Listener) error {
	if s.opts.TLS != nil {
		ln = tls.NewListener(ln, s.opts.TLS)
	}
	first := func() {
		advertise := s.opts.AdvertiseAddr
		if advertise == "" {
			advertise = ln.Addr().String()
		}
		// A node registers, and campaigns, once it serves: the registry and the election
		// name the address other nodes send clients to.
		s.owners.start(advertise)
		if s.replica != nil {
			s.replica.lead.start(advertise)
		}
	}
	if !s.conns.addListener(ln, first) {
		ln.Close()
		return ErrServerClosed
	}
	defer func() {
		s.conns.removeListener(ln)
		ln.Close()
	}()
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.conns.draining.Load() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			s.log.Warn("tockd: accept failed; retrying", "err", err, "pause", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		s.conns.admit(nc, s.newConn)
	}
}

// leaderView is what WELCOME says of the leadership, from one reading of it, so that
// its epoch and its follower flag agree: the leader epoch (this node's while it leads, 0
// without a Store; else the leader's as last read from etcd, 0 while none is known),
// whether this node follows (never without a Store: such a node always leads), and the
// leader's client address as last read ("" while none is known).
func (s *Server) leaderView() (epoch uint64, follower bool, leader string) {
	leading, own := s.leadership()
	switch {
	case leading:
		return own, false, ""
	case s.replica == nil:
		return 0, false, ""
	}
	l := s.replica.lead.leaderSeen.Load()
	if l == nil {
		return 0, true, ""
	}
	if l.epoch > 0 {
		epoch = uint64(l.epoch)
	}
	return epoch, true, l.addr
}

// Partitions returns the partition map stored in etcd as this node last read it, over
// the live nodes (ownership.go): not yet routed by. Without a Store the node owns every
// partition, at revision 0.
func (s *Server) Partitions() PartitionMap {
	m, _ := s.owners.current()
	return m
}

// partitionsChanged is Partitions and a channel closed when the map is replaced (nil
// without a Store: it never is).
func (s *Server) partitionsChanged() (PartitionMap, <-chan struct{}) { return s.owners.current() }

// leadership returns whether this node leads, and its epoch.
func (s *Server) leadership() (bool, uint64) { return s.router.leadership() }

// Shutdown stops the server gracefully: it stops accepting (closing every listener),
// then stops every connection from reading further. A connection first finishes the
// requests it has already received (their replies are written), is sent ERROR
// SHUTTING_DOWN and closed; an idle one is closed at once. Shutdown waits for that until
// ctx is done; then it closes the remaining connections by force, waits for their
// goroutines (which then exit promptly) and returns ctx's error. If New made the engine,
// Shutdown closes it, with ctx; then, with a Store, it waits (until ctx is done) for the
// deletes of finished durable tasks' records still queued. A second Shutdown returns ErrServerClosed.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.conns.drain() {
		return ErrServerClosed
	}
	if s.replica != nil {
		// While this node's term lasts, its finished tasks' deletes go out; then it
		// resigns, so that another node can lead while this one drains.
		s.replica.drain(ctx)
	}
	// Leaving the partition map now, not at the lease's end.
	s.owners.halt(ctx)

	done := make(chan struct{})
	go func() { s.conns.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.conns.closeAll()
		<-done
	}
	// Before the engine closes: no setting is applied to a closed engine.
	s.config.halt()
	if s.ownEngine {
		if cerr := s.engine.Close(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}
	if s.replica != nil {
		// After the engine: no event comes later.
		s.replica.stop(ctx)
	}
	// Last: every span is made. An exporter that cannot flush loses its spans, which
	// is no failure of the shutdown.
	if terr := s.tracer.Shutdown(ctx); terr != nil {
		s.log.Warn("tockd: tracing: spans not exported at shutdown", "err", terr)
	}
	return err
}
