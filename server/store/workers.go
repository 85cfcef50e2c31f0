package store

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Workers is the worker registry: <prefix>workers/<node>/<name> holds what the leader
// <node> knows of a worker connected to it (its types, credits, runs in flight), written
// under the node's session lease, so that the entries of a leader that dies vanish with
// its lease, and the workers, reconnecting to the next leader, appear under it.
//
// Invariant: every entry Put writes is attached to the lease of this Store's live
// session, the one its Leaderships stand on (sessions): etcd deletes the entry when that
// lease ends. Costs: Put and Delete are one request each (Put may first
// make the session: a lease grant), List one read.
//
// Concurrency: safe for concurrent use; the session is the Store's (sessions, guarded by
// its mu), every other field is set when the Store opens and never changes.
type Workers struct {
	cli      *clientv3.Client
	keys     keyspace
	sessions *sessions
}

// Worker is one registry entry.
type Worker struct {
	Node  string // the leader the worker is connected to
	Name  string // the entry's name under the node (unique per connection)
	Value []byte // what the leader reports (opaque to the store)
}

// Put writes a registry entry under this node's session lease (made if needed).
func (ws *Workers) Put(ctx context.Context, node, name string, value []byte) error {
	k, err := ws.keys.worker(node, name)
	if err != nil {
		return err
	}
	ss, err := ws.sessions.live()
	if err != nil {
		return err
	}
	if _, err := ws.cli.Put(ctx, k, string(value), clientv3.WithLease(ss.sess.Lease())); err != nil {
		return fmt.Errorf("store: register worker %s: %w", k, err)
	}
	return nil
}

// Delete removes a registry entry (absent is no error).
func (ws *Workers) Delete(ctx context.Context, node, name string) error {
	k, err := ws.keys.worker(node, name)
	if err != nil {
		return err
	}
	if _, err := ws.cli.Delete(ctx, k); err != nil {
		return fmt.Errorf("store: unregister worker %s: %w", k, err)
	}
	return nil
}

// List lists the registry, in key order.
func (ws *Workers) List(ctx context.Context) ([]Worker, error) {
	resp, err := ws.cli.Get(ctx, ws.keys.workers, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list workers: %w", err)
	}
	out := make([]Worker, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		node, name, ok := split(ws.keys.workers, string(kv.Key))
		if ok {
			out = append(out, Worker{Node: node, Name: name, Value: kv.Value})
		}
	}
	return out, nil
}
