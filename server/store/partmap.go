package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// PartitionMap is the cluster's stored partition map, at <prefix>partitions/map: the
// owner of each of the Count partitions, by node name, as the last writer computed it
// from the live node set at revision Basis.
type PartitionMap struct {
	Rev    int64    // the map key's mod revision; 0: no map is stored
	Basis  int64    // the revision of the node set it was computed from (NodeSet.Rev)
	Owners []string // Owners[p] is partition p's owner; len(Owners) is P
}

// mapFormat is the first byte of a stored map: its encoding's version.
const mapFormat = 1

// encodeMap is m's value: mapFormat, then uvarints P, Basis and k, the k distinct
// owner names in byte order (each a uvarint length and its bytes), then P uvarints,
// each partition's owner as an index into those names. 16 partitions of 3 nodes named
// "node-x" take 40 bytes and the basis's uvarint (3 bytes up to revision 2^21).
func encodeMap(m PartitionMap) []byte {
	names := slices.Clone(m.Owners)
	slices.Sort(names)
	names = slices.Compact(names)
	b := []byte{mapFormat}
	b = binary.AppendUvarint(b, uint64(len(m.Owners)))
	b = binary.AppendUvarint(b, uint64(m.Basis))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
	}
	for _, o := range m.Owners {
		i, _ := slices.BinarySearch(names, o)
		b = binary.AppendUvarint(b, uint64(i))
	}
	return b
}

// decodeMap is the map stored as val at mod revision rev, or ErrCorrupt.
func decodeMap(val []byte, rev int64) (PartitionMap, error) {
	bad := func(what string) (PartitionMap, error) {
		return PartitionMap{}, fmt.Errorf("%w: partition map at revision %d: %s", ErrCorrupt, rev, what)
	}
	if len(val) == 0 || val[0] != mapFormat {
		return bad("not in format 1")
	}
	r := val[1:]
	next := func(limit uint64) (uint64, bool) {
		v, n := binary.Uvarint(r)
		if n <= 0 || v > limit {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	count, ok1 := next(uint64(len(val)))
	basis, ok2 := next(1<<63 - 1)
	k, ok3 := next(uint64(len(val)))
	if !ok1 || !ok2 || !ok3 || count == 0 || k == 0 {
		return bad("bad header")
	}
	names := make([]string, k)
	for i := range names {
		l, ok := next(uint64(len(r)))
		if !ok || l == 0 || l > uint64(len(r)) {
			return bad("bad node name")
		}
		names[i], r = string(r[:l]), r[l:]
		if strings.IndexByte(names[i], '/') >= 0 || i > 0 && names[i] <= names[i-1] {
			return bad("bad node name")
		}
	}
	m := PartitionMap{Rev: rev, Basis: int64(basis), Owners: make([]string, count)}
	for p := range m.Owners {
		i, ok := next(k - 1)
		if !ok {
			return bad(fmt.Sprintf("bad owner of partition %d", p))
		}
		m.Owners[p] = names[i]
	}
	if len(r) != 0 {
		return bad("trailing bytes")
	}
	return m, nil
}

// ReadMap returns the stored map (Rev 0 and no Owners when none is stored), read at
// one revision. Cost: one range read.
func (ps *Partitions) ReadMap(ctx context.Context) (PartitionMap, error) {
	resp, err := ps.cli.Get(ctx, ps.keys.partitionMap)
	if err != nil {
		return PartitionMap{}, fmt.Errorf("store: read the partition map: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return PartitionMap{}, nil
	}
	return decodeMap(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// WriteMap stores owners as the partition map, computed from the node set set over
// the map at revision prev (0: none stored), and returns the new map. It is one
// transaction, conditioned on nothing having changed since: the map key's mod revision
// is still prev, every node of set is still registered at the revision its entry was
// read at (Node.Rev; a node gone has none), and no entry under nodes/ was written after
// set.Rev (no node joined or rewrote its entry). Of two nodes racing to rewrite one
// map, so at most one wins; the others get ErrConflict and read again. An owner that
// is not a node name, or an empty owners, gives ErrInvalid. Its compares are
// len(set.Nodes)+2 etcd ops, within Options.MaxTxnOps.
func (ps *Partitions) WriteMap(ctx context.Context, prev int64, set NodeSet, owners []string) (PartitionMap, error) {
	if len(owners) == 0 {
		return PartitionMap{}, fmt.Errorf("%w: a partition map of no partitions", ErrInvalid)
	}
	for p, o := range owners {
		if o == "" || strings.IndexByte(o, '/') >= 0 {
			return PartitionMap{}, fmt.Errorf("%w: partition %d's owner %q", ErrInvalid, p, o)
		}
	}
	m := PartitionMap{Basis: set.Rev, Owners: slices.Clone(owners)}
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(ps.keys.partitionMap), "=", prev),
		clientv3.Compare(clientv3.ModRevision(ps.keys.nodes), "<", set.Rev+1).WithPrefix(),
	}
	for _, n := range set.Nodes {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ps.keys.nodes+n.Name), "=", n.Rev))
	}
	resp, err := ps.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(ps.keys.partitionMap, string(encodeMap(m)))).Commit()
	if err != nil {
		return PartitionMap{}, txnFailed("write the partition map", err)
	}
	if !resp.Succeeded {
		return PartitionMap{}, fmt.Errorf("%w: the partition map (read at %d) or the node set (read at %d)", ErrConflict, prev, set.Rev)
	}
	m.Rev = resp.Header.Revision
	return m, nil
}

// WatchMap calls fn with the stored map now (Rev 0 when none is stored), then with
// every later revision of it, in order, until ctx ends (nil) or the watch is lost
// (ErrFollowLost, or the cause): the caller calls WatchMap again, which reads afresh.
// A map that does not decode (ReadMap's ErrCorrupt) is delivered as none stored, at
// its revision, so that the next WriteMap (over that revision) replaces it. fn runs on
// WatchMap's goroutine.
func (ps *Partitions) WatchMap(ctx context.Context, fn func(PartitionMap)) error {
	resp, err := ps.cli.Get(ctx, ps.keys.partitionMap)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("store: read the partition map: %w", err)
	}
	if len(resp.Kvs) == 0 {
		fn(PartitionMap{})
	} else {
		fn(decodeOrNone(resp.Kvs[0].Value, resp.Kvs[0].ModRevision))
	}
	return watchPrefix(ctx, ps.cli, ps.keys.partitionMap, resp.Header.Revision+1, func(evs []*clientv3.Event, _ int64) {
		for _, ev := range evs {
			if string(ev.Kv.Key) != ps.keys.partitionMap {
				continue // another key that shares the map key's bytes as a prefix
			}
			if ev.Type == clientv3.EventTypeDelete {
				fn(PartitionMap{})
				continue
			}
			fn(decodeOrNone(ev.Kv.Value, ev.Kv.ModRevision))
		}
	})
}

// decodeOrNone is decodeMap's map, or, for a value that does not decode, a map of no
// owners at rev.
func decodeOrNone(val []byte, rev int64) PartitionMap {
	m, err := decodeMap(val, rev)
	if err != nil {
		return PartitionMap{Rev: rev}
	}
	return m
}
