package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Election is this node's side of the leader election on <prefix>leader: Campaign makes
// it leader for a term (a Leadership), Leader reads who leads now. Terms stand on the
// Store's one session (sessions), the lease its worker registry entries share.
//
// Invariants: ∀ terms a, b: b won after a ended ⇒ a.Epoch() < b.Epoch() (an epoch is
// its election key's CreateRevision, and etcd's revisions only grow), across every node
// campaigning under the prefix; a term lasts until its session is lost, its key is
// deleted or rewritten, or it resigns (Leadership.Done). Costs:
// Campaign is a lease grant when there is no live session, then a put and a wait for
// every older candidate's key to go, then one read and one watch per term on the
// client's shared watch stream; Leader is one read; Changes one watch.
//
// Concurrency: safe for concurrent use; the session is the Store's (sessions, guarded by
// its mu), every other field is set when the Store opens and never changes.
type Election struct {
	cli      *clientv3.Client
	key      string        // <prefix>leader: the election's prefix
	node     string        // Options.Node: what Campaign campaigns with
	ttl      time.Duration // Options.SessionTTL: bounds dropRewritten
	sessions *sessions
}

// Leadership is this node's term as leader.
type Leadership struct {
	elec      *concurrency.Election
	key       string // the election key, kept: the concurrency.Election forgets it on Resign
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
func (e *Election) Campaign(ctx context.Context) (*Leadership, error) {
	return e.CampaignAs(ctx, e.node)
}

// CampaignAs is Campaign with value as the election key's value: what Leader reports to
// other nodes while this one leads (a server puts its client address there).
func (e *Election) CampaignAs(ctx context.Context, value string) (*Leadership, error) {
	ss, err := e.sessions.live()
	if err != nil {
		return nil, err
	}
	ce := concurrency.NewElection(ss.sess, e.key)
	if err := ce.Campaign(ctx, value); err != nil {
		return nil, fmt.Errorf("store: campaign: %w", err)
	}
	l := &Leadership{elec: ce, key: ce.Key(), epoch: ce.Rev(), done: make(chan struct{}), resigned: make(chan struct{}), lease: &ss.lease}
	wctx, stopWatch := context.WithCancel(context.Background())
	keyGone := e.watchKey(wctx, l.key, l.epoch)
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
func (e *Election) watchKey(ctx context.Context, key string, created int64) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		// The key as it is now: Campaign may have rewritten its value after creating it.
		resp, err := e.cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != created {
			return
		}
		for wr := range e.cli.Watch(ctx, key, clientv3.WithRev(resp.Kvs[0].ModRevision+1)) {
			if wr.Err() != nil || wr.Canceled {
				return
			}
			if n := len(wr.Events); n > 0 {
				if wr.Events[n-1].Type == clientv3.EventTypePut {
					e.dropRewritten(key, created)
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
func (e *Election) dropRewritten(key string, created int64) {
	ctx, cancel := context.WithTimeout(context.Background(), e.ttl)
	defer cancel()
	_, _ = e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", created)).
		Then(clientv3.OpDelete(key)).Commit()
}

// Changes returns a channel that receives after every change of a candidate's key on
// the election (a campaign, a resign, a lease's expiry), and once when the watch has
// begun: the moment to read Leader again. Changes coalesce (the channel holds one), and the channel is closed once the
// watch ends: ctx ended, or the watch failed or was cancelled (etcd compacted past
// it). A watch cannot tell an unreachable etcd from a quiet election, so a caller that
// must notice one still reads Leader now and then. It costs one watch on the client's
// shared watch stream.
func (e *Election) Changes(ctx context.Context) <-chan struct{} {
	changed := make(chan struct{}, 1)
	go func() {
		defer close(changed)
		// The watch's creation counts as a change: a reader that reads Leader on it has
		// missed nothing between its last read and the watch's start.
		for wr := range e.cli.Watch(ctx, e.key+"/", clientv3.WithPrefix(), clientv3.WithCreatedNotify()) {
			if wr.Err() != nil || wr.Canceled {
				return
			}
			if len(wr.Events) == 0 && !wr.Created {
				continue // a progress notification
			}
			select {
			case changed <- struct{}{}:
			default: // one pending is enough: the reader reads the latest
			}
		}
	}()
	return changed
}

// Leader returns the value the current leader campaigned with, and its epoch; ErrNoLeader
// when no node leads. It is one read, needs no session, and may be stale by the time it
// returns (leadership can change at any moment).
func (e *Election) Leader(ctx context.Context) (value string, epoch int64, err error) {
	// The election's keys are <leader>/<lease>; the leader is the oldest (as
	// concurrency.Election.Leader reads it).
	resp, err := e.cli.Get(ctx, e.key+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", 0, fmt.Errorf("store: read the leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, ErrNoLeader
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].CreateRevision, nil
}
