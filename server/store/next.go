package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Progress is where recurring durable tasks' schedules stand. A task's progress,
// <prefix>next/<ns>/<id>, holds the version of the task it belongs to and the due time
// of the occurrence its leader has armed (two big-endian 64-bit words: version, then
// Unix ns), so that the next leader continues the schedule from there (and applies the
// task's misfire policy to occurrences that fell due while no node led) instead of
// starting it over, and ignores progress of another version than the record's (a
// replacement's schedule is its own). It is first written with the record, in the same
// transaction (Record.NextDue: the first occurrence), then only while the record holds
// that version (PutFenced), deleted with the record (Records.DeleteBatch), and
// overwritten by a recurring replacement's own progress.
//
// Invariant: ∀ progress p of ns/id, the record ns/id was stored at p.Version in the
// transaction that wrote p. Costs: PutFenced of n items is
// ⌈n/(maxTxnOps-txnDepth)⌉ transactions, txns.limit of them in flight at once; At is one
// read.
//
// Concurrency: safe for concurrent use; every field is set when the Store opens and
// never changes.
type Progress struct {
	cli       *clientv3.Client
	keys      keyspace
	txns      txnRunner
	maxTxnOps int // Options.MaxTxnOps
}

// NextDue is one task's progress.
type NextDue struct {
	Key     Key
	Version uint64 // the task version whose schedule it is
	Due     int64  // Unix ns
}

const nextLen = 16 // big-endian Version, then big-endian Due

// progressValue is the value of a progress key: version, then due (Unix ns).
func progressValue(version uint64, due int64) string {
	var v [nextLen]byte
	binary.BigEndian.PutUint64(v[:8], version)
	binary.BigEndian.PutUint64(v[8:], uint64(due))
	return string(v[:])
}

// PutFenced records the progress of tasks, while f holds (ErrFenced otherwise), in
// as few transactions as MaxTxnOps allows, TxnConcurrency at once. Each item is written
// only if its task's record is stored at the item's version (progressOp): progress is
// never left behind by a record deleted (or replaced) meanwhile. Of items naming one task
// twice, the first is written.
func (ps *Progress) PutFenced(ctx context.Context, f Fence, items []NextDue) error {
	var txns [][]clientv3.Op
	var ops []clientv3.Op
	seen := make(map[Key]bool, len(items)) // etcd refuses a transaction that names a key twice
	for _, it := range items {
		rk, err := ps.keys.record(it.Key.Namespace, it.Key.ID)
		if err != nil {
			return err
		}
		if seen[it.Key] {
			continue
		}
		seen[it.Key] = true
		nk, _ := ps.keys.progress(it.Key.Namespace, it.Key.ID) // valid when rk is
		ops = append(ops, progressOp(rk, nk, it))
		if len(ops) == ps.maxTxnOps-txnDepth {
			txns, ops = append(txns, ops), nil
		}
	}
	if len(ops) > 0 {
		txns = append(txns, ops)
	}
	return ps.txns.commitFenced(ctx, f, txns, "record the progress of tasks")
}

// progressOp writes nd to nextKey if the record at recKey holds version nd.Version
// (values order by version, see the package doc):
//
//	txn( value < be64(v) ? nothing : txn( value < be64(v+1) ? put ) )
//
// A missing record fails both compares (etcd never matches a value of an absent key).
// It costs one op in the outer transaction and txnDepth levels below it, as recordOp.
func progressOp(recKey, nextKey string, nd NextDue) clientv3.Op {
	v := progressValue(nd.Version, nd.Due)
	notAbove := clientv3.Compare(clientv3.Value(recKey), "<", string(header(nd.Version+1)))
	if nd.Version == math.MaxUint64 { // no higher version exists: stored at all suffices
		notAbove = clientv3.Compare(clientv3.Version(recKey), ">", 0)
	}
	put := clientv3.OpTxn([]clientv3.Cmp{notAbove}, []clientv3.Op{clientv3.OpPut(nextKey, v)}, nil)
	return clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(recKey), "<", string(header(nd.Version)))},
		nil, []clientv3.Op{put})
}

// At returns the progress of every recurring task at revision rev (Records.Load's; 0:
// now).
// A value not in the layout above (written by an older version of the store) is skipped:
// that task's schedule starts over.
func (ps *Progress) At(ctx context.Context, rev int64) (map[Key]NextDue, error) {
	resp, err := ps.cli.Get(ctx, ps.keys.next, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("store: read the tasks' progress at %d: %w", rev, err)
	}
	next := make(map[Key]NextDue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if nd, ok := ps.keys.decodeProgress(kv.Key, kv.Value); ok {
			next[nd.Key] = nd
		}
	}
	return next, nil
}
