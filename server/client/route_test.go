package client

import (
	"slices"
	"testing"

	"github.com/tock-sched/tock/server/partition"
)

// vectorMap is a map of 16 partitions over the test vectors of PROTOCOL.md
// ("Partitions"): default/task-1 is partition 6, billing/invoice/42 14, ns/ключ 12.
// Node b owns 6 and 12, c (gone: no address) 14, a the rest.
func vectorMap(addrA, addrB string) PartitionMap {
	m := PartitionMap{Count: 16, Rev: 5, Owners: make([]int, 16),
		Nodes: []PartitionNode{{Name: "a", Addr: addrA}, {Name: "b", Addr: addrB}, {Name: "c"}}}
	m.Owners[6], m.Owners[12], m.Owners[14] = 1, 1, 2
	return m
}

// TestRouteTable: which address a request for a task goes to (route): the owner of
// its partition, or "" (the default way) for no map, the current node, or an owner
// without an address; an empty namespace hashes as "default".
func TestRouteTable(t *testing.T) {
	m := vectorMap("A:1", "B:2")
	held := vectorMap("A:1", "B:2")
	held.Owners[14] = 0 // billing/invoice/42 is a's
	zero := vectorMap("A:1", "B:2")
	zero.Owners[partition.Of("default", "task-2", 16)] = 1 // b's; hashed as "" it would be a's
	if p := partition.Of("", "task-2", 16); zero.Owners[p] != 0 {
		t.Fatalf("(\"\", task-2) is in partition %d, b's too: the empty-namespace row could not fail", p)
	}
	for _, tc := range []struct {
		name          string
		m             PartitionMap
		self, ns, key string
		want          string
	}{
		{"another node owns it", m, "a", "default", "task-1", "B:2"},
		{"an empty namespace is default", zero, "a", "", "task-2", "B:2"},
		{"the current node owns it", m, "b", "default", "task-1", ""},
		{"another of b's partitions", m, "a", "ns", "ключ", "B:2"},
		{"the current node is not in the map", m, "fake", "ns", "ключ", "B:2"},
		{"the owner has no address", m, "a", "billing", "invoice/42", ""},
		{"a's partition, from a", held, "a", "billing", "invoice/42", ""},
		{"a's partition, from b", held, "b", "billing", "invoice/42", "A:1"},
		{"no map", PartitionMap{}, "a", "default", "task-1", ""},
		{"a map with no owners yet", PartitionMap{Count: 16, Rev: 3}, "a", "default", "task-1", ""},
	} {
		if got := tc.m.route(tc.self, tc.ns, tc.key); got != tc.want {
			t.Errorf("%s: route(%q, %q, %q) = %q, want %q", tc.name, tc.self, tc.ns, tc.key, got, tc.want)
		}
	}
}

// TestSplitByOwner: a batch splits into one group per address, in the order of each
// group's first task, each group in the tasks' order; a workflow stays whole.
func TestSplitByOwner(t *testing.T) {
	for _, tc := range []struct {
		name     string
		addrs    []string
		workflow bool
		want     [][]int
	}{
		{"one task", []string{"A"}, false, [][]int{{0}}},
		{"one owner", []string{"A", "A", "A"}, false, [][]int{{0, 1, 2}}},
		{"the default way is a group too", []string{"", "", ""}, false, [][]int{{0, 1, 2}}},
		{"interleaved owners", []string{"A", "B", "A", "", "B"}, false, [][]int{{0, 2}, {1, 4}, {3}}},
		{"first task's owner first", []string{"", "A", ""}, false, [][]int{{0, 2}, {1}}},
		{"a workflow is never split", []string{"A", "B", "A", ""}, true, [][]int{{0, 1, 2, 3}}},
	} {
		got := splitByOwner(tc.addrs, tc.workflow)
		if !slices.EqualFunc(got, tc.want, slices.Equal[[]int]) {
			t.Errorf("%s: splitByOwner(%q, %v) = %v, want %v", tc.name, tc.addrs, tc.workflow, got, tc.want)
		}
	}
}
