package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Election is this node's side of the leader election on <prefix>leader: Campaign makes
// it leader for a term (a Leadership), Leader reads who leads now. Terms stand on the
// Store's one session (sessions), the lease its worker registry entries share.
//
// Invariants: ∀ terms a, b: b won after a ended ⇒ a.Epoch() < b.Epoch() (an epoch is
// its election key's CreateRevision, and etcd's revisions only grow), across every node
// campaigning under the prefix; ∀ terms t that Campaign returns: at a revision after
// every older candidate's key was gone, t's key existed, created at t.Epoch() under the
// lease of t's session, and that session was not lost when Campaign returned (so t's
// key was the oldest: no other node led then); a term lasts until its session is lost,
// its key is deleted or rewritten, or it resigns (Leadership.Done). Costs: Campaign is a
// lease grant when there is no live session, then a put and a wait for every older
// candidate's key to go, then one read (its key, read back) and one watch per term on
// the client's shared watch stream; a candidate whose key went while it waited pays
// that again. Leader is one read; Changes one watch.
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
//
// etcd's Campaign returns once every older key is gone, without looking at its own, which
// may have gone while it waited in line: its lease expired or was revoked (the session
// lapsed), or it was deleted. A term on that key would lead with no key, perhaps beside
// the next candidate, whose key is now the oldest. So after etcd's Campaign, CampaignAs
// reads the key back (the term's one read) and begins a term only if it is still the
// key this campaign made, under the session's lease, and the session is not lost;
// otherwise it campaigns again, on a fresh session if this one was lost. A failed read
// back leaves the key in place: a later Campaign on the same session takes it up again.
func (e *Election) CampaignAs(ctx context.Context, value string) (*Leadership, error) {
	for {
		ss, err := e.sessions.live()
		if err != nil {
			return nil, err
		}
		ce := concurrency.NewElection(ss.sess, e.key)
		err = ce.Campaign(ctx, value)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The lease is gone, and the session watch has not seen it yet: it will, by the
			// lease's valid-until at the latest, and live then makes a fresh session.
			select {
			case <-ss.lost:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("store: campaign: %w", ctx.Err())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("store: campaign: %w", err)
		}
		resp, err := e.cli.Get(ctx, ce.Key())
		if err != nil {
			return nil, fmt.Errorf("store: campaign: read the election key back: %w", err)
		}
		if len(resp.Kvs) == 0 || !ownKey(resp.Kvs[0], ce, ss) {
			continue // the key went while this node waited in line
		}
		select {
		case <-ss.lost:
			continue // the session lapsed while this node waited; its key goes with it
		default:
		}
		return e.begin(ss, ce, resp.Kvs[0].ModRevision), nil
	}
}

// ownKey reports whether kv, read after ce's Campaign returned, is the election key that
// campaign made on session ss: created at ce's revision, under ss's lease. Every older
// key was gone by then, so while it is, this node leads.
func ownKey(kv *mvccpb.KeyValue, ce *concurrency.Election, ss *session) bool {
	return kv.CreateRevision == ce.Rev() && clientv3.LeaseID(kv.Lease) == ss.sess.Lease()
}

// begin starts the term of ce, elected on session ss, whose key was last written at
// revision modRev: its Done closes when the session is lost, the term resigns, or the
// key changes after modRev.
func (e *Election) begin(ss *session, ce *concurrency.Election, modRev int64) *Leadership {
	l := &Leadership{elec: ce, key: ce.Key(), epoch: ce.Rev(), done: make(chan struct{}), resigned: make(chan struct{}), lease: &ss.lease}
	wctx, stopWatch := context.WithCancel(context.Background())
	keyGone := e.watchKey(wctx, l.key, l.epoch, modRev)
	go func() {
		select {
		case <-ss.lost:
		case <-l.resigned:
		case <-keyGone:
		}
		stopWatch()
		close(l.done)
	}()
	return l
}

// watchKey returns a channel closed once the election key key (created at revision
// created, last written at modRev) is deleted or rewritten after modRev, or once the
// watch cannot tell (it failed, or etcd compacted past the revision watched from): a
// term whose key changed is over even while its session lives (an operator or a new
// leader deleted it), and a node that makes no fenced write would otherwise learn it
// only when its session ends. It costs one watch per term, on the client's shared watch
// stream; ctx ends it.
func (e *Election) watchKey(ctx context.Context, key string, created, modRev int64) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for wr := range e.cli.Watch(ctx, key, clientv3.WithRev(modRev+1)) {
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
