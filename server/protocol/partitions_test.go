package protocol

import (
	"errors"
	"testing"
)

// TestPartitionMapChecked: a PARTITION_MAP whose owners do not cover exactly its count of
// partitions, or name a node it does not list, is BAD_FIELD "owners": a client must
// not route by a map it cannot read whole. A map of no nodes has no owners.
func TestPartitionMapChecked(t *testing.T) {
	nodes := []PartitionNode{{Name: "a"}, {Name: "b"}}
	for _, c := range []struct {
		name string
		m    PartitionMap
	}{
		{"fewer owners than partitions", PartitionMap{ID: 1, Count: 3, Nodes: nodes, Owners: []uint64{0, 1}}},
		{"more owners than partitions", PartitionMap{ID: 1, Count: 1, Nodes: nodes, Owners: []uint64{0, 1}}},
		{"an owner past the nodes", PartitionMap{ID: 1, Count: 2, Nodes: nodes, Owners: []uint64{0, 2}}},
	} {
		buf, err := AppendFrame(nil, &c.m, DefaultMaxFrame)
		if err != nil {
			t.Fatalf("%s: encode: %v", c.name, err)
		}
		_, err = Decode(buf[headerLen:])
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != CodeBadField || pe.Field != "owners" {
			t.Errorf("%s: decode error %v, want BAD_FIELD at owners", c.name, err)
		}
	}
	for _, ok := range []PartitionMap{
		{ID: 1, Count: 2, Rev: 9, Nodes: nodes, Owners: []uint64{1, 0}},
		{ID: 1, Count: 2, Rev: 9}, // no live node known: no owner
	} {
		buf, _ := AppendFrame(nil, &ok, DefaultMaxFrame)
		if _, err := Decode(buf[headerLen:]); err != nil {
			t.Fatalf("a well-formed map %+v: %v", ok, err)
		}
	}
}
