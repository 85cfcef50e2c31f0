package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Run locks mark the run of an exclusive task that a leader dispatched and that has not
// ended yet: <prefix>locks/<namespace>/<id>, its value the run's ID. They are plain keys,
// not attached to a lease, on purpose: they outlive a leader that dies mid-run, so the
// next leader knows a run may still be executing on a worker and waits it out. A leader
// writes and deletes them under its Fence (PutLockFenced, DeleteLockFenced), so a deposed
// leader's late write never lands. A record's delete (DeleteBatchFenced) takes its lock
// with it.

func (s *Store) lockKey(ns, id string) (string, error) {
	if ns == "" || id == "" || strings.IndexByte(ns, '/') >= 0 {
		return "", fmt.Errorf("%w: namespace %q id %q", ErrInvalid, ns, id)
	}
	return s.locks + ns + "/" + id, nil
}

func runValue(runID uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], runID)
	return string(b[:])
}

// PutLock is PutLockFenced with the zero Fence: it writes unconditionally.
func (s *Store) PutLock(ctx context.Context, ns, id string, runID uint64) error {
	return s.PutLockFenced(ctx, Fence{}, ns, id, runID)
}

// PutLockFenced records that run runID of ns/id is dispatched (replacing an earlier run's
// lock), only while f holds: otherwise it writes nothing and returns ErrFenced, so that
// a leader deposed while it stalled cannot start an exclusive run (nor overwrite the next
// leader's lock, whose compare-and-delete would then leave it in etcd for good).
func (s *Store) PutLockFenced(ctx context.Context, f Fence, ns, id string, runID uint64) error {
	_, err := s.SwapLockFenced(ctx, f, ns, id, runID)
	return err
}

// SwapLockFenced is PutLockFenced that also returns the run the lock named before (0
// if there was none, or its value was not a run ID): a leader parking a task at a
// takeover learns which run it waits out.
func (s *Store) SwapLockFenced(ctx context.Context, f Fence, ns, id string, runID uint64) (prev uint64, err error) {
	k, err := s.lockKey(ns, id)
	if err != nil {
		return 0, err
	}
	resp, err := f.txn(s.cli.Txn(ctx)).Then(clientv3.OpPut(k, runValue(runID), clientv3.WithPrevKV())).Commit()
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

// DeleteLock is DeleteLockFenced with the zero Fence.
func (s *Store) DeleteLock(ctx context.Context, ns, id string, runID uint64) error {
	return s.DeleteLockFenced(ctx, Fence{}, ns, id, runID)
}

// DeleteLockFenced removes ns/id's lock if it still names run runID (a later run's lock
// stays), only while f holds (ErrFenced otherwise: the lock stays for the next leader to
// wait out). One transaction: txn(fence ? txn(value == run ? delete) ).
func (s *Store) DeleteLockFenced(ctx context.Context, f Fence, ns, id string, runID uint64) error {
	return s.deleteLockIfFenced(ctx, f, ns, id, func(k string) clientv3.Cmp {
		return clientv3.Compare(clientv3.Value(k), "=", runValue(runID))
	})
}

// DeleteLockBeforeFenced removes ns/id's lock, whatever run it names, if it was last
// written at or below revision rev (a lock written later, by a run that began after
// rev, stays), only while f holds (ErrFenced otherwise). A server calls it when a
// non-exclusive version replaced an exclusive one, whose run's lock (or parked lock)
// no run end would delete. One transaction: txn(fence ? txn(mod <= rev ? delete) ).
func (s *Store) DeleteLockBeforeFenced(ctx context.Context, f Fence, ns, id string, rev int64) error {
	return s.deleteLockIfFenced(ctx, f, ns, id, func(k string) clientv3.Cmp {
		return clientv3.Compare(clientv3.ModRevision(k), "<", rev+1)
	})
}

// deleteLockIfFenced removes ns/id's lock if cond, made from the lock's key, holds, only
// while f holds (ErrFenced otherwise). One transaction: txn(fence ? txn(cond ? delete) ).
func (s *Store) deleteLockIfFenced(ctx context.Context, f Fence, ns, id string, cond func(key string) clientv3.Cmp) error {
	k, err := s.lockKey(ns, id)
	if err != nil {
		return err
	}
	del := clientv3.OpTxn([]clientv3.Cmp{cond(k)}, []clientv3.Op{clientv3.OpDelete(k)}, nil)
	resp, err := f.txn(s.cli.Txn(ctx)).Then(del).Commit()
	if err != nil {
		return fmt.Errorf("store: unlock %s: %w", k, err)
	}
	if !f.held(resp) {
		return fmt.Errorf("store: unlock %s: %w", k, ErrFenced)
	}
	return nil
}

// Locks returns the tasks with a run lock now, in one read.
func (s *Store) Locks(ctx context.Context) (map[Key]bool, error) { return s.LocksAt(ctx, 0) }
