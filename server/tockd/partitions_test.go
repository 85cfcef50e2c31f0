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

// threeNodes starts nodes a, b and c on one embedded etcd and waits until each has
// computed a map of all three.
func threeNodes(t *testing.T) (stores []*store.Store, nodes []*testServer) {
	t.Helper()
	st1 := openStore(t, t.TempDir())
	stores = []*store.Store{st1, openPeerStore(t, st1, "n2"), openPeerStore(t, st1, "n3")}
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		nodes = append(nodes, startNamedNode(t, stores[i], name))
	}
	for _, n := range nodes {
		waitMap(t, n.srv, n.srv.opts.NodeName+" sees three nodes", func(m PartitionMap) bool { return len(m.Nodes) == 3 })
	}
	return stores, nodes
}

// TestPartitionMapAgreedByThreeNodes: every node computes the same map, at the same
// revision, from the same live set: partition.Assign over the three names, each node
// with 4..6 of the 16 partitions and its own client address.
func TestPartitionMapAgreedByThreeNodes(t *testing.T) {
	_, nodes := threeNodes(t)
	want, err := partition.Assign(partition.DefaultCount, []partition.NodeID{"node-a", "node-b", "node-c"})
	if err != nil {
		t.Fatal(err)
	}
	first := nodes[0].srv.Partitions()
	for i, n := range nodes {
		m := waitMap(t, n.srv, "the same revision on every node", func(m PartitionMap) bool { return m.Rev == first.Rev })
		if m.Count != partition.DefaultCount || !slices.Equal(ownerNames(m), want) {
			t.Fatalf("%s: count %d, owners %v; want %d partitions owned as Assign gives: %v", n.srv.opts.NodeName, m.Count, ownerNames(m), partition.DefaultCount, want)
		}
		if m.Nodes[i].Name != n.srv.opts.NodeName || m.Nodes[i].Addr != nodes[i].addr {
			t.Fatalf("%s: node %d is %+v, want itself at %s", n.srv.opts.NodeName, i, m.Nodes[i], nodes[i].addr)
		}
		for _, nd := range m.Nodes {
			if nd.Owned < 4 || nd.Owned > 6 {
				t.Fatalf("%s: %s owns %d of 16 partitions, want 4..6", n.srv.opts.NodeName, nd.Name, nd.Owned)
			}
		}
	}
	t.Logf("rev %d: owned %v, owners %v", first.Rev, []int{first.Nodes[0].Owned, first.Nodes[1].Owned, first.Nodes[2].Owned}, want)
}

// TestPartitionMapRecomputedWhenANodeLeaves: a node whose session ends (its store
// closed: the lease revoked, as a crash's lease expires, only sooner) leaves every
// survivor's map at one revision; the survivors then hold Assign over the two of them,
// every one of the leaver's partitions among them. A node shutting down gracefully
// leaves at once too: the last node owns all 16.
func TestPartitionMapRecomputedWhenANodeLeaves(t *testing.T) {
	stores, nodes := threeNodes(t)
	before := nodes[0].srv.Partitions()
	if err := stores[2].Close(); err != nil {
		t.Fatal(err)
	}
	want, _ := partition.Assign(partition.DefaultCount, []partition.NodeID{"node-a", "node-b"})
	var after []PartitionMap
	for _, n := range nodes[:2] {
		after = append(after, waitMap(t, n.srv, n.srv.opts.NodeName+" sees node-c leave",
			func(m PartitionMap) bool { return slices.Equal(nodeNames(m), []string{"node-a", "node-b"}) }))
	}
	if after[0].Rev != after[1].Rev || after[0].Rev <= before.Rev {
		t.Fatalf("survivors' revisions %d and %d, want one revision after %d", after[0].Rev, after[1].Rev, before.Rev)
	}
	moved, others := 0, 0
	for p, o := range ownerNames(after[0]) {
		if o != want[p] || ownerNames(after[1])[p] != o {
			t.Fatalf("partition %d: owners %s and %s, want %s on both survivors", p, o, ownerNames(after[1])[p], want[p])
		}
		switch was := ownerNames(before)[p]; {
		case was == "node-c":
			moved++
		case was != o:
			others++
		}
	}
	t.Logf("node-c's %d partitions moved; %d of the survivors' moved between them (the load bound's price)", moved, others)

	nodes[1].stop(t)
	m := waitMap(t, nodes[0].srv, "node-a alone after node-b shut down", func(m PartitionMap) bool { return len(m.Nodes) == 1 })
	if m.Nodes[0].Owned != partition.DefaultCount {
		t.Fatalf("the last node owns %d partitions, want all %d", m.Nodes[0].Owned, partition.DefaultCount)
	}
}

// TestWelcomeAndPartitionsCarryTheMap: WELCOME states P and the map's revision, and
// PARTITIONS answers the map itself, on a follower as on the leader.
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
			if int(o) != m.Owners[p] {
				t.Fatalf("%s: partition %d owned by node %d on the wire, %d in the map", n.srv.opts.NodeName, p, o, m.Owners[p])
			}
		}
	}
}

// TestPartitionsOfANodeWithoutEtcd: a node without etcd is alone, and owns every
// partition at revision 0.
func TestPartitionsOfANodeWithoutEtcd(t *testing.T) {
	lone := startServer(t, Options{NodeName: "alone", Partitions: 4})
	c := connect(t, lone.addr)
	r, ok := c.call(&protocol.Partitions{ID: 3}).(*protocol.PartitionMap)
	if !ok || r.Count != 4 || r.Rev != 0 || len(r.Nodes) != 1 || r.Nodes[0].Name != "alone" || r.Nodes[0].Addr != lone.addr ||
		!slices.Equal(r.Owners, []uint64{0, 0, 0, 0}) {
		t.Fatalf("a node without etcd answered %+v, want itself owning all 4 partitions at rev 0", r)
	}
}

// TestPartitionMapReplyTrimsNodes: a PARTITION_MAP lists at most partition.MaxCount
// nodes; with more live nodes it lists only the owners, each owner index rewritten to
// point at the same node in the shorter list.
func TestPartitionMapReplyTrimsNodes(t *testing.T) {
	set := store.NodeSet{Rev: 5}
	for i := range partition.MaxCount + 1 {
		set.Nodes = append(set.Nodes, store.Node{Name: fmt.Sprintf("n%05d", i), Addr: fmt.Sprintf("a%d", i)})
	}
	m := computeMap(partition.DefaultCount, set)
	r := partitionMapReply(9, m)
	if r.ID != 9 || r.Count != partition.DefaultCount || r.Rev != 5 || len(r.Nodes) > partition.DefaultCount || len(r.Owners) != partition.DefaultCount {
		t.Fatalf("reply: id %d count %d rev %d, %d nodes, %d owners; want the 16 owners alone", r.ID, r.Count, r.Rev, len(r.Nodes), len(r.Owners))
	}
	for p, o := range r.Owners {
		if want := m.Nodes[m.Owners[p]]; r.Nodes[o].Name != want.Name || r.Nodes[o].Addr != want.Addr {
			t.Fatalf("partition %d: reply names %+v, the map %+v", p, r.Nodes[o], want)
		}
	}
	small := partitionMapReply(1, computeMap(4, store.NodeSet{Rev: 1, Nodes: set.Nodes[:3]}))
	if len(small.Nodes) != 3 {
		t.Fatalf("3 live nodes: the reply lists %d, want all 3 (owners or not)", len(small.Nodes))
	}
}

// TestNodeRegistersAgainAfterItsSessionEnds: a node whose lease etcd revokes (as at an
// expiry after a stall) leaves the map, and comes back under its next session: the map
// holds all three again at a later revision.
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
	gone := waitMap(t, nodes[0].srv, "node-c leaves with its lease", func(m PartitionMap) bool { return len(m.Nodes) == 2 })
	back := waitMap(t, nodes[0].srv, "node-c back under a new session", func(m PartitionMap) bool { return len(m.Nodes) == 3 })
	if back.Rev <= gone.Rev {
		t.Fatalf("revisions: left at %d, back at %d", gone.Rev, back.Rev)
	}
	resp, err = stores[0].Client().Get(ctx, "/tock/nodes/node-c")
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) == lease {
		t.Fatalf("node-c's registration after the revoke: %v, %v; want one under a new lease", resp, err)
	}
}
