package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Store is a handle on tock's keys in etcd. It is safe for concurrent use.
type Store struct {
	opts    Options
	cli     *clientv3.Client
	cfg     clientv3.Config // how cli was made (ClientOptions)
	etcd    *embed.Etcd     // nil with external Endpoints
	tasks   string          // Prefix + "tasks/"
	locks   string          // Prefix + "locks/": run locks of exclusive tasks
	next    string          // Prefix + "next/": recurring tasks' progress (next.go)
	workers string          // Prefix + "workers/": the worker registry (workers.go)
	leader  string          // Prefix + "leader"

	mu      sync.Mutex
	session *session // nil until the first Campaign
	closed  bool
}

// Open connects to etcd (starting the embedded one if Options.Embedded is
// set) and returns a Store.
func Open(ctx context.Context, o Options) (*Store, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{opts: o, tasks: o.Prefix + "tasks/", locks: o.Prefix + "locks/", next: o.Prefix + "next/",
		workers: o.Prefix + "workers/", leader: o.Prefix + "leader"}
	cfg := clientv3.Config{
		Endpoints:   o.Endpoints,
		Username:    o.Username,
		Password:    o.Password,
		TLS:         o.TLS,
		DialTimeout: o.DialTimeout,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
	}
	if o.Embedded != "" {
		if cfg.Password, err = rootPassword(o.Embedded); err != nil {
			return nil, fmt.Errorf("store: embedded etcd root password: %w", err)
		}
		cfg.Username = rootUser
		s.etcd, err = startEmbedded(ctx, o)
		if err != nil {
			return nil, err
		}
		cfg.Endpoints = []string{s.ClientURL()}
	}
	s.cfg = cfg
	s.cli, err = clientv3.New(cfg)
	if err == nil && s.etcd != nil {
		if err = enableAuth(ctx, s.cli, cfg.Password); err == nil {
			// Reconnect, so that the client authenticates now that auth is on (a client
			// made while it was off holds no token).
			s.cli.Close()
			s.cli, err = clientv3.New(cfg)
		} else {
			s.cli.Close()
		}
	}
	if err != nil {
		if s.etcd != nil {
			s.etcd.Close()
		}
		return nil, fmt.Errorf("store: connect: %w", err)
	}
	return s, nil
}

// ClientOptions returns the Options another Store needs to reach the same etcd: this
// one's endpoints (the embedded etcd's URL), user, password and TLS configuration.
// Everything else is zero, to be filled in (Node, at least).
func (s *Store) ClientOptions() Options {
	return Options{Endpoints: s.cfg.Endpoints, Username: s.cfg.Username, Password: s.cfg.Password, TLS: s.cfg.TLS}
}

// Client returns the etcd client, for callers that watch the record range.
func (s *Store) Client() *clientv3.Client { return s.cli }

// SessionTTL is the leadership session's lease TTL (Options.SessionTTL, in whole
// seconds): how long a leader that stops answering keeps its leadership.
func (s *Store) SessionTTL() time.Duration { return s.opts.SessionTTL }

// ClientURL returns the embedded etcd's client URL, or "" with Endpoints.
func (s *Store) ClientURL() string {
	if s.etcd == nil {
		return ""
	}
	return "http://" + s.etcd.Clients[0].Addr().String()
}

// Close revokes the session (firing Leadership.Done), closes the client and
// stops the embedded etcd, if any. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sess := s.session
	s.session = nil
	s.mu.Unlock()
	var errs []error
	if sess != nil {
		sess.closing.Store(true)
		err := sess.sess.Close()
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs = append(errs, fmt.Errorf("store: close session: %w", err))
		}
		sess.cancel()
	}
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, fmt.Errorf("store: close client: %w", err))
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
	return errors.Join(errs...)
}

func startEmbedded(ctx context.Context, o Options) (*embed.Etcd, error) {
	cport, pport, err := freePorts(o.EmbeddedClientPort, o.EmbeddedPeerPort)
	if err != nil {
		return nil, fmt.Errorf("store: embedded etcd ports: %w", err)
	}
	curl := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(cport))}
	purl := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))}
	cfg := embed.NewConfig()
	cfg.Name = o.Node
	cfg.Dir = o.Embedded
	cfg.ListenClientUrls = []url.URL{curl}
	cfg.AdvertiseClientUrls = []url.URL{curl}
	cfg.ListenPeerUrls = []url.URL{purl}
	cfg.AdvertisePeerUrls = []url.URL{purl}
	cfg.InitialCluster = o.Node + "=" + purl.String()
	cfg.LogLevel = "error"
	if o.EmbeddedLog != nil {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(o.EmbeddedLog)
	}
	cfg.MaxTxnOps = uint(o.MaxTxnOps)
	// The only password is root's, 256 random bits (RootPasswordFile): bcrypt's cost
	// adds nothing against guessing it, and its minimum keeps each login (a start, a
	// token refresh) from taking tens of milliseconds.
	cfg.BcryptCost = embeddedBcryptCost
	if o.EmbeddedTick > 0 {
		cfg.TickMs = uint(o.EmbeddedTick / time.Millisecond)
	}
	if o.EmbeddedElection > 0 {
		cfg.ElectionMs = uint(o.EmbeddedElection / time.Millisecond)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("store: start embedded etcd: %w", err)
	}
	t := time.NewTimer(o.StartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("store: embedded etcd failed: %w", err)
	case <-t.C:
		e.Close()
		return nil, fmt.Errorf("store: embedded etcd not ready after %v", o.StartTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("store: embedded etcd start: %w", ctx.Err())
	}
}

// embeddedBcryptCost is bcrypt.MinCost.
const embeddedBcryptCost = 4

// freePorts returns the given ports, replacing each 0 with a port the kernel
// reports free on 127.0.0.1 (both listeners are held at once so they differ).
func freePorts(ports ...int) (int, int, error) {
	out := make([]int, len(ports))
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i, p := range ports {
		if p != 0 {
			out[i] = p
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		ls = append(ls, l)
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out[0], out[1], nil
}
