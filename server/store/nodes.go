package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Nodes is the registry of live nodes: <prefix>nodes/<name> holds one node's client
// address and start time, written under that node's session lease (the one its
// Leaderships stand on), so that a node that dies leaves the set when its lease does,
// and a node that closes its Store leaves at once (the lease is revoked). Watch follows
// the set, from which every node computes the same partition map.
//
// Invariants:
//   - ∀ names x: at most one live lease holds nodes/x: Register writes the key only
//     while it is absent or held by this Store's own session (ErrNodeTaken otherwise),
//     so two processes given one name cannot both be counted as x.
//   - ∀ sets s a Watch delivers: s.Nodes is the registry as etcd held it at revision
//     s.Rev, sorted by name, and s.Rev grows strictly from one delivery to the next.
//     Every watcher sees every change at the same revision, so two watchers' sets at one
//     revision are equal.
//
// Costs: Register is one transaction (two when the name is held: a read-back, then a
// put under this session's lease), plus a lease grant when there is no live session;
// Watch one read, then one watch on the client's shared stream.
//
// Concurrency: safe for concurrent use; the session is the Store's (sessions, guarded
// by its mu), every other field is set when the Store opens and never changes.
type Nodes struct {
	cli      *clientv3.Client
	keys     keyspace
	sessions *sessions
}

// Node is one registry entry.
type Node struct {
	Name    string    // the node's ID (Options.Node of its server): the key's last part
	Addr    string    // its client address, where clients reach it
	Started time.Time // when it started; informational
	Rev     int64     // the revision its entry was last written at (Watch's sets)
}

// NodeSet is the registry at one revision.
type NodeSet struct {
	Rev   int64  // the etcd revision the set was read at or last changed at
	Nodes []Node // sorted by Name
}

// nodeValue is a Node's value in etcd, as JSON.
type nodeValue struct {
	Addr    string    `json:"addr"`
	Started time.Time `json:"started"`
}

// decodeNode is the entry of node name with value val, written at revision rev. A value
// that does not decode gives a Node with no address: it is still live (its key stands on a live lease), and
// every watcher decodes the same bytes alike, so every node still counts it.
func decodeNode(name string, val []byte, rev int64) (Node, error) {
	var v nodeValue
	if err := json.Unmarshal(val, &v); err != nil {
		return Node{Name: name, Rev: rev}, fmt.Errorf("%w: node %q: %v", ErrCorrupt, name, err)
	}
	return Node{Name: name, Addr: v.Addr, Started: v.Started, Rev: rev}, nil
}

// Register writes n's entry under this Store's session lease (made if needed) and
// returns a channel closed when that session is lost: the entry goes with it, and the
// caller registers again (on the next session). A name held under another lease gives
// ErrNodeTaken (it frees itself when that lease ends: a restarted node waits out its
// predecessor's TTL); an empty name or one with a '/' gives ErrInvalid.
func (ns *Nodes) Register(ctx context.Context, n Node) (lost <-chan struct{}, err error) {
	if n.Name == "" || strings.IndexByte(n.Name, '/') >= 0 {
		return nil, fmt.Errorf("%w: node name %q", ErrInvalid, n.Name)
	}
	key := ns.keys.nodes + n.Name
	val, err := json.Marshal(nodeValue{Addr: n.Addr, Started: n.Started})
	if err != nil {
		return nil, fmt.Errorf("store: register node %s: %w", n.Name, err)
	}
	ss, err := ns.sessions.live()
	if err != nil {
		return nil, err
	}
	lease := ss.sess.Lease()
	put := clientv3.OpPut(key, string(val), clientv3.WithLease(lease))
	resp, err := ns.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(put).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, txnFailed("register node "+n.Name, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 1 && clientv3.LeaseID(kvs[0].Lease) != lease {
			return nil, fmt.Errorf("%w: %s is registered under lease %x, not this node's %x", ErrNodeTaken,
				n.Name, kvs[0].Lease, int64(lease))
		}
		// Held by this session already (or gone since): write it again, only while no
		// other lease has taken it meanwhile.
		resp, err = ns.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", lease)).Then(put).Commit()
		if err != nil {
			return nil, txnFailed("register node "+n.Name, err)
		}
		if !resp.Succeeded {
			return nil, fmt.Errorf("%w: %s changed hands while registering", ErrNodeTaken, n.Name)
		}
	}
	return ss.lost, nil
}

// Deregister removes name's entry if this Store's session holds it, so that the other
// nodes recompute their map now rather than when the lease ends. Absent is no error, and
// nor is no live session (the entry went with its lease): Deregister makes none, nor
// waits for one being made, so a node cut off from etcd is not held up by it.
func (ns *Nodes) Deregister(ctx context.Context, name string) error {
	key := ns.keys.nodes + name
	ss := ns.sessions.existing()
	if ss == nil {
		return nil
	}
	_, err := ns.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", ss.sess.Lease())).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return txnFailed("deregister node "+name, err)
	}
	return nil
}

// Watch calls fn with the registry now, then again after every change, until ctx ends
// (nil) or the watch is lost (ErrFollowLost, or the cause): the caller calls Watch
// again, which reads the set afresh. fn runs on Watch's goroutine; a slow fn delays
// the next delivery, never skips one.
func (ns *Nodes) Watch(ctx context.Context, fn func(NodeSet)) error {
	resp, err := ns.cli.Get(ctx, ns.keys.nodes, clientv3.WithPrefix())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("store: read the nodes: %w", err)
	}
	live := map[string]Node{}
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), ns.keys.nodes)
		live[name], _ = decodeNode(name, kv.Value, kv.ModRevision)
	}
	fn(nodeSet(resp.Header.Revision, live))
	return watchPrefix(ctx, ns.cli, ns.keys.nodes, resp.Header.Revision+1, func(evs []*clientv3.Event, rev int64) {
		for _, ev := range evs {
			name := strings.TrimPrefix(string(ev.Kv.Key), ns.keys.nodes)
			if ev.Type == clientv3.EventTypeDelete {
				delete(live, name)
				continue
			}
			live[name], _ = decodeNode(name, ev.Kv.Value, ev.Kv.ModRevision)
		}
		fn(nodeSet(rev, live))
	})
}

// watchPrefix calls fn with every response's events under prefix from revision from on,
// and the revision of the last of them, until ctx ends (nil) or the watch is lost
// (ErrFollowLost, or the cause). Progress notifications (no events) are skipped.
func watchPrefix(ctx context.Context, cli *clientv3.Client, prefix string, from int64, fn func(evs []*clientv3.Event, rev int64)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrFollowLost, err)
		}
		if len(wr.Events) > 0 {
			fn(wr.Events, wr.Events[len(wr.Events)-1].Kv.ModRevision)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return ErrFollowLost
}

// nodeSet is live at rev, sorted by name.
func nodeSet(rev int64, live map[string]Node) NodeSet {
	s := NodeSet{Rev: rev, Nodes: make([]Node, 0, len(live))}
	for _, n := range live {
		s.Nodes = append(s.Nodes, n)
	}
	slices.SortFunc(s.Nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	return s
}
