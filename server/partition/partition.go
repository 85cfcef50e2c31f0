package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// DefaultCount is the partition count of a cluster created without one.
const DefaultCount = 16

// MaxCount bounds the partition count: each partition is an etcd election
// and a share of every node's work, so more than this is a mistake, not a
// tuning choice.
const MaxCount = 4096

// ErrCount reports a partition count outside [1, MaxCount].
var ErrCount = errors.New("partition: count out of range")

// ErrNoNodes reports an assignment asked of an empty node set.
var ErrNoNodes = errors.New("partition: no nodes")

// NodeID names a node; it is the value the node registers under its lease.
type NodeID string

// CheckCount returns nil when p is a usable partition count.
func CheckCount(p int) error {
	if p < 1 || p > MaxCount {
		return fmt.Errorf("%w: partitions=%d, want 1..%d", ErrCount, p, MaxCount)
	}
	return nil
}

// Of returns the partition of the task (namespace, key) among p partitions:
// xxhash64 of the bytes namespace, '/', key, modulo p. key is the task ID, or
// the group key the task names. p must satisfy CheckCount. Cost: one hash of
// len(namespace)+len(key)+1 bytes; no allocation.
func Of(namespace, key string, p int) int {
	var d xxhash.Digest
	d.Reset()
	d.WriteString(namespace)
	d.WriteString("/")
	d.WriteString(key)
	return int(d.Sum64() % uint64(p))
}

// weight is node n's rendezvous weight for partition part: xxhash64 of the
// node ID's bytes followed by part as 4 big-endian bytes.
func weight(part int, n NodeID) uint64 {
	var d xxhash.Digest
	d.Reset()
	d.WriteString(string(n))
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(part))
	d.Write(b[:])
	return d.Sum64()
}

// beats reports whether node a outranks node b for partition part: the higher
// weight wins, and equal weights go to the smaller ID so the order is total.
func beats(a NodeID, wa uint64, b NodeID, wb uint64) bool {
	if wa != wb {
		return wa > wb
	}
	return a < b
}

// Owner returns the node with the highest rendezvous weight for partition part
// among nodes (plain highest-random-weight, no load bound). Cost: O(len(nodes))
// hashes.
func Owner(part int, nodes []NodeID) (NodeID, error) {
	if len(nodes) == 0 {
		return "", ErrNoNodes
	}
	best, bw := nodes[0], weight(part, nodes[0])
	for _, n := range nodes[1:] {
		if w := weight(part, n); beats(n, w, best, bw) {
			best, bw = n, w
		}
	}
	return best, nil
}

// nodeSet checks p and returns nodes sorted, without duplicates, and not empty.
func nodeSet(p int, nodes []NodeID) ([]NodeID, error) {
	if err := CheckCount(p); err != nil {
		return nil, err
	}
	set := slices.Clone(nodes)
	slices.Sort(set)
	set = slices.Compact(set)
	if len(set) == 0 {
		return nil, ErrNoNodes
	}
	return set, nil
}

// Assign returns the owner of each of p partitions among nodes, as a slice
// indexed by partition. It is rendezvous hashing with a load bound: every node
// ranks the partitions, and a partition goes to the highest-ranked node that
// holds fewer than ceil(p/len(nodes)) partitions, partitions taken in index
// order. The result depends only on p and the set of nodes (not their order
// or duplicates). Cost: O(p · n log n) hashes and comparisons, one slice of p
// owners plus O(n) scratch.
func Assign(p int, nodes []NodeID) ([]NodeID, error) {
	set, err := nodeSet(p, nodes)
	if err != nil {
		return nil, err
	}
	limit := (p + len(set) - 1) / len(set)
	held := make(map[NodeID]int, len(set))
	owners := make([]NodeID, p)
	type ranked struct {
		id NodeID
		w  uint64
	}
	order := make([]ranked, len(set))
	for part := range p {
		for i, n := range set {
			order[i] = ranked{n, weight(part, n)}
		}
		slices.SortFunc(order, func(a, b ranked) int {
			if beats(a.id, a.w, b.id, b.w) {
				return -1
			}
			return 1
		})
		for _, r := range order {
			if held[r.id] < limit {
				owners[part] = r.id
				held[r.id]++
				break
			}
		}
	}
	return owners, nil
}
