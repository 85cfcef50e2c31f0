package protocol

import (
	"errors"
	"testing"
)

// TestPartitionMapChecked: a PARTITION_MAP whose owners do not cover exactly its count of
// partitions, or name a node it does not list, is BAD_FIELD "owners", and one with
// epochs but not one per owner BAD_FIELD "epochs": a client must not route by a map it
// cannot read whole. A map of no nodes has no owners; epochs may be absent.
func TestPartitionMapChecked(t *testing.T) {
	nodes := []PartitionNode{{Name: "a"}, {Name: "b"}}
	for _, c := range []struct {
		name, field string
		m           PartitionMap
	}{
		{"fewer owners than partitions", "owners", PartitionMap{ID: 1, Count: 3, Nodes: nodes, Owners: []uint64{0, 1}}},
		{"more owners than partitions", "owners", PartitionMap{ID: 1, Count: 1, Nodes: nodes, Owners: []uint64{0, 1}}},
		{"an owner past the nodes", "owners", PartitionMap{ID: 1, Count: 2, Nodes: nodes, Owners: []uint64{0, 2}}},
		{"fewer epochs than owners", "epochs", PartitionMap{ID: 1, Count: 2, Nodes: nodes, Owners: []uint64{0, 1}, Epochs: []uint64{5}}},
		{"epochs without owners", "epochs", PartitionMap{ID: 1, Count: 2, Epochs: []uint64{5, 6}}},
	} {
		buf, err := AppendFrame(nil, &c.m, DefaultMaxFrame)
		if err != nil {
			t.Fatalf("%s: encode: %v", c.name, err)
		}
		_, err = Decode(buf[headerLen:])
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != CodeBadField || pe.Field != c.field {
			t.Errorf("%s: decode error %v, want BAD_FIELD at %s", c.name, err, c.field)
		}
	}
	for _, ok := range []PartitionMap{
		{ID: 1, Count: 2, Rev: 9, Nodes: nodes, Owners: []uint64{1, 0}},
		{ID: 1, Count: 2, Rev: 9, Nodes: nodes, Owners: []uint64{1, 0}, Epochs: []uint64{7, 0}},
		{ID: 1, Count: 2, Rev: 9}, // no live node known: no owner
	} {
		buf, _ := AppendFrame(nil, &ok, DefaultMaxFrame)
		if _, err := Decode(buf[headerLen:]); err != nil {
			t.Fatalf("a well-formed map %+v: %v", ok, err)
		}
	}
}
