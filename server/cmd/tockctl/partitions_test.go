package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// partitionsJSON is what tockctl -json partitions prints.
type partitionsJSON struct {
	Count int   `json:"count"`
	Rev   int64 `json:"rev"`
	Nodes []struct {
		Name       string `json:"name"`
		Addr       string `json:"addr"`
		Owned      int    `json:"owned"`
		Partitions []int  `json:"partitions"`
	} `json:"nodes"`
	Owners []string `json:"owners"`
}

// TestPartitions: on a cluster of three nodes, tockctl partitions prints each node with
// its address, how many partitions it owns and which; the JSON form says the same, its
// owners agreeing with each node's list.
func TestPartitions(t *testing.T) {
	a := tockdtest.Start(t, tockdtest.Etcd(), tockdtest.Options(tockd.Options{NodeName: "node-a"}))
	b := tockdtest.Start(t, tockdtest.EtcdOf(a), tockdtest.Options(tockd.Options{NodeName: "node-b"}))
	c := tockdtest.Start(t, tockdtest.EtcdOf(a), tockdtest.Options(tockd.Options{NodeName: "node-c"}))
	var m partitionsJSON
	tockdtest.Eventually(t, "node-b's map settled over three nodes, 5 or 6 partitions each", func() bool {
		m = partitionsJSON{}
		if err := json.Unmarshal([]byte(ok(t, b.Addr, "-json", "partitions")), &m); err != nil {
			t.Fatal(err)
		}
		settled := len(m.Nodes) == 3
		for _, n := range m.Nodes {
			settled = settled && n.Owned >= 5 && n.Owned <= 6
		}
		return settled
	})
	if m.Count != 16 || m.Rev <= 0 || len(m.Owners) != 16 {
		t.Fatalf("-json partitions: %+v, want 16 owners at a revision > 0", m)
	}
	addrs := map[string]string{"node-a": a.Addr, "node-b": b.Addr, "node-c": c.Addr}
	for _, n := range m.Nodes {
		if n.Addr != addrs[n.Name] || n.Owned != len(n.Partitions) {
			t.Fatalf("node %+v: want its address %s and its partitions listed", n, addrs[n.Name])
		}
		for _, p := range n.Partitions {
			if m.Owners[p] != n.Name {
				t.Fatalf("partition %d listed under %s, owned by %s", p, n.Name, m.Owners[p])
			}
		}
	}

	out := ok(t, b.Addr, "partitions")
	if field(t, out, "partitions") != "16" || field(t, out, "rev") != strconv.FormatInt(m.Rev, 10) {
		t.Fatalf("partitions: want 16 partitions at rev %d in\n%s", m.Rev, out)
	}
	contains(t, "partitions", out, "not yet routed")
	for _, n := range m.Nodes {
		var row string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, n.Name+" ") {
				row = line
			}
		}
		f := strings.Fields(row)
		if len(f) < 3 || f[1] != n.Addr || f[2] != strconv.Itoa(n.Owned) {
			t.Fatalf("row of %s: %q, want its address %s and count %d\n%s", n.Name, row, n.Addr, n.Owned, out)
		}
	}
}
