package main

import (
	"encoding/json"
	"slices"
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
		Held       int    `json:"held"`
		Partitions []int  `json:"partitions"`
	} `json:"nodes"`
	Owners []string `json:"owners"`
	Epochs []int64  `json:"epochs"`
	Held   []bool   `json:"held"`
}

// TestPartitions: on a cluster of three nodes, tockctl partitions prints each node with
// its address, how many partitions it owns and holds and which, then each partition's
// owner, epoch and whether it is held; the JSON form says the same, its owners agreeing
// with each node's list.
func TestPartitions(t *testing.T) {
	a := tockdtest.Start(t, tockdtest.Etcd(), tockdtest.Options(tockd.Options{NodeName: "node-a"}))
	b := tockdtest.Start(t, tockdtest.EtcdOf(a), tockdtest.Options(tockd.Options{NodeName: "node-b"}))
	c := tockdtest.Start(t, tockdtest.EtcdOf(a), tockdtest.Options(tockd.Options{NodeName: "node-c"}))
	var m partitionsJSON
	tockdtest.Eventually(t, "node-b's map settled over three nodes, 5 or 6 partitions each, all held", func() bool {
		m = partitionsJSON{}
		if err := json.Unmarshal([]byte(ok(t, b.Addr, "-json", "partitions")), &m); err != nil {
			t.Fatal(err)
		}
		settled := len(m.Nodes) == 3
		for _, n := range m.Nodes {
			settled = settled && n.Owned >= 5 && n.Owned <= 6 && n.Held == n.Owned
		}
		return settled
	})
	if m.Count != 16 || m.Rev <= 0 || len(m.Owners) != 16 || len(m.Epochs) != 16 || len(m.Held) != 16 {
		t.Fatalf("-json partitions: %+v, want 16 owners, epochs and helds at a revision > 0", m)
	}
	for p, e := range m.Epochs {
		if e <= 0 || !m.Held[p] {
			t.Fatalf("-json partitions: partition %d at epoch %d, held %v; want every one held at an epoch", p, e, m.Held[p])
		}
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
		if len(f) < 4 || f[1] != n.Addr || f[2] != strconv.Itoa(n.Owned) || f[3] != strconv.Itoa(n.Held) {
			t.Fatalf("row of %s: %q, want its address %s, count %d and held %d\n%s", n.Name, row, n.Addr, n.Owned, n.Held, out)
		}
	}
	_, table, _ := strings.Cut(out, "PARTITION ")
	for p, o := range m.Owners {
		want := []string{strconv.Itoa(p), o, strconv.FormatInt(m.Epochs[p], 10), "true"}
		found := false
		for _, line := range strings.Split(table, "\n") {
			found = found || slices.Equal(strings.Fields(line), want)
		}
		if !found {
			t.Fatalf("partitions: no row %v in\n%s", want, out)
		}
	}
}
