package store

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// keyspace is where each kind of key lives under Options.Prefix (the layout in the
// package doc) and how a key read back is taken apart. It is pure: every field is set by
// newKeyspace and never changes, so the parts of a Store share one copy freely.
//
// Invariant: ∀ kinds a ≠ b of tasks, packs, packdone, locks, next, workers, leader,
// nodes, partitions, config: a is
// not a prefix of
// b, so a key read back under the prefix belongs to at most one kind (change relies on
// it).
type keyspace struct {
	prefix string // Options.Prefix: everything the Store writes is under it
	tasks  string // prefix + "tasks/": records (records.go)
	// packs and packDone are prefix + "packs/" and "packdone/": packs of records, and
	// their ended entries (packs.go).
	packs, packDone string
	locks           string // prefix + "locks/": run locks of exclusive tasks (locks.go)
	next            string // prefix + "next/": recurring tasks' progress (next.go)
	workers         string // prefix + "workers/": the worker registry (workers.go)
	leader          string // prefix + "leader": the election (leader.go)
	nodes           string // prefix + "nodes/": the live nodes (nodes.go)
	// partitionCount is prefix + "partitions/count": the cluster's P (partitions.go).
	partitionCount string
	// partitionMap is prefix + "partitions/map": the stored partition map (partmap.go).
	partitionMap string
	// partitionOwner is prefix + "partitions/owner/": the partitions' owner keys
	// (partowners.go).
	partitionOwner string
	config         string // prefix + "config/": the runtime configuration (config.go)
}

func newKeyspace(prefix string) keyspace {
	return keyspace{prefix: prefix, tasks: prefix + "tasks/", packs: prefix + "packs/", packDone: prefix + "packdone/", locks: prefix + "locks/", next: prefix + "next/",
		workers: prefix + "workers/", leader: prefix + "leader", nodes: prefix + "nodes/",
		partitionCount: prefix + "partitions/count", partitionMap: prefix + "partitions/map",
		partitionOwner: prefix + "partitions/owner/", config: prefix + "config/"}
}

// record is ns/id's record key.
func (k keyspace) record(ns, id string) (string, error) { return taskKey(k.tasks, ns, id) }

// lock is ns/id's run lock key.
func (k keyspace) lock(ns, id string) (string, error) { return taskKey(k.locks, ns, id) }

// progress is ns/id's progress key.
func (k keyspace) progress(ns, id string) (string, error) { return taskKey(k.next, ns, id) }

// taskKey is under + ns + "/" + id, or ErrInvalid for an empty ns or id or a ns with a
// '/' (which would make the first '/' after under no longer end the namespace).
func taskKey(under, ns, id string) (string, error) {
	if ns == "" || id == "" || strings.IndexByte(ns, '/') >= 0 {
		return "", fmt.Errorf("%w: namespace %q id %q", ErrInvalid, ns, id)
	}
	return under + ns + "/" + id, nil
}

// worker is the registry key of worker name under node.
func (k keyspace) worker(node, name string) (string, error) {
	if node == "" || name == "" || strings.IndexByte(node, '/') >= 0 {
		return "", fmt.Errorf("%w: worker %q of node %q", ErrInvalid, name, node)
	}
	return k.workers + node + "/" + name, nil
}

// split takes key, read from under under, apart at its first '/' after under:
// namespace and id (or node and name); ok is false when there is no '/'.
func split(under, key string) (first, rest string, ok bool) {
	return strings.Cut(strings.TrimPrefix(key, under), "/")
}

// taskOf is the task named by key, read from under under.
func taskOf(under, key string) (Key, bool) {
	ns, id, ok := split(under, key)
	return Key{ns, id}, ok
}

// decodeRecord is the record stored at key with value val, or ErrCorrupt when either does
// not follow the layout.
func (k keyspace) decodeRecord(key, val []byte) (Record, error) {
	rest, ok := strings.CutPrefix(string(key), k.tasks)
	ns, id, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || ns == "" || id == "" || len(val) < headerLen {
		return Record{}, fmt.Errorf("%w: key %q, %d-byte value", ErrCorrupt, key, len(val))
	}
	return Record{
		Namespace: ns,
		ID:        id,
		Version:   binary.BigEndian.Uint64(val),
		Body:      val[headerLen:],
	}, nil
}

// decodeProgress is the progress stored at key with value val; false when the value is
// not in the layout (next.go).
func (k keyspace) decodeProgress(key, val []byte) (NextDue, bool) {
	tk, ok := taskOf(k.next, string(key))
	if !ok || len(val) != nextLen {
		return NextDue{}, false
	}
	return NextDue{Key: tk, Version: binary.BigEndian.Uint64(val), Due: int64(binary.BigEndian.Uint64(val[8:]))}, true
}
