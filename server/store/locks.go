package store

import (
	"context"
	"encoding/binary"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Locks are the run locks. A run lock marks the run of an exclusive task that a leader
// dispatched and that has not ended yet: <prefix>locks/<namespace>/<id>, its value the
// run's ID (8 bytes, big-endian). They are plain keys, not attached to a lease, on
// purpose: they outlive a leader that dies mid-run, so the next leader knows a run may
// still be executing on a worker and waits it out. A leader writes and deletes them
// under its Fence (PutFenced, DeleteFenced), so a deposed leader's late write never
// lands. A record's delete (Records.DeleteBatchFenced) takes its lock with it.
//
// Invariants: ∀ ns/id, at most one lock, naming the last run written; DeleteFenced
// removes it only while it names the run given, DeleteBeforeFenced only if it was written
// at or below the revision given, so neither removes a later run's lock. Costs: each write or delete is one transaction; Held and HeldAt are
// one read of the keys only.
//
// Concurrency: safe for concurrent use; every field is set when the Store opens and
// never changes.
type Locks struct {
	cli  *clientv3.Client
	keys keyspace
}

func runValue(runID uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], runID)
	return string(b[:])
}

// Put is PutFenced with the zero Fence: it writes unconditionally.
func (ls *Locks) Put(ctx context.Context, ns, id string, runID uint64) error {
	return ls.PutFenced(ctx, Fence{}, ns, id, runID)
}

// PutFenced records that run runID of ns/id is dispatched (replacing an earlier run's
// lock), only while f holds: otherwise it writes nothing and returns ErrFenced, so that
// a leader deposed while it stalled cannot start an exclusive run (nor overwrite the next
// leader's lock, whose compare-and-delete would then leave it in etcd for good).
func (ls *Locks) PutFenced(ctx context.Context, f Fence, ns, id string, runID uint64) error {
	_, err := ls.SwapFenced(ctx, f, ns, id, runID)
	return err
}

// SwapFenced is PutFenced that also returns the run the lock named before (0
// if there was none, or its value was not a run ID): a leader parking a task at a
// takeover learns which run it waits out.
func (ls *Locks) SwapFenced(ctx context.Context, f Fence, ns, id string, runID uint64) (prev uint64, err error) {
	k, err := ls.keys.lock(ns, id)
	if err != nil {
		return 0, err
	}
	resp, err := f.txn(ls.cli.Txn(ctx)).Then(clientv3.OpPut(k, runValue(runID), clientv3.WithPrevKV())).Commit()
	if err != nil {
		return 0, fmt.Errorf("store: lock %s: %w", k, err)
	}
	if !f.held(resp) {
		return 0, fmt.Errorf("store: lock %s: %w", k, ErrFenced)
	}
	if pr := resp.Responses[0].GetResponsePut(); pr != nil && pr.PrevKv != nil && len(pr.PrevKv.Value) == 8 {
		prev = binary.BigEndian.Uint64(pr.PrevKv.Value)
	}
	return prev, nil
}

// Delete is DeleteFenced with the zero Fence.
func (ls *Locks) Delete(ctx context.Context, ns, id string, runID uint64) error {
	return ls.DeleteFenced(ctx, Fence{}, ns, id, runID)
}

// DeleteFenced removes ns/id's lock if it still names run runID (a later run's lock
// stays), only while f holds (ErrFenced otherwise: the lock stays for the next leader to
// wait out). One transaction: txn(fence ? txn(value == run ? delete) ).
func (ls *Locks) DeleteFenced(ctx context.Context, f Fence, ns, id string, runID uint64) error {
	return ls.deleteIfFenced(ctx, f, ns, id, func(k string) clientv3.Cmp {
		return clientv3.Compare(clientv3.Value(k), "=", runValue(runID))
	})
}

// DeleteBeforeFenced removes ns/id's lock, whatever run it names, if it was last
// written at or below revision rev (a lock written later, by a run that began after
// rev, stays), only while f holds (ErrFenced otherwise). A server calls it when a
// non-exclusive version replaced an exclusive one, whose run's lock (or parked lock)
// no run end would delete. One transaction: txn(fence ? txn(mod <= rev ? delete) ).
func (ls *Locks) DeleteBeforeFenced(ctx context.Context, f Fence, ns, id string, rev int64) error {
	return ls.deleteIfFenced(ctx, f, ns, id, func(k string) clientv3.Cmp {
		return clientv3.Compare(clientv3.ModRevision(k), "<", rev+1)
	})
}

// deleteIfFenced removes ns/id's lock if cond, made from the lock's key, holds, only
// while f holds (ErrFenced otherwise). One transaction: txn(fence ? txn(cond ? delete) ).
func (ls *Locks) deleteIfFenced(ctx context.Context, f Fence, ns, id string, cond func(key string) clientv3.Cmp) error {
	k, err := ls.keys.lock(ns, id)
	if err != nil {
		return err
	}
	del := clientv3.OpTxn([]clientv3.Cmp{cond(k)}, []clientv3.Op{clientv3.OpDelete(k)}, nil)
	resp, err := f.txn(ls.cli.Txn(ctx)).Then(del).Commit()
	if err != nil {
		return fmt.Errorf("store: unlock %s: %w", k, err)
	}
	if !f.held(resp) {
		return fmt.Errorf("store: unlock %s: %w", k, ErrFenced)
	}
	return nil
}

// Held returns the tasks with a run lock now, in one read.
func (ls *Locks) Held(ctx context.Context) (map[Key]bool, error) { return ls.HeldAt(ctx, 0) }

// HeldAt returns the tasks with a run lock at revision rev (Records.Load's, for a
// consistent snapshot of records and locks; 0: now).
func (ls *Locks) HeldAt(ctx context.Context, rev int64) (map[Key]bool, error) {
	resp, err := ls.cli.Get(ctx, ls.keys.locks, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("store: read run locks at %d: %w", rev, err)
	}
	locked := make(map[Key]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if k, ok := taskOf(ls.keys.locks, string(kv.Key)); ok {
			locked[k] = true
		}
	}
	return locked, nil
}
