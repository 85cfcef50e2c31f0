package client

import (
	"testing"

	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// TestPartitions: Partitions returns the map the node answers PARTITIONS with, and
// Welcome states the count and the map's revision: a node without etcd owns all of its
// partitions at revision 0; a lone node with etcd owns all 16 once it has registered.
func TestPartitions(t *testing.T) {
	s := tockdtest.Start(t, tockdtest.Options(tockd.Options{NodeName: "solo", Partitions: 4}))
	c := dialT(t, s.Addr)
	m, err := c.Partitions(bounded(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.Count != 4 || m.Rev != 0 || len(m.Nodes) != 1 || m.Nodes[0] != (PartitionNode{Name: "solo", Addr: s.Addr}) ||
		len(m.Owners) != 4 || m.Owners[3] != 0 {
		t.Fatalf("Partitions: %+v, want solo at %s owning all 4 at revision 0", m, s.Addr)
	}
	if w := c.Welcome(); w.Partitions != 4 || w.PartitionRev != 0 {
		t.Fatalf("Welcome: partitions %d rev %d, want 4 at 0", w.Partitions, w.PartitionRev)
	}

	d := tockdtest.Start(t, tockdtest.Etcd(), tockdtest.Options(tockd.Options{NodeName: "durable"}))
	dc := dialT(t, d.Addr)
	tockdtest.Eventually(t, "the node with etcd sees itself registered", func() bool {
		m, err = dc.Partitions(bounded(t))
		return err == nil && len(m.Nodes) == 1
	})
	if m.Count != 16 || m.Rev <= 0 || m.Nodes[0].Name != "durable" || m.Nodes[0].Addr != d.Addr || m.Owner(15) != m.Nodes[0] {
		t.Fatalf("Partitions with etcd: %+v, want durable owning all 16 at a revision > 0", m)
	}
}
