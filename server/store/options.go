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

// Options configures Open. Exactly one of Endpoints and Embedded must be set.
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

func (o Options) withDefaults() (Options, error) {
	if (len(o.Endpoints) == 0) == (o.Embedded == "") {
		return o, fmt.Errorf("%w: set exactly one of Endpoints and Embedded", ErrConfig)
	}
	if (o.Username == "") != (o.Password == "") {
		return o, fmt.Errorf("%w: Username and Password go together", ErrConfig)
	}
	if o.Embedded != "" && (o.Username != "" || o.TLS != nil) {
		return o, fmt.Errorf("%w: Username, Password and TLS are for Endpoints; the embedded etcd has its own root password (%s)", ErrConfig, RootPasswordFile)
	}
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
	if o.LeaseGuard >= o.SessionTTL {
		return o, fmt.Errorf("%w: LeaseGuard %v must be below SessionTTL %v", ErrConfig, o.LeaseGuard, o.SessionTTL)
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
	if o.MaxTxnOps <= max(txnDepthNext, deleteDepth) {
		return o, fmt.Errorf("%w: MaxTxnOps %d must exceed %d", ErrConfig, o.MaxTxnOps, max(txnDepthNext, deleteDepth))
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
	if strings.ContainsRune(o.Node, 0) {
		return o, fmt.Errorf("%w: Node has a NUL byte", ErrConfig)
	}
	return o, nil
}

func ttlSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
