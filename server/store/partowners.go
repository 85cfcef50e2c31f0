package store

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Holder is the holder of one partition's owner key, <prefix>partitions/owner/<p>: the
// node that holds the partition's lease, under its session lease.
type Holder struct {
	Node string // the holder's node name (the key's value)
	// Epoch is the key's create revision: the partition's epoch under this holder, its
	// fencing revision. Each new holder's is higher than every earlier one's.
	Epoch int64
}

// Holders are the owner keys at one revision.
type Holders struct {
	Rev int64          // the revision they were read at or last changed at
	By  map[int]Holder // by partition; a partition without a key is absent
}

// Term is the session a holding stands on: its owner keys go with its lease. The zero
// Term is never valid and never lost (a nil Lost channel).
type Term struct{ s *session }

// Lost is closed once the session may be gone: its keys may be gone too, and the holder
// holds nothing from then on (it claims again, on a new session).
func (t Term) Lost() <-chan struct{} {
	if t.s == nil {
		return nil
	}
	return t.s.lost
}

// Valid reports whether now precedes the session's valid-until (lease.go): while it
// does, etcd cannot have expired the lease, so the holdings on it still stand (but for
// a Release or an operator's delete, which the owner keys' watch shows). It is the check
// to make where a holder acts, since Lost is closed by a goroutine that may run late.
// One atomic load and a compare.
func (t Term) Valid(now time.Time) bool {
	if t.s == nil {
		return false
	}
	select {
	case <-t.s.lost:
		return false
	default:
		return t.s.lease.valid(now)
	}
}

// ownerKey is partition p's owner key.
func (k keyspace) ownerKey(p int) string { return k.partitionOwner + strconv.Itoa(p) }

// Claim creates partition p's owner key, naming node, under this Store's session lease
// (made if needed), if no key is there: one transaction on its CreateRevision being 0,
// so that two nodes never hold one partition at once. held is true when the key is
// this session's (created now, or earlier); h is then this holding, else the holder
// that has the key. term is the session the claim was made on (the key goes with its
// lease): from its end (Lost, or not Valid) the caller holds nothing, and claims
// again. A negative p or an empty node name, or one with a '/', gives ErrInvalid.
func (ps *Partitions) Claim(ctx context.Context, p int, node string) (h Holder, held bool, term Term, err error) {
	if p < 0 || node == "" || strings.IndexByte(node, '/') >= 0 {
		return Holder{}, false, Term{}, fmt.Errorf("%w: partition %d's holder %q", ErrInvalid, p, node)
	}
	ss, err := ps.sessions.live()
	if err != nil {
		return Holder{}, false, Term{}, err
	}
	term = Term{ss}
	key, lease := ps.keys.ownerKey(p), ss.sess.Lease()
	resp, err := ps.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, node, clientv3.WithLease(lease))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return Holder{}, false, term, txnFailed(fmt.Sprintf("claim partition %d", p), err)
	}
	if resp.Succeeded {
		return Holder{Node: node, Epoch: resp.Header.Revision}, true, term, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return Holder{}, false, term, nil // gone since the compare: claim again
	}
	h = Holder{Node: string(kvs[0].Value), Epoch: kvs[0].CreateRevision}
	return h, clientv3.LeaseID(kvs[0].Lease) == lease, term, nil
}

// Release deletes partition p's owner key if it is still the one created at epoch (the
// caller's holding): one transaction. A key already gone, or another holder's, is left
// alone, and is no error.
func (ps *Partitions) Release(ctx context.Context, p int, epoch int64) error {
	key := ps.keys.ownerKey(p)
	_, err := ps.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", epoch)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return txnFailed(fmt.Sprintf("release partition %d", p), err)
	}
	return nil
}

// WatchHolders calls fn with the owner keys now, then after every change (a fresh map
// each time, fn's to keep), until ctx ends (nil) or the watch is lost (ErrFollowLost,
// or the cause): the caller calls WatchHolders again, which reads afresh. A key under
// owner/ that is not a partition number is passed over. fn runs on WatchHolders'
// goroutine. Cost: one range read, then one watch on the client's shared stream.
func (ps *Partitions) WatchHolders(ctx context.Context, fn func(Holders)) error {
	under := ps.keys.partitionOwner
	resp, err := ps.cli.Get(ctx, under, clientv3.WithPrefix())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("store: read the partition holders: %w", err)
	}
	by := map[int]Holder{}
	for _, kv := range resp.Kvs {
		if p, ok := partitionOf(under, kv.Key); ok {
			by[p] = Holder{Node: string(kv.Value), Epoch: kv.CreateRevision}
		}
	}
	fn(Holders{Rev: resp.Header.Revision, By: maps.Clone(by)})
	return watchPrefix(ctx, ps.cli, under, resp.Header.Revision+1, func(evs []*clientv3.Event, rev int64) {
		for _, ev := range evs {
			p, ok := partitionOf(under, ev.Kv.Key)
			switch {
			case !ok:
			case ev.Type == clientv3.EventTypeDelete:
				delete(by, p)
			default:
				by[p] = Holder{Node: string(ev.Kv.Value), Epoch: ev.Kv.CreateRevision}
			}
		}
		fn(Holders{Rev: rev, By: maps.Clone(by)})
	})
}

// partitionOf is the partition of owner key key, read from under under.
func partitionOf(under string, key []byte) (int, bool) {
	p, err := strconv.Atoi(strings.TrimPrefix(string(key), under))
	return p, err == nil && p >= 0
}
