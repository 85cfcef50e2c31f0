package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Store is a handle on tock's keys in etcd: the etcd client (and the embedded etcd,
// if it runs one), the one session (sessions), and the parts that each own one kind of
// key, reached by Records, Locks, Progress, Workers, Election, Nodes, Partitions and Config. Revision and Follow
// read the whole prefix. It is safe for concurrent use: every field is set by Open and
// never changes; the session has its own lock.
type Store struct {
	opts     Options
	cli      *clientv3.Client
	cfg      clientv3.Config // how cli was made (ClientOptions)
	etcd     *embed.Etcd     // nil with external Endpoints
	keys     keyspace
	sessions *sessions

	records  Records
	locks    Locks
	progress Progress
	workers  Workers
	election Election
	nodes    Nodes
	parts    Partitions
	config   Config
}

// Open connects to etcd (starting the embedded one if Options.Embedded is
// set) and returns a Store. Bad options give an error wrapping ErrConfig that names
// the field.
func Open(ctx context.Context, opts ...Option) (*Store, error) {
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	o.setDefaults()
	err := o.validate()
	if err != nil {
		return nil, err
	}
	s := &Store{opts: o, keys: newKeyspace(o.Prefix)}
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
	s.assemble()
	return s, nil
}

// assemble makes the session holder and the parts, once s.cli is the client they use.
func (s *Store) assemble() {
	o := &s.opts
	s.sessions = &sessions{cli: s.cli, ttl: o.SessionTTL, guard: o.LeaseGuard}
	txns := txnRunner{cli: s.cli, limit: o.TxnConcurrency}
	s.records = Records{cli: s.cli, keys: s.keys, txns: txns, maxTxnOps: o.MaxTxnOps, maxTxnBytes: o.MaxTxnBytes,
		pageSize: o.LoadPageSize}
	s.locks = Locks{cli: s.cli, keys: s.keys}
	s.progress = Progress{cli: s.cli, keys: s.keys, txns: txns, maxTxnOps: o.MaxTxnOps}
	s.workers = Workers{cli: s.cli, keys: s.keys, sessions: s.sessions}
	s.election = Election{cli: s.cli, key: s.keys.leader, node: o.Node, ttl: o.SessionTTL, sessions: s.sessions}
	s.nodes = Nodes{cli: s.cli, keys: s.keys, sessions: s.sessions}
	s.parts = Partitions{cli: s.cli, keys: s.keys, sessions: s.sessions}
	s.config = Config{cli: s.cli, keys: s.keys}
}

// Records are the durable task records (records.go).
func (s *Store) Records() *Records { return &s.records }

// Locks are the exclusive tasks' run locks (locks.go).
func (s *Store) Locks() *Locks { return &s.locks }

// Progress is where the recurring tasks' schedules stand (next.go).
func (s *Store) Progress() *Progress { return &s.progress }

// Workers is the worker registry (workers.go).
func (s *Store) Workers() *Workers { return &s.workers }

// Election is the leader election (leader.go).
func (s *Store) Election() *Election { return &s.election }

// Nodes is the registry of live nodes (nodes.go).
func (s *Store) Nodes() *Nodes { return &s.nodes }

// Partitions is the cluster's partition count (partitions.go).
func (s *Store) Partitions() *Partitions { return &s.parts }

// Config is the cluster's runtime configuration (config.go).
func (s *Store) Config() *Config { return &s.config }

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
	first, err := s.sessions.close()
	if !first {
		return nil
	}
	errs := []error{err}
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, fmt.Errorf("store: close client: %w", err))
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
	return errors.Join(errs...)
}

func startEmbedded(ctx context.Context, o Options) (*embed.Etcd, error) {
	ports, err := freePorts(o.EmbeddedClientPort)
	if err != nil {
		return nil, fmt.Errorf("store: embedded etcd port: %w", err)
	}
	sock, err := peerSocket(o.Embedded)
	if err != nil {
		return nil, err
	}
	curl := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	cfg := embed.NewConfig()
	cfg.Name = o.Node
	cfg.Dir = o.Embedded
	cfg.ListenClientUrls = []url.URL{curl}
	cfg.AdvertiseClientUrls = []url.URL{curl}
	// The peer API (raft, member to member) has no password: it listens on a unix
	// socket in a directory only this user may enter, not on a TCP port. Its advertised
	// URL is a placeholder (etcd wants host:port there, and the socket's path cannot be
	// written in one): the only member never dials its own peer URL.
	cfg.ListenPeerUrls = []url.URL{{Scheme: "unix", Host: sock}}
	cfg.AdvertisePeerUrls = []url.URL{embeddedPeerURL}
	cfg.InitialCluster = o.Node + "=" + embeddedPeerURL.String()
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

// embeddedPeerURL is the embedded etcd's advertised peer URL (see startEmbedded).
var embeddedPeerURL = url.URL{Scheme: "unix", Host: "localhost:0"}

// PeerSocketDir is the directory, inside Options.Embedded, of the embedded etcd's peer
// socket (PeerSocket); Open makes it, or sets it, mode 0700.
const (
	PeerSocketDir = "peer"
	PeerSocket    = "etcd.sock"
)

// maxSocketPath is the longest path a unix socket may have on Linux (sun_path is 108
// bytes with the terminating NUL).
const maxSocketPath = 107

// peerSocket makes dir/PeerSocketDir mode 0700 (a symbolic link there is refused) and
// returns the absolute path of the peer socket in it.
func peerSocket(dir string) (string, error) {
	abs, err := filepath.Abs(filepath.Join(dir, PeerSocketDir))
	if err != nil {
		return "", fmt.Errorf("store: embedded etcd peer socket: %w", err)
	}
	if err := os.Mkdir(abs, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("store: embedded etcd peer socket: %w", err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return "", fmt.Errorf("store: embedded etcd peer socket: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory (the embedded etcd's peer socket goes there)", ErrConfig, abs)
	}
	if err := os.Chmod(abs, 0o700); err != nil {
		return "", fmt.Errorf("store: embedded etcd peer socket: %w", err)
	}
	sock := filepath.Join(abs, PeerSocket)
	if len(sock) > maxSocketPath {
		return "", fmt.Errorf("%w: the embedded etcd's peer socket %s is longer than a unix socket path may be (%d bytes): use a shorter data directory",
			ErrConfig, sock, maxSocketPath)
	}
	return sock, nil
}

// freePorts returns the given ports, replacing each 0 with a port the kernel
// reports free on 127.0.0.1 (the listeners are held at once so they differ).
func freePorts(ports ...int) ([]int, error) {
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
			return nil, err
		}
		ls = append(ls, l)
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}
