package store

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Partitions is the cluster's partition count P at <prefix>partitions/count: written
// once, by the first node that asks (Ensure), and never again, so that every node of the
// cluster hashes tasks to the same P partitions.
//
// Invariant: the count key, once created, keeps its first value: Ensure's only write is
// conditional on the key's absence (CreateRevision = 0). Cost: Ensure is one transaction.
//
// Concurrency: safe for concurrent use; the session is the Store's (sessions, guarded
// by its mu), every other field is set when the Store opens and never changes.
type Partitions struct {
	cli      *clientv3.Client
	keys     keyspace
	sessions *sessions // the Store's: the owner keys stand on its lease (partowners.go)
}

// Ensure creates the count as p if the cluster has none yet, and returns the cluster's
// count: p when this call created it (or an earlier one wrote p), else the count the
// cluster was created with, which the caller compares with its own. A stored value that
// is not a decimal integer gives ErrCorrupt.
func (ps *Partitions) Ensure(ctx context.Context, p int) (int, error) {
	key := ps.keys.partitionCount
	resp, err := ps.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, strconv.Itoa(p))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, txnFailed("create the partition count", err)
	}
	if resp.Succeeded {
		return p, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return 0, fmt.Errorf("%w: %s: %d keys read back", ErrCorrupt, key, len(kvs))
	}
	stored, err := strconv.Atoi(string(kvs[0].Value))
	if err != nil {
		return 0, fmt.Errorf("%w: %s holds %q, not a partition count", ErrCorrupt, key, kvs[0].Value)
	}
	return stored, nil
}
