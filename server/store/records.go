package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Records are the durable task records: <prefix>tasks/<namespace>/<id>, each an 8-byte
// big-endian version and the opaque body (see the package doc's write invariants). Put
// and PutBatch create or replace a lower version, DeleteBatch removes one named version
// with its progress and run lock, Load reads them all at one revision, with the entries
// of packs (packs.go: many one-shot records in one key, PutPackFenced and
// MarkDoneFenced).
//
// Invariants: a stored version only grows while the key exists (a write of an equal or
// lower version is refused, or is the identical value); a transaction holds at most
// maxTxnOps etcd ops, counting nested levels, and at most maxTxnBytes of keys and
// values. Costs: a batch of n records is ⌈n/(maxTxnOps-txnDepth)⌉ transactions or more
// (fewer records fit when bytes bind), txns.limit of them in flight at once; Load is
// ⌈records/pageSize⌉ reads at one revision.
//
// Concurrency: safe for concurrent use; every field is set when the Store opens and
// never changes. Two writers of one record race in etcd, which serialises them: the
// higher version wins, whatever the order.
type Records struct {
	cli         *clientv3.Client
	keys        keyspace
	txns        txnRunner
	maxTxnOps   int // Options.MaxTxnOps
	maxTxnBytes int // Options.MaxTxnBytes
	pageSize    int // Options.LoadPageSize
}

// Record is one durable task. Body is opaque to the store.
type Record struct {
	Namespace string
	ID        string
	Version   uint64
	Body      []byte
	// NextDue, when not 0, is the due time (Unix ns) of a recurring task's first
	// occurrence: PutBatch writes it as the record's progress (next.go) in the same
	// transaction as the record, and only if the record is written, so that a leader
	// that loads the record always finds where its schedule stands, however soon after
	// the submit it took over. Load does not read it (Progress.At does).
	NextDue int64
	// Pack, as Load yields it, is the pack entry the record was read from (packs.go);
	// zero for a record of its own. PutBatch ignores it.
	Pack PackRef
}

const headerLen = 8 // big-endian Version before Body

func header(v uint64) []byte {
	var h [headerLen]byte
	binary.BigEndian.PutUint64(h[:], v)
	return h[:]
}

func encodeValue(r Record) string {
	b := make([]byte, headerLen+len(r.Body))
	binary.BigEndian.PutUint64(b, r.Version)
	copy(b[headerLen:], r.Body)
	return string(b)
}

// recordOp writes key=val (and its progress nk=nv, unless nk is "") if the key is
// absent or holds a lower version, and otherwise reads it back:
//
//	txn( create==0 ? put, put progress : txn( value < be64(version) ? put, put progress : get ) )
//
// It costs one op in the outer transaction and txnDepth levels below it, txnDepthNext
// with a progress put.
func recordOp(key, val string, version uint64, nk, nv string) clientv3.Op {
	put := []clientv3.Op{clientv3.OpPut(key, val)}
	if nk != "" {
		put = append(put, clientv3.OpPut(nk, nv))
	}
	replace := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "<", string(header(version)))},
		put,
		[]clientv3.Op{clientv3.OpGet(key)},
	)
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		put,
		[]clientv3.Op{replace},
	)
}

// Put stores rec: it creates the record, or replaces a stored one with a
// lower Version. A stored equal-or-higher version yields ErrExists, except
// that rewriting the identical value succeeds.
func (rs *Records) Put(ctx context.Context, rec Record) error {
	errs, err := rs.PutBatch(ctx, []Record{rec})
	if err != nil {
		return err
	}
	return errs[0]
}

type pending struct {
	idx      int
	key, val string
	// nk, nv: the record's progress key and value (Record.NextDue), or "" for none.
	nk, nv string
}

// PutBatch stores recs as Put does, packed into transactions of at most
// MaxTxnOps ops and MaxTxnBytes bytes. errs[i] is the outcome of recs[i]
// (nil, an *ExistsError, ErrInvalid, ErrDuplicate, ErrTooLarge). err reports a
// failed transaction, and every record of it gets err in errs too: wrapped in
// ErrUncertain when it may have committed (retrying is safe, since rewriting an
// identical value succeeds), otherwise known not to have written.
func (rs *Records) PutBatch(ctx context.Context, recs []Record) ([]error, error) {
	return rs.PutBatchFenced(ctx, Fence{}, recs)
}

// PutBatchFenced is PutBatch that writes only while f holds (see Fence): otherwise every
// record gets ErrFenced and nothing is written.
func (rs *Records) PutBatchFenced(ctx context.Context, f Fence, recs []Record) ([]error, error) {
	errs := make([]error, len(recs))
	seen := make(map[string]struct{}, len(recs))
	var group []pending
	size := 0
	perTxn := rs.maxTxnOps - txnDepth
	for _, r := range recs {
		if r.NextDue != 0 {
			perTxn = rs.maxTxnOps - txnDepthNext
			break
		}
	}
	var groups [][]pending
	for i, r := range recs {
		k, err := rs.keys.record(r.Namespace, r.ID)
		if err != nil {
			errs[i] = err
			continue
		}
		if _, dup := seen[k]; dup {
			errs[i] = ErrDuplicate
			continue
		}
		seen[k] = struct{}{}
		v := encodeValue(r)
		var nk, nv string
		if r.NextDue != 0 {
			nk, _ = rs.keys.progress(r.Namespace, r.ID) // valid when k is
			nv = progressValue(r.Version, r.NextDue)
		}
		n := 2 * (len(k) + len(v) + len(nk) + len(nv)) // the puts are in two branches
		if n > rs.maxTxnBytes {
			errs[i] = fmt.Errorf("%w: %s is %d bytes", ErrTooLarge, k, n)
			continue
		}
		if len(group) == perTxn || size+n > rs.maxTxnBytes {
			groups = append(groups, group)
			group, size = nil, 0
		}
		group = append(group, pending{i, k, v, nk, nv})
		size += n
	}
	if len(group) > 0 {
		groups = append(groups, group)
	}
	err := rs.txns.each(len(groups), func(gi int) error {
		err := rs.putGroup(ctx, f, groups[gi], errs)
		if err != nil {
			for _, p := range groups[gi] {
				errs[p.idx] = err
			}
		}
		return err
	})
	return errs, err
}

func (rs *Records) putGroup(ctx context.Context, f Fence, g []pending, errs []error) error {
	ops := make([]clientv3.Op, len(g))
	for i, p := range g {
		ops[i] = recordOp(p.key, p.val, binary.BigEndian.Uint64([]byte(p.val)), p.nk, p.nv)
	}
	resp, err := f.txn(rs.cli.Txn(ctx)).Then(ops...).Commit()
	if err != nil {
		return txnFailed(fmt.Sprintf("put txn of %d records", len(g)), err)
	}
	if !f.held(resp) {
		return ErrFenced
	}
	if len(resp.Responses) != len(g) {
		return fmt.Errorf("store: put txn: %d responses for %d records", len(resp.Responses), len(g))
	}
	for i, p := range g {
		outer := resp.Responses[i].GetResponseTxn()
		if outer == nil {
			return fmt.Errorf("store: put txn: response %d is not a txn", i)
		}
		if outer.Succeeded {
			continue // created
		}
		inner := outer.Responses[0].GetResponseTxn()
		if inner == nil {
			return fmt.Errorf("store: put txn: response %d has no inner txn", i)
		}
		if inner.Succeeded {
			continue // replaced a lower version
		}
		get := inner.Responses[0].GetResponseRange()
		if get == nil || len(get.Kvs) != 1 {
			return fmt.Errorf("store: put txn: response %d has no stored value", i)
		}
		if bytes.Equal(get.Kvs[0].Value, []byte(p.val)) {
			continue // identical value already stored: idempotent retry
		}
		stored, err := rs.keys.decodeRecord(get.Kvs[0].Key, get.Kvs[0].Value)
		if err != nil {
			errs[p.idx] = err
			continue
		}
		errs[p.idx] = &ExistsError{Stored: stored}
	}
	return nil
}

// Key names one record.
type Key struct{ Namespace, ID string }

// Versioned names one version of a record.
type Versioned struct {
	Key
	Version uint64
}

// DeleteBatch removes records (each with its progress, next.go, and its run lock,
// locks.go) in as few transactions
// as Options.MaxTxnOps allows, up to Options.TxnConcurrency of them in flight at once.
// Each record goes only while it is stored at the version named: a record replaced by
// a later version meanwhile stays, and so do its progress and lock. Absent records are no
// error. On an error some transactions may have committed: deleting again is harmless.
func (rs *Records) DeleteBatch(ctx context.Context, recs []Versioned) error {
	return rs.DeleteBatchFenced(ctx, Fence{}, recs)
}

// DeleteBatchFenced is DeleteBatch that deletes only while f holds: otherwise it
// returns ErrFenced (some transactions may have run before f stopped holding).
func (rs *Records) DeleteBatchFenced(ctx context.Context, f Fence, recs []Versioned) error {
	txns, err := rs.deleteTxns(recs)
	if err != nil {
		return err
	}
	return rs.txns.commitFenced(ctx, f, txns, "delete records")
}

// DeleteChainFenced is DeleteBatchFenced in order: one transaction when recs fit one
// (Options.MaxTxnOps), all of them going or none; else transactions one after another,
// each committed only once the one before has, so that no record goes before one listed
// ahead of it. Cost: ⌈len(recs) / (MaxTxnOps - 4)⌉ round trips, one after another.
func (rs *Records) DeleteChainFenced(ctx context.Context, f Fence, recs []Versioned) error {
	txns, err := rs.deleteTxns(recs)
	for i := 0; err == nil && i < len(txns); i++ {
		err = rs.txns.commitFenced(ctx, f, txns[i:i+1], "delete records in order")
	}
	return err
}

// deleteTxns is recs's deletes (deleteOp), the first of each key, in transactions of
// MaxTxnOps.
func (rs *Records) deleteTxns(recs []Versioned) ([][]clientv3.Op, error) {
	var txns [][]clientv3.Op
	var ops []clientv3.Op
	seen := map[string]bool{} // etcd refuses a transaction that names a key twice
	for _, r := range recs {
		key, err := rs.keys.record(r.Namespace, r.ID)
		if err != nil {
			return nil, err
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		nk, _ := rs.keys.progress(r.Namespace, r.ID) // valid when key is
		lk, _ := rs.keys.lock(r.Namespace, r.ID)
		ops = append(ops, deleteOp(key, nk, lk, r.Version))
		if len(ops) == rs.maxTxnOps-deleteDepth {
			txns, ops = append(txns, ops), nil
		}
	}
	if len(ops) > 0 {
		txns = append(txns, ops)
	}
	return txns, nil
}

// deleteDepth is what one deleteOp costs against MaxTxnOps beyond its slot in the
// outer transaction: two nested levels, the inner one with three deletes (etcd charges
// each level's largest branch against its parent's budget).
const deleteDepth = 4

// deleteOp deletes key, its progress nk and its run lock lk if key holds version v (its
// value starts with be64(v)):
//
//	txn( value < be64(v) ? nothing : txn( value < be64(v+1) ? delete key, nk, lk : nothing ) )
//
// A compare of an absent key's value fails, so an absent record deletes nothing. The
// lock goes with the record whatever run it names: the task has ended for good, and a
// lock left by a replaced version's run would otherwise stay in etcd for good.
func deleteOp(key, nk, lk string, v uint64) clientv3.Op {
	del := []clientv3.Op{clientv3.OpDelete(key), clientv3.OpDelete(nk), clientv3.OpDelete(lk)}
	if v < math.MaxUint64 {
		del = []clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "<", string(header(v+1)))}, del, nil)}
	}
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "<", string(header(v)))}, nil, del)
}

// Load is LoadAll with no hooks.
func (rs *Records) Load(ctx context.Context, fn func(Record) error) (int64, error) {
	return rs.LoadAll(ctx, fn, LoadHooks{})
}

// LoadAll calls fn for every task's record, from one snapshot (LoadSet), and returns the
// snapshot's revision: watch from rev+1 to see every later change. The records of their
// own come first, in key order, then the entries of packs not done (Record.Pack set), in
// pack order. A task has one record there: the highest version of its own record and
// its pack entries (PackSet.Merge; h hears of the ones passed over and of every pack).
// An error from fn stops LoadAll and is returned. Record.Body aliases the response; fn
// may keep it.
func (rs *Records) LoadAll(ctx context.Context, fn func(Record) error, h LoadHooks) (int64, error) {
	own, ps, rev, err := rs.LoadSet(ctx)
	if err != nil {
		return rev, err
	}
	return rev, ps.Merge(own, fn, h)
}
