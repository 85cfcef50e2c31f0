package tockd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/server/partition"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// PartitionMap is which node owns each of the cluster's partitions, as this node
// computed it (partition.Assign over the live nodes' names). It is computed, not yet
// routed by: one leader still dispatches every task.
type PartitionMap struct {
	Count int   // P, the cluster's partition count
	Rev   int64 // the etcd revision of the node set it was computed from; 0 without a Store
	// Nodes are the live nodes, by name. Empty (and Owners too) while this node knows
	// of none: before its first read of the set, or with every registration gone.
	Nodes []PartitionNode
	// Owners[p] is the index in Nodes of partition p's owner; Count entries, or none
	// with no Nodes.
	Owners []int
}

// PartitionNode is one live node of a PartitionMap.
type PartitionNode struct {
	Name  string // its NodeName
	Addr  string // its client address (AdvertiseAddr, or its first listener's)
	Owned int    // how many partitions it owns
}

// ownedBy is how many partitions node owns in m.
func (m PartitionMap) ownedBy(node string) int {
	for _, n := range m.Nodes {
		if n.Name == node {
			return n.Owned
		}
	}
	return 0
}

// computeMap is the map of count partitions over set: partition.Assign over the names.
// The load bound holds every node to ⌈P/n⌉ partitions and at least P-(n-1)·⌈P/n⌉ (4..6
// of 16 over 3 nodes, where plain rendezvous gave 0..12), at the price of a few moves
// between survivors at a leave (server/partition's doc says why no rule has both).
func computeMap(count int, set store.NodeSet) PartitionMap {
	m := PartitionMap{Count: count, Rev: set.Rev}
	if len(set.Nodes) == 0 {
		return m
	}
	ids := make([]partition.NodeID, len(set.Nodes))
	index := make(map[partition.NodeID]int, len(set.Nodes))
	for i, n := range set.Nodes {
		ids[i] = partition.NodeID(n.Name)
		index[ids[i]] = i
		m.Nodes = append(m.Nodes, PartitionNode{Name: n.Name, Addr: n.Addr})
	}
	owners, err := partition.Assign(count, ids)
	if err != nil { // count passed CheckCount in validate, and there are nodes
		panic(fmt.Sprintf("tockd: partition.Assign(%d, %d nodes): %v", count, len(ids), err))
	}
	m.Owners = make([]int, count)
	for p, o := range owners {
		m.Owners[p] = index[o]
		m.Nodes[index[o]].Owned++
	}
	return m
}

// ownerRetryMin and ownerRetryMax bound the pause between failed registrations or
// watches of the node set (etcd unreachable, or this node's name still held by a
// predecessor's lease, which frees within one session TTL).
const (
	ownerRetryMin = 100 * time.Millisecond
	ownerRetryMax = 2 * time.Second
)

// ownership is this node's part in the cluster's partition map: it registers the node
// in etcd under its session lease (again after each lost session), follows the set of
// live nodes, and computes the map from each set it sees. Without a Store the node is
// alone and owns every partition (static).
//
// Invariants:
//   - cur is computeMap(count, s) for the latest node set s the watch delivered, so
//     ∀ nodes a, b: a.cur.Rev = b.cur.Rev ⇒ a.cur = b.cur (store.Nodes delivers one set
//     per revision to every watcher, and computeMap is deterministic);
//   - changed is closed exactly when cur is replaced, and replaced by a fresh channel.
//
// Locking: mu guards cur and changed (held only to read or swap them); stop and done
// are set once by start (under connSet.mu, the first Serve) and read by halt after
// connSet.drain. Its two goroutines (register, follow) run from start to halt.
type ownership struct {
	st      *store.Store // nil without a Store
	count   int          // Options.Partitions
	node    string       // Options.NodeName
	started time.Time    // when New made the server: the registration says so
	log     *slog.Logger

	mu      sync.Mutex
	cur     PartitionMap
	changed chan struct{}

	addr atomic.Pointer[string] // the advertised client address, once start has it
	stop context.CancelFunc
	done chan struct{}
}

func newOwnership(opts *Options) *ownership {
	return &ownership{st: opts.Store, count: opts.Partitions, node: opts.NodeName, started: time.Now().UTC(), log: opts.Logger,
		cur: PartitionMap{Count: opts.Partitions}, changed: make(chan struct{})}
}

// checkCount creates the cluster's partition count in etcd if it has none, and refuses
// (ErrPartitionCount, naming both) a count other than the cluster's. One etcd
// transaction, bounded by storeOpTimeout.
func (o *ownership) checkCount() error {
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	stored, err := o.st.Partitions().Ensure(ctx, o.count)
	if err != nil {
		return fmt.Errorf("tockd: read the cluster's partition count: %w", err)
	}
	if stored != o.count {
		return fmt.Errorf("%w: this node has partitions=%d, the cluster was created with partitions=%d (fixed at creation: start this node with %d)",
			ErrPartitionCount, o.count, stored, stored)
	}
	return nil
}

// start registers this node as advertise and follows the live nodes, until halt. Called
// once, by the first Serve; without a Store it only records advertise.
func (o *ownership) start(advertise string) {
	o.addr.Store(&advertise)
	if o.st == nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	o.stop, o.done = stop, make(chan struct{})
	// The registration waits for the watch's first read, so that this node sees its own
	// registration as a change, at the revision every other node sees it at: a read
	// after it would state a later revision (that of the read) for the same set.
	read := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); o.follow(ctx, read) }()
	go func() {
		defer wg.Done()
		select {
		case <-read:
			o.register(ctx, advertise)
		case <-ctx.Done():
		}
	}()
	go func() { wg.Wait(); close(o.done) }()
}

// halt stops following and registering, then removes this node's registration, so that
// the other nodes recompute their maps now rather than at the lease's end; each step
// waits until ctx ends at most. Requires start (it does nothing before).
func (o *ownership) halt(ctx context.Context) {
	if o.stop == nil {
		return
	}
	o.stop()
	select {
	case <-o.done:
	case <-ctx.Done():
	}
	dctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	if err := o.st.Nodes().Deregister(dctx, o.node); err != nil && !errors.Is(err, store.ErrClosed) {
		o.log.Warn("tockd: deregistering this node failed; it leaves the partition map when its lease ends", "err", err)
	}
}

// register keeps this node registered until ctx ends: again after each session it
// stood on is lost, and after a pause while registering fails.
func (o *ownership) register(ctx context.Context, advertise string) {
	self := store.Node{Name: o.node, Addr: advertise, Started: o.started}
	pause := ownerRetryMin
	for {
		rctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
		lost, err := o.st.Nodes().Register(rctx, self)
		cancel()
		switch {
		case ctx.Err() != nil || errors.Is(err, store.ErrClosed):
			return
		case errors.Is(err, store.ErrNodeTaken):
			// A predecessor's lease (a restart within its TTL) frees itself; a second live
			// node of this name never does.
			o.log.Warn("tockd: this node's name is registered by another process (this node's previous run, until its lease expires, or another node of the same name: give each node its own -node-name); not in the partition map meanwhile; retrying",
				"node", o.node, "err", err, "pause", pause)
		case err != nil:
			o.log.Warn("tockd: registering this node failed; retrying", "err", err, "pause", pause)
		}
		if err != nil {
			if !sleepCtx(ctx, pause) {
				return
			}
			pause = min(2*pause, ownerRetryMax)
			continue
		}
		pause = ownerRetryMin
		select {
		case <-lost:
			o.log.Info("tockd: this node's session ended: registering again")
		case <-ctx.Done():
			return
		}
	}
}

// follow keeps cur computed from the live nodes until ctx ends, watching again (from a
// fresh read) after a watch is lost. It closes read once the first set is in.
func (o *ownership) follow(ctx context.Context, read chan<- struct{}) {
	pause := ownerRetryMin
	var once sync.Once
	for {
		err := o.st.Nodes().Watch(ctx, func(s store.NodeSet) {
			pause = ownerRetryMin
			o.set(computeMap(o.count, s))
			once.Do(func() { close(read) })
		})
		if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
			return
		}
		o.log.Warn("tockd: the watch on the live nodes ended; watching again", "err", err, "pause", pause)
		if !sleepCtx(ctx, pause) {
			return
		}
		pause = min(2*pause, ownerRetryMax)
	}
}

// set makes m the current map and wakes those waiting for a change.
func (o *ownership) set(m PartitionMap) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur.Rev > 0 && m.Rev <= o.cur.Rev {
		return // a re-read after a lost watch, of a set already seen
	}
	o.cur = m
	close(o.changed)
	o.changed = make(chan struct{})
	o.log.Info("tockd: partition map", "rev", m.Rev, "nodes", len(m.Nodes), "owned_here", m.ownedBy(o.node))
}

// current returns the map now and a channel closed when it is replaced. Without a
// Store it is this node alone, owning every partition, at revision 0.
func (o *ownership) current() (PartitionMap, <-chan struct{}) {
	if o.st == nil {
		m := PartitionMap{Count: o.count, Owners: make([]int, o.count)}
		addr := ""
		if a := o.addr.Load(); a != nil {
			addr = *a
		}
		m.Nodes = []PartitionNode{{Name: o.node, Addr: addr, Owned: o.count}}
		return m, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cur, o.changed
}

// sleepCtx pauses for d, or until ctx ends (then false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// partitionMapReply is m as PARTITIONS' answer. With more live nodes than a
// PARTITION_MAP may list (partition.MaxCount), it lists only the owners.
func partitionMapReply(id uint64, m PartitionMap) *protocol.PartitionMap {
	r := &protocol.PartitionMap{ID: id, Count: uint64(m.Count), Rev: uint64(max(m.Rev, 0))}
	listed := make([]int, len(m.Nodes)) // m's node index -> index in r.Nodes, or -1
	for i, n := range m.Nodes {
		listed[i] = -1
		if len(m.Nodes) <= partition.MaxCount || n.Owned > 0 {
			listed[i] = len(r.Nodes)
			r.Nodes = append(r.Nodes, protocol.PartitionNode{Name: n.Name, Addr: n.Addr})
		}
	}
	if len(m.Owners) > 0 {
		r.Owners = make([]uint64, len(m.Owners))
		for p, i := range m.Owners {
			r.Owners[p] = uint64(listed[i])
		}
	}
	return r
}
