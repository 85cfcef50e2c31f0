package store

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Defaults for Options fields left zero.
const (
	DefaultPrefix           = "/tock/"
	DefaultSessionTTL       = 2 * time.Second
	DefaultDialTimeout      = 5 * time.Second
	DefaultStartTimeout     = 30 * time.Second
	DefaultMaxTxnOps        = 128 // etcd's default --max-txn-ops
	DefaultMaxTxnBytes      = 1 << 20
	DefaultLoadPageSize     = 1000
	DefaultTxnConcurrency   = 16
	DefaultLeaseGuardDivide = 4 // LeaseGuard defaults to SessionTTL/4
)

// Options configures Open. Exactly one of Endpoints and Embedded must be set; every other
// field left zero takes its default, and so does a negative duration or size.
type Options struct {
	// Endpoints of an external etcd cluster.
	Endpoints []string
	// Username and Password log in to an external etcd with its own authentication
	// (etcdctl user add, auth enable); both or neither. The user needs read and write
	// on Prefix's keys (and the election's). Ignored with Embedded, which always runs
	// with auth on as "root" (RootPasswordFile).
	Username string
	Password string
	// TLS, if set, makes the connection to Endpoints TLS: RootCAs verifies the
	// servers, Certificates is the client certificate where etcd wants one
	// (--client-cert-auth). Default: plain TCP (http:// endpoints).
	TLS *tls.Config
	// Embedded is the data directory of an etcd started in-process, serving
	// clients on 127.0.0.1:EmbeddedClientPort (0: a free port) and its peer API
	// on the unix socket Embedded/PeerSocketDir/PeerSocket, not on TCP.
	Embedded           string
	EmbeddedClientPort int
	// EmbeddedTick and EmbeddedElection are the embedded etcd's raft heartbeat
	// and election timeout (0: etcd's 100 ms and 1 s).
	EmbeddedTick     time.Duration
	EmbeddedElection time.Duration
	// EmbeddedLog receives the embedded etcd's logs (nil: etcd's own logger
	// at level "error").
	EmbeddedLog *zap.Logger
	// StartTimeout bounds how long Open waits for the embedded etcd.
	StartTimeout time.Duration

	// Prefix of every key (default "/tock/"); it should end in '/'.
	Prefix string
	// SessionTTL is the lease TTL of the leadership session (default 2 s);
	// etcd counts whole seconds, so it is rounded up to at least 1 s.
	SessionTTL time.Duration
	// LeaseGuard is how long before the lease could expire, counted from the
	// send time of the last answered keep-alive, Leadership.Valid turns false and
	// Done fires (default SessionTTL/4): it covers the clock-rate difference
	// between this node and etcd, and the gap between the send time's reading and
	// the request leaving.
	LeaseGuard time.Duration
	// Node names this node; it is the value of its election key (default
	// the host name).
	Node string
	// DialTimeout bounds connecting to etcd (default 5 s).
	DialTimeout time.Duration
	// MaxTxnOps is the server's --max-txn-ops (default 128).
	MaxTxnOps int
	// MaxTxnBytes bounds the keys and values of one PutBatch transaction
	// (default 1 MiB; etcd refuses requests over 1.5 MiB by default).
	MaxTxnBytes int
	// LoadPageSize is the number of records per Get in Load (default 1000).
	LoadPageSize int
	// TxnConcurrency bounds the transactions one PutBatch or DeleteBatch has in flight
	// at once (a batch larger than one transaction is split): etcd's throughput grows
	// with concurrent requests, while one caller's latency stays about one round trip.
	// Default 16.
	TxnConcurrency int
}

// txnDepth is how many ops one record costs against MaxTxnOps beyond its
// slot in the outer transaction: etcd charges each nested level against the
// budget of its parent (see recordOp).
const txnDepth = 2

// txnDepthNext is txnDepth for a record written with its progress (Record.NextDue):
// each branch holds two puts.
const txnDepthNext = 4

// Option sets a field of Options.
type Option func(*Options)

// WithOptions replaces the whole Options struct (fields left zero take their defaults).
func WithOptions(o Options) Option { return func(dst *Options) { *dst = o } }

// WithEndpoints sets Options.Endpoints.
func WithEndpoints(endpoints ...string) Option { return func(o *Options) { o.Endpoints = endpoints } }

// WithUsername sets Options.Username.
func WithUsername(user string) Option { return func(o *Options) { o.Username = user } }

// WithPassword sets Options.Password.
func WithPassword(password string) Option { return func(o *Options) { o.Password = password } }

// WithTLS sets Options.TLS.
func WithTLS(c *tls.Config) Option { return func(o *Options) { o.TLS = c } }

// WithEmbedded sets Options.Embedded.
func WithEmbedded(dataDir string) Option { return func(o *Options) { o.Embedded = dataDir } }

// WithEmbeddedClientPort sets Options.EmbeddedClientPort.
func WithEmbeddedClientPort(port int) Option { return func(o *Options) { o.EmbeddedClientPort = port } }

// WithEmbeddedTick sets Options.EmbeddedTick.
func WithEmbeddedTick(d time.Duration) Option { return func(o *Options) { o.EmbeddedTick = d } }

// WithEmbeddedElection sets Options.EmbeddedElection.
func WithEmbeddedElection(d time.Duration) Option { return func(o *Options) { o.EmbeddedElection = d } }

// WithEmbeddedLog sets Options.EmbeddedLog.
func WithEmbeddedLog(l *zap.Logger) Option { return func(o *Options) { o.EmbeddedLog = l } }

// WithStartTimeout sets Options.StartTimeout.
func WithStartTimeout(d time.Duration) Option { return func(o *Options) { o.StartTimeout = d } }

// WithPrefix sets Options.Prefix.
func WithPrefix(prefix string) Option { return func(o *Options) { o.Prefix = prefix } }

// WithSessionTTL sets Options.SessionTTL.
func WithSessionTTL(d time.Duration) Option { return func(o *Options) { o.SessionTTL = d } }

// WithLeaseGuard sets Options.LeaseGuard.
func WithLeaseGuard(d time.Duration) Option { return func(o *Options) { o.LeaseGuard = d } }

// WithNode sets Options.Node.
func WithNode(node string) Option { return func(o *Options) { o.Node = node } }

// WithDialTimeout sets Options.DialTimeout.
func WithDialTimeout(d time.Duration) Option { return func(o *Options) { o.DialTimeout = d } }

// WithMaxTxnOps sets Options.MaxTxnOps.
func WithMaxTxnOps(n int) Option { return func(o *Options) { o.MaxTxnOps = n } }

// WithMaxTxnBytes sets Options.MaxTxnBytes.
func WithMaxTxnBytes(n int) Option { return func(o *Options) { o.MaxTxnBytes = n } }

// WithLoadPageSize sets Options.LoadPageSize.
func WithLoadPageSize(n int) Option { return func(o *Options) { o.LoadPageSize = n } }

// WithTxnConcurrency sets Options.TxnConcurrency.
func WithTxnConcurrency(n int) Option { return func(o *Options) { o.TxnConcurrency = n } }

// setDefaults fills in the fields left zero (or negative, for the durations and sizes
// below) and rounds SessionTTL up to whole seconds, as etcd counts them.
func (o *Options) setDefaults() {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	o.SessionTTL = time.Duration(ttlSeconds(o.SessionTTL)) * time.Second
	if o.LeaseGuard <= 0 {
		o.LeaseGuard = o.SessionTTL / DefaultLeaseGuardDivide
	}
	if o.Node == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "tock"
		}
		o.Node = h
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.MaxTxnOps == 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.MaxTxnBytes <= 0 {
		o.MaxTxnBytes = DefaultMaxTxnBytes
	}
	if o.LoadPageSize <= 0 {
		o.LoadPageSize = DefaultLoadPageSize
	}
	if o.TxnConcurrency <= 0 {
		o.TxnConcurrency = DefaultTxnConcurrency
	}
}

// validate checks the fields after setDefaults and names the first bad one.
func (o *Options) validate() error {
	switch {
	case (len(o.Endpoints) == 0) == (o.Embedded == ""):
		return fmt.Errorf("%w: set exactly one of Endpoints and Embedded", ErrConfig)
	case (o.Username == "") != (o.Password == ""):
		return fmt.Errorf("%w: Username and Password go together", ErrConfig)
	case o.Embedded != "" && (o.Username != "" || o.TLS != nil):
		return fmt.Errorf("%w: Username, Password and TLS are for Endpoints; the embedded etcd has its own root password (%s)", ErrConfig, RootPasswordFile)
	case o.LeaseGuard >= o.SessionTTL:
		return fmt.Errorf("%w: LeaseGuard %v must be below SessionTTL %v", ErrConfig, o.LeaseGuard, o.SessionTTL)
	case o.MaxTxnOps <= max(txnDepthNext, deleteDepth):
		return fmt.Errorf("%w: MaxTxnOps %d must exceed %d", ErrConfig, o.MaxTxnOps, max(txnDepthNext, deleteDepth))
	case strings.ContainsRune(o.Node, 0):
		return fmt.Errorf("%w: Node has a NUL byte", ErrConfig)
	}
	return nil
}

func ttlSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
