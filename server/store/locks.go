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
// next leader knows a run may still be executing on a worker and waits it out.

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

// PutLock records that run runID of ns/id is dispatched (replacing an earlier run's lock).
func (s *Store) PutLock(ctx context.Context, ns, id string, runID uint64) error {
	k, err := s.lockKey(ns, id)
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, k, runValue(runID)); err != nil {
		return fmt.Errorf("store: lock %s: %w", k, err)
	}
	return nil
}

// DeleteLock removes ns/id's lock if it still names run runID (a later run's lock stays).
func (s *Store) DeleteLock(ctx context.Context, ns, id string, runID uint64) error {
	k, err := s.lockKey(ns, id)
	if err != nil {
		return err
	}
	_, err = s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(k), "=", runValue(runID))).
		Then(clientv3.OpDelete(k)).
		Commit()
	if err != nil {
		return fmt.Errorf("store: unlock %s: %w", k, err)
	}
	return nil
}

// Locks returns the tasks with a run lock now, in one read.
func (s *Store) Locks(ctx context.Context) (map[Key]bool, error) { return s.LocksAt(ctx, 0) }
