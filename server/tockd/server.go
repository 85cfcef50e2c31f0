package tockd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/store"
)

// ServerName is the software name sent in WELCOME.
const ServerName = "tockd/0.1"

// Server serves the tock protocol over TCP. Create it with New, run it with Serve or
// ListenAndServe, stop it with Shutdown. All methods are safe for concurrent use.
type Server struct {
	opts      Options
	log       *slog.Logger
	engine    *task.Engine
	ownEngine bool // the engine was made by New: Shutdown closes it

	conns *connSet // listeners, served connections, admission limits (connset.go)
	// unlistedReplies counts replies the replies table does not list for their request
	// (replies.go): a bug, logged at Error.
	unlistedReplies atomic.Uint64

	disp       router[*conn] // routes due runs to worker connections (router.go)
	acked      atomic.Uint64 // ACKs the engine accepted
	nacked     atomic.Uint64 // NACKs the engine accepted
	carried    atomic.Uint64 // carried outcomes accepted (CARRY; carry.go)
	registered atomic.Int64  // workers last seen registered at another leader (registry.go)
	// registryKick (capacity 1) asks reportWorkers to write the registry now: a worker
	// subscribed.
	registryKick chan struct{}

	leaderChanges atomic.Uint64               // times this node gained or lost leadership
	leaderSeen    atomic.Pointer[knownLeader] // the leader as a follower last read it; nil: unknown
	etcdFailed    atomic.Pointer[etcdFailure] // the follower's reads of the leader fail (Health); nil: they do not
	fence         atomic.Pointer[store.Fence] // this node's leadership term, for durable writes; nil: not leading
	term          atomic.Pointer[leaderTerm]  // the latest term leaderLoop began; its deposed ends it (fencedOut)
	// stopLeading ends leaderLoop and leaderDone is closed when it has returned: both set
	// by the first Serve with a Store, under conns.mu (connSet.addListener), and read by
	// Shutdown after connSet.drain; nil before.
	stopLeading context.CancelFunc
	leaderDone  chan struct{}
	// standbyHook, if set (by tests, before Serve), runs before the standby mirror applies
	// each change, on the mirror's goroutine; ctx ends when the mirror stops.
	standbyHook func(ctx context.Context, c store.Change)

	dur          *durability // durable task bookkeeping; nil without Options.Store (durable.go)
	committer    committer   // groups durable record writes of concurrent requests (commit.go)
	progress     *progress   // recurring durable tasks' next due times (progress.go); nil without a Store
	parked       parkedRuns  // exclusive tasks parked at this term's takeover, with the run each waits out (exclusive.go)
	stopProgress context.CancelFunc
	progressDone chan struct{}
}

// New checks opts, fills in defaults and returns a server that is not yet listening. If
// opts.Engine is nil it starts an engine of its own (opts.EngineOptions).
func New(opts Options) (*Server, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, engine: opts.Engine, registryKick: make(chan struct{}, 1)}
	s.conns = newConnSet(&s.opts)
	if s.engine == nil {
		// DefaultTTR is the engine's default attempt timeout, so that a FIRE's ttr is
		// enforced for tasks submitted without a timeout; EngineOptions may override it.
		eopts := append([]task.Option{task.WithDefaultTimeout(opts.DefaultTTR)}, opts.EngineOptions...)
		if opts.Store != nil {
			s.progress = newProgress()
			s.dur = newDurability(opts.Store, s)
			var eo task.Options
			for _, o := range eopts {
				o(&eo)
			}
			theirs := eo.OnEvent
			eopts = append(eopts, task.WithOnEvent(func(ev task.Event) {
				s.dur.onEvent(ev)
				if theirs != nil {
					theirs(ev)
				}
			}))
		}
		e, err := task.New(eopts...)
		if err != nil {
			return nil, fmt.Errorf("tockd: engine: %w", err)
		}
		s.engine, s.ownEngine = e, true
	}
	// Without a store this node is alone and always leads, at epoch 0; with one it leads
	// once elected (leaderLoop).
	s.disp.init(s.engine, &s.opts, opts.Store == nil)
	s.engine.RegisterFallback(s.handler)
	if s.dur != nil {
		go s.dur.run()
		pctx, stop := context.WithCancel(context.Background())
		s.stopProgress, s.progressDone = stop, make(chan struct{})
		go func() {
			defer close(s.progressDone)
			done := make(chan struct{})
			go func() { defer close(done); s.reportWorkers(pctx) }() // registry.go
			s.progress.run(pctx, s)
			<-done
		}()
	}
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
		if s.opts.Store != nil {
			// A node campaigns once it serves: the election names the address other
			// nodes send clients to.
			advertise := s.opts.AdvertiseAddr
			if advertise == "" {
				advertise = ln.Addr().String()
			}
			lctx, stop := context.WithCancel(context.Background())
			s.stopLeading, s.leaderDone = stop, make(chan struct{})
			go s.leaderLoop(lctx, s.opts.Store, advertise)
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

// currentEpoch is the leader epoch WELCOME announces: this node's while it leads (0
// without a Store), else the leader's as last read from etcd, else 0 (none known).
func (s *Server) currentEpoch() uint64 {
	if leading, epoch := s.leadership(); leading {
		return epoch
	}
	if l := s.leaderSeen.Load(); l != nil && l.epoch > 0 {
		return uint64(l.epoch)
	}
	return 0
}

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
	if stopLeading, leaderDone := s.stopLeading, s.leaderDone; stopLeading != nil {
		// The deletes of tasks that finished here go first, while this node's term (their
		// fence) lasts; then resign, so that another node can lead while this one drains.
		s.dur.flush(ctx)
		s.progress.flush(ctx, s)
		stopLeading()
		select {
		case <-leaderDone:
		case <-ctx.Done():
		}
	}

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
	if s.ownEngine {
		if cerr := s.engine.Close(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}
	if s.dur != nil {
		// After the engine: no event comes later. Queued deletes are finished, or logged
		// when ctx ends first.
		s.dur.stop(ctx)
		s.stopProgress()
		<-s.progressDone
	}
	return err
}
