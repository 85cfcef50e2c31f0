package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// sessions is the one place a Store keeps its etcd session: the lease that its
// Leaderships (Election) and its worker registry entries (Workers) stand on, and that
// lease's valid-until (lease.go). Both reach the session through live, so they always
// share one lease.
//
// Invariants: at most one session at a time (cur); once closed, none is made again and
// live fails with ErrClosed. Costs: live is a lock and a channel poll while the session
// lives; making one is a lease grant and a keep-alive stream (two requests), and it then
// runs two goroutines (renew and watch) until the session is lost.
//
// Concurrency: cur and closed are guarded by mu; published is cur, atomic, for existing,
// which must not wait behind a live that is making a session (its lease grant waits as
// long as etcd is unreachable); every other field is set when the Store opens and never
// changes.
type sessions struct {
	cli   *clientv3.Client
	ttl   time.Duration // Options.SessionTTL
	guard time.Duration // Options.LeaseGuard

	mu        sync.Mutex
	cur       *session // nil until the first live, and after close
	closed    bool
	published atomic.Pointer[session]
}

// existing returns the current session if it lives, else nil; it makes none, and takes
// no lock. For a caller that only undoes what a live session holds (a registration
// under a lost lease is gone with it).
func (ss *sessions) existing() *session {
	cur := ss.published.Load()
	if cur == nil {
		return nil
	}
	select {
	case <-cur.lost:
		return nil
	default:
		return cur
	}
}

// session is the Store's one leadership session and the watch on its lease.
type session struct {
	sess    *concurrency.Session
	lost    chan struct{} // closed once the lease may be gone
	cancel  context.CancelFunc
	closing atomic.Bool   // set by sessions.close, which revokes itself
	lease   leaseDeadline // valid until (lease.go): renewed by renew, read by Leadership.Valid
}

// live returns the current session, making a new one if there is none or the last was
// lost.
func (ss *sessions) live() (*session, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, ErrClosed
	}
	if ss.cur != nil {
		select {
		case <-ss.cur.lost:
		default:
			return ss.cur, nil
		}
	}
	before := time.Now()
	ttl := ttlSeconds(ss.ttl)
	sess, err := concurrency.NewSession(ss.cli, concurrency.WithTTL(ttl))
	if err != nil {
		return nil, fmt.Errorf("store: new session: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ka, err := ss.cli.KeepAlive(ctx, sess.Lease())
	if err != nil {
		cancel()
		sess.Close()
		return nil, fmt.Errorf("store: watch session lease: %w", err)
	}
	cur := &session{sess: sess, lost: make(chan struct{}), cancel: cancel}
	// The lease cannot expire before before+TTL (it was granted after it).
	cur.lease.extend(before, time.Duration(ttl)*time.Second, ss.guard)
	gone := make(chan struct{})
	once := clientKeepAliveOnce(ss.cli, sess.Lease())
	go func() {
		if renew(ctx, once, time.Now, ss.ttl/renewDivide, ss.guard, &cur.lease) == errLeaseGone {
			close(gone)
		}
	}()
	go cur.watch(ka, gone)
	ss.cur = cur
	ss.published.Store(cur)
	return cur, nil
}

// close revokes the current session, if any (firing its Leaderships' Done), and makes
// every later live fail with ErrClosed. Only the first call does anything: first
// reports whether this was it.
func (ss *sessions) close() (first bool, err error) {
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return false, nil
	}
	ss.closed = true
	cur := ss.cur
	ss.cur = nil
	ss.published.Store(nil)
	ss.mu.Unlock()
	if cur == nil {
		return true, nil
	}
	cur.closing.Store(true)
	err = cur.sess.Close()
	cur.cancel()
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return true, fmt.Errorf("store: close session: %w", err)
	}
	return true, nil
}

// watch closes ss.lost when the session ends, when renew finds the lease gone
// (gone), or when the lease's valid-until (ss.lease, lease.go) passes. The
// session's own keep-alive (ka) goes on beside renew but extends nothing: its
// answers carry no send time. When it gives up on a session that did not end by
// itself, it revokes the lease in the background so the election key goes now,
// not at expiry.
func (ss *session) watch(ka <-chan *clientv3.LeaseKeepAliveResponse, gone <-chan struct{}) {
	revoke := false
	defer func() {
		ss.cancel()
		close(ss.lost)
		if revoke && !ss.closing.Load() {
			go ss.sess.Close()
		}
	}()
	t := time.NewTimer(time.Until(ss.lease.until()))
	defer t.Stop()
	for {
		select {
		case r, ok := <-ka:
			if !ok || r.TTL <= 0 {
				return // cancelled by Close, or the lease is already gone
			}
		case <-gone:
			return // etcd no longer has the lease: nothing to revoke
		case <-t.C:
			if now := time.Now(); ss.lease.valid(now) {
				t.Reset(ss.lease.until().Sub(now)) // renewed meanwhile
				continue
			}
			revoke = true
			return
		case <-ss.sess.Done():
			return // closed, orphaned or expired: nothing to revoke
		}
	}
}
