package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// session is the Store's one leadership session and the watch on its lease.
type session struct {
	sess    *concurrency.Session
	lost    chan struct{} // closed once the lease may be gone
	cancel  context.CancelFunc
	closing atomic.Bool   // set by Store.Close, which revokes itself
	lease   leaseDeadline // valid until (lease.go): renewed by renew, read by Leadership.Valid
}

// Leadership is this node's term as leader.
type Leadership struct {
	elec      *concurrency.Election
	key       string // the election key, kept: the Election forgets it on Resign
	epoch     int64
	done      chan struct{}
	resigned  chan struct{}
	resignOne sync.Once
	lease     *leaseDeadline // the session's
}

// Valid reports whether this node's lease is certainly alive at now (read with
// time.Now, which carries a monotonic reading): now is before ValidUntil. It is one
// atomic load and a compare, allocation-free: a leader checks it just before each act
// of leadership, rather than trusting Done, which a goroutine that runs late closes.
func (l *Leadership) Valid(now time.Time) bool { return l.lease.valid(now) }

// ValidUntil is the moment this node stops being certain its lease is alive: the send
// time of the latest keep-alive etcd answered, plus the TTL it granted, minus
// LeaseGuard. It precedes the earliest moment etcd can expire the lease, and only grows.
func (l *Leadership) ValidUntil() time.Time { return l.lease.until() }

// Epoch is the CreateRevision of this node's election key: the fencing token.
// A later leader always has a higher epoch.
func (l *Leadership) Epoch() int64 { return l.epoch }

// Fence is the condition that makes a write apply only during this term.
func (l *Leadership) Fence() Fence { return Fence{Key: l.key, Rev: l.epoch} }

// Key is this node's election key.
func (l *Leadership) Key() string { return l.key }

// Done is closed when this node must stop acting as leader: its session is
// lost (or about to be; see the package doc), its election key was deleted or
// rewritten (by an operator, or by a next leader after the session's expiry),
// or Resign was called.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// Resign gives up leadership: Done closes and the election key is deleted,
// letting the next candidate in. The session stays for the next Campaign.
func (l *Leadership) Resign(ctx context.Context) error {
	l.resignOne.Do(func() { close(l.resigned) })
	if err := l.elec.Resign(ctx); err != nil {
		return fmt.Errorf("store: resign: %w", err)
	}
	return nil
}

// Campaign blocks until this node is elected on <prefix>leader, or ctx ends; its
// election key's value is Options.Node.
func (s *Store) Campaign(ctx context.Context) (*Leadership, error) {
	return s.CampaignAs(ctx, s.opts.Node)
}

// CampaignAs is Campaign with value as the election key's value: what Leader reports to
// other nodes while this one leads (a server puts its client address there).
func (s *Store) CampaignAs(ctx context.Context, value string) (*Leadership, error) {
	ss, err := s.liveSession()
	if err != nil {
		return nil, err
	}
	e := concurrency.NewElection(ss.sess, s.leader)
	if err := e.Campaign(ctx, value); err != nil {
		return nil, fmt.Errorf("store: campaign: %w", err)
	}
	l := &Leadership{elec: e, key: e.Key(), epoch: e.Rev(), done: make(chan struct{}), resigned: make(chan struct{}), lease: &ss.lease}
	wctx, stopWatch := context.WithCancel(context.Background())
	keyGone := s.watchKey(wctx, l.key, l.epoch)
	go func() {
		select {
		case <-ss.lost:
		case <-l.resigned:
		case <-keyGone:
		}
		stopWatch()
		close(l.done)
	}()
	return l, nil
}

// watchKey returns a channel closed once the election key key (created at revision
// created) is deleted or rewritten, or once the watch cannot tell (the first read or
// the watch failed, or etcd compacted past the revision watched from): a term whose key changed is over even while
// its session lives (an operator or a new leader deleted it), and a node that makes no
// fenced write would otherwise learn it only when its session ends. It costs one watch
// per term, on the client's shared watch stream; ctx ends it.
func (s *Store) watchKey(ctx context.Context, key string, created int64) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		// The key as it is now: Campaign may have rewritten its value after creating it.
		resp, err := s.cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != created {
			return
		}
		for wr := range s.cli.Watch(ctx, key, clientv3.WithRev(resp.Kvs[0].ModRevision+1)) {
			if wr.Err() != nil || wr.Canceled {
				return
			}
			if n := len(wr.Events); n > 0 {
				if wr.Events[n-1].Type == clientv3.EventTypePut {
					s.dropRewritten(key, created)
				}
				return
			}
		}
	}()
	return gone
}

// dropRewritten deletes the election key key if it is still the one created at revision
// created: it was rewritten, and the term it began is over; without the delete, this
// session's next Campaign would find the key and lead again at the same epoch. Bounded
// by the session TTL; a failure leaves the key to the session's end.
func (s *Store) dropRewritten(key string, created int64) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.SessionTTL)
	defer cancel()
	_, _ = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", created)).
		Then(clientv3.OpDelete(key)).Commit()
}

// liveSession returns the current session, making a new one if there is
// none or the last was lost.
func (s *Store) liveSession() (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.session != nil {
		select {
		case <-s.session.lost:
		default:
			return s.session, nil
		}
	}
	before := time.Now()
	ttl := ttlSeconds(s.opts.SessionTTL)
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(ttl))
	if err != nil {
		return nil, fmt.Errorf("store: new session: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ka, err := s.cli.KeepAlive(ctx, sess.Lease())
	if err != nil {
		cancel()
		sess.Close()
		return nil, fmt.Errorf("store: watch session lease: %w", err)
	}
	ss := &session{sess: sess, lost: make(chan struct{}), cancel: cancel}
	// The lease cannot expire before before+TTL (it was granted after it).
	ss.lease.extend(before, time.Duration(ttl)*time.Second, s.opts.LeaseGuard)
	gone := make(chan struct{})
	once := clientKeepAliveOnce(s.cli, sess.Lease())
	go func() {
		if renew(ctx, once, time.Now, s.opts.SessionTTL/renewDivide, s.opts.LeaseGuard, &ss.lease) == errLeaseGone {
			close(gone)
		}
	}()
	go ss.watch(ka, gone)
	s.session = ss
	return ss, nil
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

// Leader returns the value the current leader campaigned with, and its epoch; ErrNoLeader
// when no node leads. It is one read, needs no session, and may be stale by the time it
// returns (leadership can change at any moment).
func (s *Store) Leader(ctx context.Context) (value string, epoch int64, err error) {
	// The election's keys are <leader>/<lease>; the leader is the oldest (as
	// concurrency.Election.Leader reads it).
	resp, err := s.cli.Get(ctx, s.leader+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", 0, fmt.Errorf("store: read the leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, ErrNoLeader
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].CreateRevision, nil
}
