package tockd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tock-sched/tock/server/partition"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// waitMap waits until srv's partition map satisfies ok, woken by each new map (no
// polling); why says what failed. It returns the map that satisfied ok.
func waitMap(t *testing.T, srv *Server, why string, ok func(PartitionMap) bool) PartitionMap {
	t.Helper()
	deadline := time.After(waitBound)
	for {
		m, changed := srv.partitionsChanged()
		if ok(m) {
			return m
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%s within %v; the map is %+v", why, waitBound, m)
		}
	}
}

// nodeNames are the names of m's nodes, in its order.
func nodeNames(m PartitionMap) []string {
	var out []string
	for _, n := range m.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// ownerNames are the owners' names, by partition.
func ownerNames(m PartitionMap) []partition.NodeID {
	out := make([]partition.NodeID, len(m.Owners))
	for p, i := range m.Owners {
		out[p] = partition.NodeID(m.Nodes[i].Name)
	}
	return out
}

// startNamedNode serves a node called name over st with the default partition count.
func startNamedNode(t *testing.T, st *store.Store, name string) *testServer {
	t.Helper()
	return serve(t, newServer(t, Options{Store: st, NodeName: name}))
}

// TestPartitionCountFixedByTheCluster: the first node stores P; a node started on the
// same etcd with another -partitions refuses to start, and its error names both counts.
func TestPartitionCountFixedByTheCluster(t *testing.T) {
	st1 := openStore(t, t.TempDir())
	st2 := openPeerStore(t, st1, "n2")
	first := newServer(t, Options{Store: st1, NodeName: "a", Partitions: 16})
	serve(t, first)
	_, err := New(WithOptions(Options{Store: st2, NodeName: "b", Partitions: 8}))
	if !errors.Is(err, ErrPartitionCount) {
		t.Fatalf("a node with 8 partitions on a cluster of 16: New returned %v, want ErrPartitionCount", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "partitions=8") || !strings.Contains(msg, "partitions=16") {
		t.Fatalf("the refusal %q does not name both counts (this node's 8, the cluster's 16)", msg)
	}
	if _, err := New(WithOptions(Options{Partitions: partition.MaxCount + 1})); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "Partitions") {
		t.Fatalf("Partitions above the maximum: %v, want ErrInvalidOption naming Partitions", err)
	}
}

// liveNames are the names of m's live nodes, in its order.
func liveNames(m PartitionMap) []string {
	var out []string
	for _, n := range m.Nodes {
		if n.Live {
			out = append(out, n.Name)
		}
	}
	return out
}

// settled reports whether m is a stored map over exactly the live nodes names, each
// owning ⌊P/n⌋..⌈P/n⌉ partitions (Rebalance's band).
func settled(m PartitionMap, names ...string) bool {
	if len(m.Owners) != m.Count || !slices.Equal(nodeNames(m), names) || !slices.Equal(liveNames(m), names) {
		return false
	}
	lo, hi := m.Count/len(names), (m.Count+len(names)-1)/len(names)
	for _, n := range m.Nodes {
		if n.Owned < lo || n.Owned > hi {
			return false
		}
	}
	return true
}

// allHeld reports whether every partition of m is held by its owner, at an epoch.
func allHeld(m PartitionMap) bool {
	if len(m.Held) != m.Count || len(m.Epochs) != m.Count {
		return false
	}
	for p, held := range m.Held {
		if !held || m.Epochs[p] <= 0 {
			return false
		}
	}
	return true
}

// waitHeld waits until every node of nodes follows a map settled over names in which
// every partition is held.
func waitHeld(t *testing.T, nodes []*testServer, names ...string) []PartitionMap {
	t.Helper()
	var out []PartitionMap
	for _, n := range nodes {
		out = append(out, waitMap(t, n.srv, fmt.Sprintf("%s follows a map settled and held over %v", n.srv.opts.NodeName, names),
			func(m PartitionMap) bool { return settled(m, names...) && allHeld(m) }))
	}
	return out
}

// threeNodes starts nodes a, b and c on one embedded etcd and waits until each follows
// a stored map settled over all three, every partition held.
func threeNodes(t *testing.T) (stores []*store.Store, nodes []*testServer) {
	t.Helper()
	st1 := openStore(t, t.TempDir())
	stores = []*store.Store{st1, openPeerStore(t, st1, "n2"), openPeerStore(t, st1, "n3")}
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		nodes = append(nodes, startNamedNode(t, stores[i], name))
	}
	waitHeld(t, nodes, "node-a", "node-b", "node-c")
	return stores, nodes
}

// storedMap is the partition map in st's etcd.
func storedMap(t *testing.T, st *store.Store) store.PartitionMap {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	m, err := st.Partitions().ReadMap(ctx)
	if err != nil {
		t.Fatalf("read the stored map: %v", err)
	}
	return m
}

// TestPartitionMapAgreedByThreeNodes: every node follows the map stored in etcd, at the
// same revision: each of the three with 5..6 of the 16 partitions (Rebalance's band),
// and its own client address.
func TestPartitionMapAgreedByThreeNodes(t *testing.T) {
	stores, nodes := threeNodes(t)
	first := nodes[0].srv.Partitions()
	stored := storedMap(t, stores[1])
	if stored.Rev != first.Rev {
		t.Fatalf("node-a follows the map at %d, etcd holds it at %d", first.Rev, stored.Rev)
	}
	for i, n := range nodes {
		m := waitMap(t, n.srv, "the same revision on every node", func(m PartitionMap) bool { return m.Rev == first.Rev })
		if got := ownerNames(m); m.Count != partition.DefaultCount || !slices.Equal(asNames(got), stored.Owners) {
			t.Fatalf("%s: count %d, owners %v; want the %d stored: %v", n.srv.opts.NodeName, m.Count, got, partition.DefaultCount, stored.Owners)
		}
		if m.Nodes[i].Name != n.srv.opts.NodeName || m.Nodes[i].Addr != nodes[i].addr {
			t.Fatalf("%s: node %d is %+v, want itself at %s", n.srv.opts.NodeName, i, m.Nodes[i], nodes[i].addr)
		}
	}
	t.Logf("rev %d: owned %v, owners %v", first.Rev, []int{first.Nodes[0].Owned, first.Nodes[1].Owned, first.Nodes[2].Owned}, stored.Owners)
}

// asNames are ids as strings.
func asNames(ids []partition.NodeID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}

// TestALeaveMovesOnlyTheLeaversPartitions: a node whose session ends (its store closed:
// the lease revoked, as a crash's lease expires, only sooner) leaves the live set; the
// survivors rewrite the stored map, once, and it moves only the leaver's partitions:
// every partition of a survivor keeps its owner, and the two end with 8 each, holding
// all 16. A node
// shutting down gracefully leaves at once too: the last node owns all 16.
func TestALeaveMovesOnlyTheLeaversPartitions(t *testing.T) {
	stores, nodes := threeNodes(t)
	before := nodes[0].srv.Partitions()
	if err := stores[2].Close(); err != nil {
		t.Fatal(err)
	}
	after := waitHeld(t, nodes[:2], "node-a", "node-b") // node-c's keys went with its lease
	if after[0].Rev != after[1].Rev || after[0].Rev <= before.Rev {
		t.Fatalf("survivors' revisions %d and %d, want one revision after %d", after[0].Rev, after[1].Rev, before.Rev)
	}
	moved := 0
	was, now := ownerNames(before), ownerNames(after[0])
	for p := range now {
		switch {
		case was[p] == "node-c":
			moved++
		case was[p] != now[p]:
			t.Fatalf("partition %d moved from %s to %s, though only node-c left", p, was[p], now[p])
		}
		if ownerNames(after[1])[p] != now[p] {
			t.Fatalf("partition %d: owners %s and %s on the two survivors", p, now[p], ownerNames(after[1])[p])
		}
	}
	if stored := storedMap(t, stores[0]); stored.Rev != after[0].Rev {
		t.Fatalf("etcd holds the map at %d, the survivors follow %d", stored.Rev, after[0].Rev)
	}
	t.Logf("rev %d -> %d: node-c's %d partitions moved, no other", before.Rev, after[0].Rev, moved)

	nodes[1].stop(t)
	m := waitMap(t, nodes[0].srv, "node-a alone after node-b shut down", func(m PartitionMap) bool { return settled(m, "node-a") })
	if m.Nodes[0].Owned != partition.DefaultCount {
		t.Fatalf("the last node owns %d partitions, want all %d", m.Nodes[0].Owned, partition.DefaultCount)
	}
}

// TestWelcomeAndPartitionsCarryTheMap: WELCOME states P and the map's revision, and
// PARTITIONS answers the map itself, with every partition's epoch, and STATS counts the
// partitions each node owns and holds, on a follower as on the leader.
func TestWelcomeAndPartitionsCarryTheMap(t *testing.T) {
	_, nodes := threeNodes(t)
	for _, n := range nodes {
		m := n.srv.Partitions()
		c := dial(t, n.addr)
		w := c.hello(helloAs(protocol.RoleClient, "test"))
		if w.Partitions != partition.DefaultCount || w.PartitionRev != uint64(m.Rev) {
			t.Fatalf("%s: WELCOME partitions %d rev %d, want %d at %d", n.srv.opts.NodeName, w.Partitions, w.PartitionRev, partition.DefaultCount, m.Rev)
		}
		r, ok := c.call(&protocol.Partitions{ID: 2}).(*protocol.PartitionMap)
		if !ok || r.ID != 2 || r.Count != partition.DefaultCount || r.Rev != uint64(m.Rev) || len(r.Nodes) != 3 {
			t.Fatalf("%s: PARTITIONS answered %+v, want the map at %d", n.srv.opts.NodeName, r, m.Rev)
		}
		for i, nd := range r.Nodes {
			if nd.Name != m.Nodes[i].Name || nd.Addr != nodes[i].addr {
				t.Fatalf("%s: node %d is %+v, want %s at %s", n.srv.opts.NodeName, i, nd, m.Nodes[i].Name, nodes[i].addr)
			}
		}
		for p, o := range r.Owners {
			if int(o) != m.Owners[p] || len(r.Epochs) != len(r.Owners) || r.Epochs[p] != uint64(m.Epochs[p]) || r.Epochs[p] == 0 {
				t.Fatalf("%s: partition %d owned by node %d at epoch %v on the wire, %d at %d in the map", n.srv.opts.NodeName, p, o, r.Epochs, m.Owners[p], m.Epochs[p])
			}
		}
		s, ok := c.call(&protocol.Stats{ID: 3}).(*protocol.StatsReply)
		owned := int64(m.ownedBy(n.srv.opts.NodeName))
		if !ok || s.Gauges["partitions_owned"] != owned || s.Gauges["partitions_held"] != owned || s.Gauges["partitions_unheld"] != 0 ||
			s.Gauges["partition_map_rev"] != m.Rev {
			t.Fatalf("%s: STATS gauges %v, want partitions_owned = partitions_held = %d, none unheld, at rev %d", n.srv.opts.NodeName, s, owned, m.Rev)
		}
	}
}

// TestPartitionsOfANodeWithoutEtcd: a node without etcd is alone, and owns every
// partition at revision 0, with no partition leases (no epochs).
func TestPartitionsOfANodeWithoutEtcd(t *testing.T) {
	lone := startServer(t, Options{NodeName: "alone", Partitions: 4})
	c := connect(t, lone.addr)
	r, ok := c.call(&protocol.Partitions{ID: 3}).(*protocol.PartitionMap)
	if !ok || r.Count != 4 || r.Rev != 0 || len(r.Nodes) != 1 || r.Nodes[0].Name != "alone" || r.Nodes[0].Addr != lone.addr ||
		!slices.Equal(r.Owners, []uint64{0, 0, 0, 0}) || r.Epochs != nil {
		t.Fatalf("a node without etcd answered %+v, want itself owning all 4 partitions at rev 0", r)
	}
}

// stored is the first map a node stores over set: Rebalance from none.
func stored(count int, set store.NodeSet) store.PartitionMap {
	return store.PartitionMap{Rev: set.Rev + 1, Basis: set.Rev, Owners: nextMap(count, set, store.PartitionMap{})}
}

// TestPartitionMapReplyTrimsNodes: a PARTITION_MAP lists at most partition.MaxCount
// nodes; with more live nodes it lists only the owners, each owner index rewritten to
// point at the same node in the shorter list.
func TestPartitionMapReplyTrimsNodes(t *testing.T) {
	set := store.NodeSet{Rev: 5}
	for i := range partition.MaxCount + 1 {
		set.Nodes = append(set.Nodes, store.Node{Name: fmt.Sprintf("n%05d", i), Addr: fmt.Sprintf("a%d", i)})
	}
	m := viewMap(partition.DefaultCount, set, stored(partition.DefaultCount, set), store.Holders{}, "", nil)
	r := partitionMapReply(9, m)
	if r.ID != 9 || r.Count != partition.DefaultCount || r.Rev != 6 || len(r.Nodes) > partition.DefaultCount || len(r.Owners) != partition.DefaultCount {
		t.Fatalf("reply: id %d count %d rev %d, %d nodes, %d owners; want the 16 owners alone", r.ID, r.Count, r.Rev, len(r.Nodes), len(r.Owners))
	}
	for p, o := range r.Owners {
		if want := m.Nodes[m.Owners[p]]; r.Nodes[o].Name != want.Name || r.Nodes[o].Addr != want.Addr {
			t.Fatalf("partition %d: reply names %+v, the map %+v", p, r.Nodes[o], want)
		}
	}
	three := store.NodeSet{Rev: 1, Nodes: set.Nodes[:3]}
	small := partitionMapReply(1, viewMap(4, three, stored(4, three), store.Holders{}, "", nil))
	if len(small.Nodes) != 3 {
		t.Fatalf("3 live nodes: the reply lists %d, want all 3 (owners or not)", len(small.Nodes))
	}
}

// TestNodeRegistersAgainAfterItsSessionEnds: a node whose lease etcd revokes (as at an
// expiry after a stall) leaves the live set, and comes back under its next session: the
// map is settled over all three again, node-c holding its partitions under new keys.
func TestNodeRegistersAgainAfterItsSessionEnds(t *testing.T) {
	stores, nodes := threeNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	resp, err := stores[0].Client().Get(ctx, "/tock/nodes/node-c")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("node-c's registration: %v, %v", resp, err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if _, err := stores[0].Client().Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitMap(t, nodes[0].srv, "node-c leaves with its lease", func(m PartitionMap) bool { return len(liveNames(m)) == 2 })
	waitHeld(t, nodes, "node-a", "node-b", "node-c") // node-c's keys went with its lease
	resp, err = stores[0].Client().Get(ctx, "/tock/nodes/node-c")
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) == lease {
		t.Fatalf("node-c's registration after the revoke: %v, %v; want one under a new lease", resp, err)
	}
}

// ownerEvent is one change of an owner key, from a raw etcd watch.
type ownerEvent struct {
	p       int
	put     bool
	node    string
	version int64
	create  int64
}

// watchOwners records every change of the owner keys from revision from on, until a
// put of the key mark under them, which it returns with everything before it.
func watchOwners(t *testing.T, st *store.Store, from int64) (until func(mark string) []ownerEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	t.Cleanup(cancel)
	const under = "/tock/partitions/owner/"
	w := st.Client().Watch(ctx, under, clientv3.WithPrefix(), clientv3.WithRev(from))
	return func(mark string) []ownerEvent {
		t.Helper()
		if _, err := st.Client().Put(ctx, under+mark, ""); err != nil {
			t.Fatal(err)
		}
		var out []ownerEvent
		for wr := range w {
			for _, ev := range wr.Events {
				key := strings.TrimPrefix(string(ev.Kv.Key), under)
				if key == mark {
					return out
				}
				var p int
				if _, err := fmt.Sscanf(key, "%d", &p); err != nil {
					continue // an earlier mark
				}
				out = append(out, ownerEvent{p: p, put: ev.Type == clientv3.EventTypePut, node: string(ev.Kv.Value),
					version: ev.Kv.Version, create: ev.Kv.CreateRevision})
			}
		}
		t.Fatalf("the owner keys' watch ended before %s: %v", mark, ctx.Err())
		return nil
	}
}

// checkHandoff checks the owner keys' history evs over a change of the map from
// before to after: a partition that kept its owner saw no event; one that moved saw its
// old owner's key deleted, then its new owner's created (version 1: never written over
// a holder's), at the epoch after shows; never a put while the key was there.
func checkHandoff(t *testing.T, evs []ownerEvent, before, after PartitionMap) (moved int) {
	t.Helper()
	was, now := ownerNames(before), ownerNames(after)
	byP := map[int][]ownerEvent{}
	for _, ev := range evs {
		byP[ev.p] = append(byP[ev.p], ev)
	}
	for p := range now {
		evs := byP[p]
		if was[p] == now[p] {
			if len(evs) != 0 {
				t.Fatalf("partition %d kept its owner %s, but its key changed: %+v", p, now[p], evs)
			}
			continue
		}
		moved++
		present := true // the old owner's key, held before
		for _, ev := range evs {
			switch {
			case !ev.put && present:
				present = false
			case ev.put && !present && ev.version == 1 && ev.node == string(now[p]):
				present = true
			default:
				t.Fatalf("partition %d, %s to %s: event %+v with the key present %v; history %+v", p, was[p], now[p], ev, present, evs)
			}
		}
		if last := evs[len(evs)-1]; len(evs) != 2 || !last.put || last.create != after.Epochs[p] || last.create <= before.Epochs[p] {
			t.Fatalf("partition %d, %s to %s: history %+v, want one delete then one create at the epoch the map shows (%d, after %d)",
				p, was[p], now[p], evs, after.Epochs[p], before.Epochs[p])
		}
	}
	return moved
}

// TestPartitionHandoffNeverTwoHolders: a node joining three takes its share of the
// partitions, and a node leaving gracefully hands its partitions on; in etcd's history of
// the owner keys, each moved partition's old owner's key goes before the new owner's is
// created (never a key written over another's, so never two holders at once), a
// partition that stays put is not touched, and the epochs the nodes report are the
// new keys' create revisions, above the old ones.
func TestPartitionHandoffNeverTwoHolders(t *testing.T) {
	stores, nodes := threeNodes(t)
	before := nodes[0].srv.Partitions()
	from, err := stores[0].Revision(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	until := watchOwners(t, stores[0], from+1)
	d := startNamedNode(t, openPeerStore(t, stores[0], "n4"), "node-d")
	nodes = append(nodes, d)
	joined := waitHeld(t, nodes, "node-a", "node-b", "node-c", "node-d")
	moved := checkHandoff(t, until("join"), before, joined[0])
	if got := joined[0].ownedBy("node-d"); moved != got || got != 4 {
		t.Fatalf("the join moved %d partitions, node-d owns %d; want 4 (16 over 4), all to node-d", moved, got)
	}
	t.Logf("join: %d partitions to node-d, each released, then created at a higher epoch", moved)

	nodes[1].stop(t) // node-b, gracefully: it releases its keys, then deregisters
	left := waitHeld(t, []*testServer{nodes[0], nodes[2], nodes[3]}, "node-a", "node-c", "node-d")
	moved = checkHandoff(t, until("leave"), joined[0], left[0])
	if want := joined[0].ownedBy("node-b"); moved != want {
		t.Fatalf("node-b's leave moved %d partitions, it owned %d", moved, want)
	}
	t.Logf("leave: node-b's %d partitions handed on, no other touched", moved)
}

// TestPartitionsMoveWhenANodeIsCutOff: a node cut off from etcd (its connections reset,
// as a crashed node's would be) keeps its registration and owner keys until its lease
// expires; then the survivors rewrite the map, moving only its partitions, and hold
// them under keys of their own, within the session TTL and a second (the bound)
// and 2 s of slack for a loaded machine; by then node-c's own map no longer shows it
// holding any (never two holders, in any node's view). Once etcd is back it joins again.
func TestPartitionsMoveWhenANodeIsCutOff(t *testing.T) {
	st1 := openStore(t, t.TempDir())
	cutSt, p := openCutStore(t, st1, "n3")
	nodes := []*testServer{startNamedNode(t, st1, "node-a"), startNamedNode(t, openPeerStore(t, st1, "n2"), "node-b"),
		startNamedNode(t, cutSt, "node-c")}
	before := waitHeld(t, nodes, "node-a", "node-b", "node-c")[0]
	cutAt := time.Now()
	p.cutAll()
	t.Cleanup(p.heal) // before the nodes stop, should the test fail while cut off
	after := waitHeld(t, nodes[:2], "node-a", "node-b")[0]
	took := time.Since(cutAt)
	// node-c's own view stopped holding at its session's valid-until, before etcd could
	// expire its lease, so before the survivors could hold any of its partitions.
	if c := nodes[2].srv.Partitions(); c.HeldBy("node-c") != 0 {
		t.Fatalf("node-c, cut off, still shows itself holding %d partitions after the survivors took them: %+v", c.HeldBy("node-c"), c)
	}
	was, now := ownerNames(before), ownerNames(after)
	for q := range now {
		if was[q] != "node-c" && was[q] != now[q] {
			t.Fatalf("partition %d moved from %s to %s, though only node-c was cut off", q, was[q], now[q])
		}
		if was[q] == "node-c" && after.Epochs[q] <= before.Epochs[q] {
			t.Fatalf("partition %d: epoch %d after node-c's, %d; want a higher one", q, after.Epochs[q], before.Epochs[q])
		}
	}
	if bound := cutSt.SessionTTL() + 3*time.Second; took > bound {
		t.Fatalf("node-c's %d partitions held again %v after the cut, want within %v (TTL + 1 s + 2 s of slack)", before.ownedBy("node-c"), took, bound)
	}
	t.Logf("node-c's %d partitions held by the survivors %v after the cut (session TTL %v)", before.ownedBy("node-c"), took, cutSt.SessionTTL())
	p.heal() // node-c comes back, and its Shutdown at Cleanup reaches etcd
	waitHeld(t, nodes, "node-a", "node-b", "node-c")
}

// TestShutdownWhileCutOffFromEtcd: a node whose session ended while it is cut off from
// etcd (its registration and owner keys gone with the lease, a new session not to be
// had) still shuts down within its Shutdown context, and a second of slack.
func TestShutdownWhileCutOffFromEtcd(t *testing.T) {
	st, p := openCutStore(t, openStore(t, t.TempDir()), "n2")
	n := startNamedNode(t, st, "node-b")
	waitHeld(t, []*testServer{n}, "node-b")
	p.cutAll()
	t.Cleanup(p.heal) // lets what is left reach etcd, before the stores close
	waitMap(t, n.srv, "node-b no longer holding, its session over", func(m PartitionMap) bool { return m.HeldBy("node-b") == 0 })
	const limit = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- n.srv.Shutdown(ctx) }()
	select {
	case err := <-done:
		t.Logf("Shutdown returned %v after %v", err, time.Since(start))
	case <-time.After(limit + time.Second):
		t.Fatalf("Shutdown with a %v context has not returned after %v", limit, time.Since(start))
	}
}
