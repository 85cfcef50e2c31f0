package store

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The worker registry: <prefix>workers/<node>/<name> holds what the leader <node> knows
// of a worker connected to it (its types, credits, runs in flight), written under the
// node's session lease, so that the entries of a leader that dies vanish with its lease,
// and the workers, reconnecting to the next leader, appear under it.

// Worker is one registry entry.
type Worker struct {
	Node  string // the leader the worker is connected to
	Name  string // the entry's name under the node (unique per connection)
	Value []byte // what the leader reports (opaque to the store)
}

func (s *Store) workerKey(node, name string) (string, error) {
	if node == "" || name == "" || strings.IndexByte(node, '/') >= 0 {
		return "", fmt.Errorf("%w: worker %q of node %q", ErrInvalid, name, node)
	}
	return s.workers + node + "/" + name, nil
}

// PutWorker writes a registry entry under this node's session lease (made if needed).
func (s *Store) PutWorker(ctx context.Context, node, name string, value []byte) error {
	k, err := s.workerKey(node, name)
	if err != nil {
		return err
	}
	ss, err := s.liveSession()
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, k, string(value), clientv3.WithLease(ss.sess.Lease())); err != nil {
		return fmt.Errorf("store: register worker %s: %w", k, err)
	}
	return nil
}

// DeleteWorker removes a registry entry (absent is no error).
func (s *Store) DeleteWorker(ctx context.Context, node, name string) error {
	k, err := s.workerKey(node, name)
	if err != nil {
		return err
	}
	if _, err := s.cli.Delete(ctx, k); err != nil {
		return fmt.Errorf("store: unregister worker %s: %w", k, err)
	}
	return nil
}

// Workers lists the registry, in key order.
func (s *Store) Workers(ctx context.Context) ([]Worker, error) {
	resp, err := s.cli.Get(ctx, s.workers, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list workers: %w", err)
	}
	out := make([]Worker, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		node, name, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), s.workers), "/")
		if ok {
			out = append(out, Worker{Node: node, Name: name, Value: kv.Value})
		}
	}
	return out, nil
}
