package tockd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/server/partition"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// PartitionMap is which node owns each of the cluster's partitions: the map stored in
// etcd (store.PartitionMap), as this node last read it, with the live nodes' addresses.
// It is not yet routed by: one leader still dispatches every task.
type PartitionMap struct {
	Count int   // P, the cluster's partition count
	Rev   int64 // the stored map's etcd revision; 0 without a Store or before one is stored
	// Nodes are the live nodes by name, and any owner the stored map names that is
	// not live (no Addr, Live false: gone, and not yet replaced by a new map). Empty,
	// and Owners too, while this node knows of no live node and no map.
	Nodes []PartitionNode
	// Owners[p] is the index in Nodes of partition p's owner; Count entries, or none
	// while no map is stored (or this node has not read it yet).
	Owners []int
	// Held[p] says the owner holds partition p: its owner key (<prefix>partitions/
	// owner/<p>) is there, naming the owner. Epochs[p] is then that key's create
	// revision, the partition's epoch; 0 while not held. As many entries as Owners,
	// or none without a Store: a lone node holds every partition without a key.
	Held   []bool
	Epochs []int64
}

// PartitionNode is one node of a PartitionMap.
type PartitionNode struct {
	Name  string // its NodeName
	Addr  string // its client address (AdvertiseAddr, or its first listener's)
	Owned int    // how many partitions it owns
	Live  bool   // registered now (in the node set); false for a map's owner gone since
}

// Unheld is how many partitions have no holder: every one while m has no owners (no
// map read yet), else those whose owner does not hold them (Held); 0 without
// partition leases (Held nil: a lone node without etcd holds them all).
func (m PartitionMap) Unheld() int {
	if len(m.Owners) == 0 {
		return m.Count
	}
	n := 0
	for _, held := range m.Held {
		if !held {
			n++
		}
	}
	return n
}

// HeldBy is how many partitions node holds in m (owns, without partition leases).
func (m PartitionMap) HeldBy(node string) int {
	n := 0
	for p, i := range m.Owners {
		if m.Nodes[i].Name == node && (m.Held == nil || m.Held[p]) {
			n++
		}
	}
	return n
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

// viewMap is the PartitionMap of count partitions from the node set set, the stored
// map stored and the owner keys holders, as node self sees it holding mine (partition
// -> epoch): stored's owners (none if it has not count of them), over set's nodes and
// any owner not among them, by name, each partition held where its owner key names its
// owner, and, for self's own, where self holds it at that key's epoch.
func viewMap(count int, set store.NodeSet, stored store.PartitionMap, holders store.Holders, self string, mine map[int]int64) PartitionMap {
	m := PartitionMap{Count: count, Rev: stored.Rev}
	index := make(map[string]int, len(set.Nodes))
	for _, n := range set.Nodes {
		index[n.Name] = len(m.Nodes)
		m.Nodes = append(m.Nodes, PartitionNode{Name: n.Name, Addr: n.Addr, Live: true})
	}
	if len(stored.Owners) != count {
		return m
	}
	for _, o := range stored.Owners {
		if _, ok := index[o]; !ok {
			index[o] = len(m.Nodes)
			m.Nodes = append(m.Nodes, PartitionNode{Name: o})
		}
	}
	if len(m.Nodes) > len(set.Nodes) { // owners gone: put them in name order too
		slices.SortFunc(m.Nodes, func(a, b PartitionNode) int { return strings.Compare(a.Name, b.Name) })
		for i, n := range m.Nodes {
			index[n.Name] = i
		}
	}
	m.Owners, m.Held, m.Epochs = make([]int, count), make([]bool, count), make([]int64, count)
	for p, o := range stored.Owners {
		m.Owners[p] = index[o]
		m.Nodes[index[o]].Owned++
		if h, ok := holders.By[p]; ok && h.Node == o && (o != self || mine[p] == h.Epoch) {
			m.Held[p], m.Epochs[p] = true, h.Epoch
		}
	}
	return m
}

// nextMap is the map that should replace stored over the live set set: partition.
// Rebalance(stored, count, set's names), or nil when there is nothing to write (no live
// node, or stored is that map already). Rebalance moves only what a balanced map must:
// at a leave only the leaver's partitions, at a join only the joiner's share.
func nextMap(count int, set store.NodeSet, stored store.PartitionMap) []string {
	if len(set.Nodes) == 0 {
		return nil
	}
	ids := make([]partition.NodeID, len(set.Nodes))
	for i, n := range set.Nodes {
		ids[i] = partition.NodeID(n.Name)
	}
	var prev []partition.NodeID
	if len(stored.Owners) == count {
		prev = make([]partition.NodeID, count)
		for p, o := range stored.Owners {
			prev[p] = partition.NodeID(o)
		}
	}
	owners, err := partition.Rebalance(prev, count, ids)
	if err != nil { // count passed CheckCount in validate, and there are nodes
		panic(fmt.Sprintf("tockd: partition.Rebalance(%d, %d nodes): %v", count, len(ids), err))
	}
	if slices.Equal(owners, prev) {
		return nil
	}
	out := make([]string, count)
	for p, o := range owners {
		out[p] = string(o)
	}
	return out
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
// live nodes, the stored map and the partitions' owner keys, rewrites the stored map
// when the live set changes, and holds the partitions the map gives it (holdings.go).
// Without a Store the node is alone and owns every partition (static).
//
// Who rewrites the map: any node, by compare-and-swap (store.Partitions.WriteMap over
// the map's revision and the node set it read). Every node that sees a change of the
// live set computes the same Rebalance(stored, P, live) from the same inputs; one wins,
// the others lose with ErrConflict, read the new map (their watch delivers it), find it
// a fixed point of Rebalance and write nothing. A node whose view is stale loses too,
// since the CAS checks the node set it computed from. Not the elected leader alone: the
// map would then wait for a new leader (a session TTL and more) after the leader's own
// death, which is when it must change; any survivor rewrites it at once instead, for
// the price of up to n-1 lost transactions a change.
//
// Invariants:
//   - cur is viewMap(count, set, stored, holders) of the latest node set, stored map and
//     owner keys the watches delivered, so ∀ nodes a, b: a.cur.Rev = b.cur.Rev ⇒
//     a.cur.Owners and b.cur.Owners name the same owners (the map at one etcd revision
//     is one value);
//   - changed is closed exactly when cur is replaced, and replaced by a fresh channel;
//   - kick holds a token whenever set, stored or holders changed since act last read
//     them.
//
// Locking: mu guards set, stored, holders, mine, term, read, cur and changed (held only
// to read or swap them, across no store call); stop and done are set once by start (under
// connSet.mu, the first Serve) and read by halt after connSet.drain. Its goroutines
// (register, follow, followMap, followHolders, act) run from start to halt.
type ownership struct {
	st      *store.Store // nil without a Store
	count   int          // Options.Partitions
	node    string       // Options.NodeName
	started time.Time    // when New made the server: the registration says so
	log     *slog.Logger

	mu      sync.Mutex
	set     store.NodeSet      // the live nodes, as the watch last delivered them
	stored  store.PartitionMap // the stored map, as its watch last delivered it
	holders store.Holders      // the owner keys, as their watch last delivered them
	mine    map[int]int64      // the partitions act holds, by epoch (holdings.held's copy)
	term    store.Term         // the session mine stands on (holdings.term)
	read    uint8              // which of them have been read: readSet | readMap | readHolders
	cur     PartitionMap
	changed chan struct{}
	kick    chan struct{} // capacity 1: act's wake-up

	addr atomic.Pointer[string] // the advertised client address, once start has it
	stop context.CancelFunc
	done chan struct{}
}

// The bits of ownership.read.
const (
	readSet uint8 = 1 << iota
	readMap
	readHolders
	readAll = readSet | readMap | readHolders
)

func newOwnership(opts *Options) *ownership {
	return &ownership{st: opts.Store, count: opts.Partitions, node: opts.NodeName, started: time.Now().UTC(), log: opts.Logger,
		cur: PartitionMap{Count: opts.Partitions}, changed: make(chan struct{}), kick: make(chan struct{}, 1)}
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

// start registers this node as advertise, follows the live nodes and the stored map and
// rewrites it as they change, until halt. Called once, by the first Serve; without a
// Store it only records advertise.
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
	for _, run := range []func(){
		func() { o.follow(ctx, read) },
		func() { o.followMap(ctx) },
		func() { o.followHolders(ctx) },
		func() { o.act(ctx) },
		func() {
			select {
			case <-read:
				o.register(ctx, advertise)
			case <-ctx.Done():
			}
		},
	} {
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}
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

// follow keeps set current until ctx ends, watching again (from a fresh read) after a
// watch is lost. It closes read once the first set is in.
func (o *ownership) follow(ctx context.Context, read chan<- struct{}) {
	var once sync.Once
	o.watchAgain(ctx, "the live nodes", func(ok func()) error {
		return o.st.Nodes().Watch(ctx, func(s store.NodeSet) {
			ok()
			o.update(func() bool {
				if o.read&readSet != 0 && s.Rev <= o.set.Rev {
					return false // a re-read after a lost watch, of a set already seen
				}
				o.set, o.read = s, o.read|readSet
				return true
			})
			once.Do(func() { close(read) })
		})
	})
}

// followMap keeps stored current until ctx ends, as follow does set.
func (o *ownership) followMap(ctx context.Context) {
	o.watchAgain(ctx, "the partition map", func(ok func()) error {
		return o.st.Partitions().WatchMap(ctx, func(m store.PartitionMap) {
			ok()
			o.update(func() bool {
				if o.read&readMap != 0 && m.Rev == o.stored.Rev {
					return false // a re-read after a lost watch, of the map already seen
				}
				o.stored, o.read = m, o.read|readMap
				return true
			})
		})
	})
}

// followHolders keeps holders current until ctx ends, as follow does set.
func (o *ownership) followHolders(ctx context.Context) {
	o.watchAgain(ctx, "the partition holders", func(ok func()) error {
		return o.st.Partitions().WatchHolders(ctx, func(h store.Holders) {
			ok()
			o.update(func() bool {
				if o.read&readHolders != 0 && h.Rev <= o.holders.Rev {
					return false // a re-read after a lost watch, of keys already seen
				}
				o.holders, o.read = h, o.read|readHolders
				return true
			})
		})
	})
}

// watchAgain runs watch until ctx ends, again after each loss, pausing between failed
// tries from ownerRetryMin, doubling to ownerRetryMax; watch calls ok on each delivery,
// which resets the pause. what names the watch in the log.
func (o *ownership) watchAgain(ctx context.Context, what string, watch func(ok func()) error) {
	pause := ownerRetryMin
	for {
		err := watch(func() { pause = ownerRetryMin })
		if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
			return
		}
		o.log.Warn("tockd: a watch ended; watching again", "watch", what, "err", err, "pause", pause)
		if !sleepCtx(ctx, pause) {
			return
		}
		pause = min(2*pause, ownerRetryMax)
	}
}

// update applies change to set, stored or holders under mu; if it reports a change,
// cur is recomputed, the waiters are woken, and so is act.
func (o *ownership) update(change func() bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !change() {
		return
	}
	prev := o.cur.Rev
	o.cur = viewMap(o.count, o.set, o.stored, o.holders, o.node, o.mine)
	if o.cur.Rev != prev {
		o.log.Info("tockd: partition map", "rev", o.cur.Rev, "nodes_rev", o.set.Rev, "nodes", len(o.set.Nodes), "owned_here", o.cur.ownedBy(o.node))
	}
	close(o.changed)
	o.changed = make(chan struct{})
	o.poke()
}

// poke wakes act, unless a wake-up is pending already.
func (o *ownership) poke() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// current returns the map now and a channel closed when it is replaced. Without a
// Store it is this node alone, owning every partition, at revision 0. This node's own
// partitions are held only while the session they stand on is valid now
// (store.Term.Valid), checked at each call: so the map it returns never shows this
// node holding a partition that another node may hold.
func (o *ownership) current() (PartitionMap, <-chan struct{}) {
	if o.st == nil {
		m := PartitionMap{Count: o.count, Owners: make([]int, o.count)}
		addr := ""
		if a := o.addr.Load(); a != nil {
			addr = *a
		}
		m.Nodes = []PartitionNode{{Name: o.node, Addr: addr, Owned: o.count, Live: true}}
		return m, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.mine) > 0 && !o.term.Valid(time.Now()) {
		// The session this node's holdings stand on may have ended before act has seen
		// it (a stall, or act busy in a store call): they are not shown as held from
		// its valid-until on, which precedes the earliest moment etcd can expire the
		// lease, and so any other node's holding of them.
		return o.cur.without(o.node), o.changed
	}
	return o.cur, o.changed
}

// without is m with node holding none of its partitions (a copy of Held and Epochs).
func (m PartitionMap) without(node string) PartitionMap {
	m.Held, m.Epochs = slices.Clone(m.Held), slices.Clone(m.Epochs)
	for p, i := range m.Owners {
		if m.Nodes[i].Name == node {
			m.Held[p], m.Epochs[p] = false, 0
		}
	}
	return m
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
// PARTITION_MAP may list (partition.MaxCount), it lists only the owners; with no owners
// yet (no map stored, or not read yet), no nodes either, as the protocol has it.
func partitionMapReply(id uint64, m PartitionMap) *protocol.PartitionMap {
	r := &protocol.PartitionMap{ID: id, Count: uint64(m.Count), Rev: uint64(max(m.Rev, 0))}
	if len(m.Owners) == 0 {
		return r
	}
	listed := make([]int, len(m.Nodes)) // m's node index -> index in r.Nodes, or -1
	for i, n := range m.Nodes {
		listed[i] = -1
		if len(m.Nodes) <= partition.MaxCount || n.Owned > 0 {
			listed[i] = len(r.Nodes)
			r.Nodes = append(r.Nodes, protocol.PartitionNode{Name: n.Name, Addr: n.Addr})
		}
	}
	r.Owners = make([]uint64, len(m.Owners))
	for p, i := range m.Owners {
		r.Owners[p] = uint64(listed[i])
	}
	if len(m.Held) == len(m.Owners) { // nil without partition leases (without etcd)
		r.Epochs = make([]uint64, len(m.Owners))
		for p, held := range m.Held {
			if held {
				r.Epochs[p] = uint64(max(m.Epochs[p], 0))
			}
		}
	}
	return r
}
