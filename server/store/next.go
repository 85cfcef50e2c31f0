package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A recurring durable task's progress: <prefix>next/<ns>/<id> holds the due time (Unix
// ns, big-endian) of the occurrence its leader has armed, so that the next leader
// continues the schedule from there (and applies the task's misfire policy to
// occurrences that fell due while no node led) instead of starting it over. It is
// deleted with the task's record (DeleteBatch).

// NextDue is one task's progress.
type NextDue struct {
	Key Key
	Due int64 // Unix ns
}

func (s *Store) nextKey(ns, id string) (string, error) {
	if ns == "" || id == "" || strings.IndexByte(ns, '/') >= 0 {
		return "", fmt.Errorf("%w: namespace %q id %q", ErrInvalid, ns, id)
	}
	return s.next + ns + "/" + id, nil
}

// PutNextFenced records the progress of tasks, while f holds (ErrFenced otherwise), in
// as few transactions as MaxTxnOps allows, TxnConcurrency at once.
func (s *Store) PutNextFenced(ctx context.Context, f Fence, items []NextDue) error {
	var txns [][]clientv3.Op
	var ops []clientv3.Op
	for _, it := range items {
		k, err := s.nextKey(it.Key.Namespace, it.Key.ID)
		if err != nil {
			return err
		}
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], uint64(it.Due))
		ops = append(ops, clientv3.OpPut(k, string(v[:])))
		if len(ops) == s.opts.MaxTxnOps {
			txns, ops = append(txns, ops), nil
		}
	}
	if len(ops) > 0 {
		txns = append(txns, ops)
	}
	return s.commitFenced(ctx, f, txns, "record the progress of tasks")
}

// NextAt returns the progress of every recurring task at revision rev (Load's; 0: now).
func (s *Store) NextAt(ctx context.Context, rev int64) (map[Key]int64, error) {
	resp, err := s.cli.Get(ctx, s.next, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("store: read the tasks' progress at %d: %w", rev, err)
	}
	next := make(map[Key]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if k, due, ok := s.decodeNext(kv.Key, kv.Value); ok {
			next[k] = due
		}
	}
	return next, nil
}

func (s *Store) decodeNext(key, val []byte) (Key, int64, bool) {
	ns, id, ok := strings.Cut(strings.TrimPrefix(string(key), s.next), "/")
	if !ok || len(val) != 8 {
		return Key{}, 0, false
	}
	return Key{ns, id}, int64(binary.BigEndian.Uint64(val)), true
}
