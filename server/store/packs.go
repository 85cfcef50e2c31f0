package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/compress/s2"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Packs: the records of many one-shot tasks in one key, and their ends as a bitmap.
//
// A record of its own costs etcd a put at the submit and a delete at the end: two keys
// a task, each an index entry, a backend write and a watch event, and a tombstone until
// compaction. A pack holds the records of a whole submitted batch in one value; the ends
// of its tasks are recorded in one small done key per pack, rewritten by each fenced
// write that ends some of them; when every entry has ended, both keys go in one
// transaction. A batch of n tasks ended over m deleter rounds costs 1 + m + 2 keys
// instead of 2n.
//
//	<prefix>packs/<id>      a pack: one format byte, then its entries, plain (0) or
//	                        compressed with S2 (1, Snappy's format extended): uvarint(n), then
//	                        n entries, each
//	                        uvarint(len ns) ns uvarint(len id) id be64(version) uvarint(len body) body
//	<prefix>packdone/<id>   its ended entries: be64(popcount) then the bitmap, ⌈n/8⌉ bytes,
//	                        bit i (byte i/8, bit i%8) set once entry i has ended
//
// Invariants (on top of the package doc's):
//   - A pack is written once: created if absent, or the identical value found (an
//     idempotent retry); a different value under its key is refused (ErrExists).
//   - A done key exists only while its pack does, and its popcount only grows: a write
//     applies only if the pack exists and the stored popcount is lower. A writer whose
//     bitmaps of one pack only grow (each a superset of the last) therefore never
//     undoes an end it recorded, whatever order its writes land in.
//   - A pack whose entries have all ended is deleted with its done key, in one
//     transaction.
//   - Load yields, per task, one entry: the highest version among its record and the
//     not-done entries of packs (a tie goes to the record, written later by the rules
//     of the caller: a task split out of its pack is recorded on its own at the same
//     version). The entries it passes over are reported (stale) so that the caller can
//     end them.
//
// Costs: PutPackFenced of n records is ⌈bytes/MaxTxnBytes⌉ keys, one transaction each,
// TxnConcurrency at once; MarkDoneFenced of m packs is ⌈m/(MaxTxnOps-packDoneDepth)⌉
// transactions; Load reads the packs and done keys whole (every live pack entry is held
// in memory until the records have been read).

// PackRef names one entry of a pack; the zero PackRef is a record of its own.
type PackRef struct {
	ID    string // the pack's key below packs/ ("" for a record of its own)
	Index int    // the entry's place in the pack
}

// PackDone is the ended entries of one pack, for MarkDoneFenced: Len is the pack's
// entry count and Done its bitmap, ⌈Len/8⌉ bytes (bit i is byte i/8, bit i%8).
type PackDone struct {
	ID   string
	Len  int
	Done []byte
}

// Set marks entry i ended.
func (d *PackDone) Set(i int) { d.Done[i/8] |= 1 << (i % 8) }

// IsSet reports whether entry i has ended.
func (d *PackDone) IsSet(i int) bool { return d.Done[i/8]&(1<<(i%8)) != 0 }

// Full reports whether every entry has ended.
func (d *PackDone) Full() bool { return d.count() >= d.Len }

// NewPackDone is the PackDone of pack id of n entries, none ended.
func NewPackDone(id string, n int) PackDone {
	return PackDone{ID: id, Len: n, Done: make([]byte, (n+7)/8)}
}

// count is the number of ended entries (bits past Len are not counted).
func (d *PackDone) count() int {
	n := 0
	for i, b := range d.Done {
		if over := 8*(i+1) - d.Len; over > 0 && over < 8 {
			b &= 0xff >> over
		}
		n += bits.OnesCount8(b)
	}
	return n
}

// packDoneDepth is what one done write costs against MaxTxnOps beyond its slot in the
// outer transaction (packDoneOp: three nested levels, one op in each branch).
const packDoneDepth = 3

// packOverhead bounds an entry's bytes beyond its namespace, id and body: three uvarint
// lengths and the version.
const packOverhead = 3*binary.MaxVarintLen64 + 8

// checkPackID refuses an empty pack ID or one with '/' or '.' ('.' separates a
// PutPackFenced's parts).
func checkPackID(id string) error {
	if id == "" || strings.ContainsAny(id, "/.") {
		return fmt.Errorf("%w: pack id %q", ErrInvalid, id)
	}
	return nil
}

// appendEntry appends r as a pack entry.
func appendEntry(b []byte, r *Record) []byte {
	b = binary.AppendUvarint(b, uint64(len(r.Namespace)))
	b = append(b, r.Namespace...)
	b = binary.AppendUvarint(b, uint64(len(r.ID)))
	b = append(b, r.ID...)
	b = binary.BigEndian.AppendUint64(b, r.Version)
	b = binary.AppendUvarint(b, uint64(len(r.Body)))
	return append(b, r.Body...)
}

// The pack formats (a value's first byte).
const (
	packPlain = 0 // the entries as they are
	packS2    = 1 // the entries compressed with S2
)

// packCompress is whether packValue may compress: a benchmark turns it off to compare.
var packCompress = true

// packValue is the stored value of a pack whose entries (count first) are plain: S2
// compressed when that is smaller (the entries of one batch repeat their type, retry
// policy and much of their payloads, and etcd's cost grows with the bytes it replicates,
// logs, stores and sends to watchers), else plain. Deterministic, as a retry's identical
// value needs.
func packValue(plain []byte) []byte {
	if z := s2.Encode(nil, plain); packCompress && len(z) < len(plain) {
		return append([]byte{packS2}, z...)
	}
	return append([]byte{packPlain}, plain...)
}

// decodePack is the entries of the pack id stored as val (Body aliases val), or
// ErrCorrupt.
func decodePack(id string, val []byte) ([]Record, error) {
	bad := func(what string) ([]Record, error) {
		return nil, fmt.Errorf("%w: pack %q: %s", ErrCorrupt, id, what)
	}
	if len(val) == 0 {
		return bad("empty")
	}
	switch val[0] {
	case packPlain:
		val = val[1:]
	case packS2:
		plain, err := s2.Decode(nil, val[1:])
		if err != nil {
			return bad(err.Error())
		}
		val = plain
	default:
		return bad(fmt.Sprintf("format %d", val[0]))
	}
	n, k := binary.Uvarint(val)
	if k <= 0 || n > uint64(len(val)) {
		return bad("no entry count")
	}
	val = val[k:]
	recs := make([]Record, 0, n)
	field := func() ([]byte, bool) {
		l, k := binary.Uvarint(val)
		if k <= 0 || l > uint64(len(val)-k) {
			return nil, false
		}
		f := val[k : k+int(l)]
		val = val[k+int(l):]
		return f, true
	}
	for i := range int(n) {
		ns, ok1 := field()
		tid, ok2 := field()
		if !ok1 || !ok2 || len(ns) == 0 || len(tid) == 0 || bytes.IndexByte(ns, '/') >= 0 || len(val) < 8 {
			return bad(fmt.Sprintf("entry %d", i))
		}
		v := binary.BigEndian.Uint64(val)
		val = val[8:]
		body, ok := field()
		if !ok {
			return bad(fmt.Sprintf("entry %d's body", i))
		}
		recs = append(recs, Record{Namespace: string(ns), ID: string(tid), Version: v, Body: body,
			Pack: PackRef{ID: id, Index: i}})
	}
	if len(val) != 0 {
		return bad("bytes after the last entry")
	}
	return recs, nil
}

// decodePackDone is the done key of pack id stored as val, or false when val is not in
// the layout.
func decodePackDone(id string, val []byte) (PackDone, bool) {
	if len(val) < 8 {
		return PackDone{}, false
	}
	d := PackDone{ID: id, Done: val[8:]}
	d.Len = 8 * len(d.Done) // whole bytes: the pack's own count is in the pack
	return d, d.count() == int(binary.BigEndian.Uint64(val))
}

// PutPackFenced writes recs, one-shot records (NextDue 0), as pack id, while f holds
// (otherwise ErrFenced, and nothing is written). A pack larger than MaxTxnBytes is split
// into parts, each a pack of its own; every part's ID is id + "." + its number from 0, so
// id must be unique to its writer (a leader's term and a counter, say) and hold neither
// '/' nor '.'. refs[i] is where recs[i] went, errs[i] its outcome: nil, ErrInvalid (a bad
// key, or a NextDue), ErrDuplicate (a key twice in recs), ErrTooLarge, or the error of
// its part's transaction, also returned as err (wrapped in ErrUncertain when it may have
// committed: rewriting the same pack is an idempotent retry). A part whose key holds a
// different pack gets ErrExists.
func (rs *Records) PutPackFenced(ctx context.Context, f Fence, id string, recs []Record) (refs []PackRef, errs []error, err error) {
	if err := checkPackID(id); err != nil {
		return nil, nil, err
	}
	refs, errs = make([]PackRef, len(recs)), make([]error, len(recs))
	type part struct {
		key, val string
		idx      []int // recs' indexes of its entries, in order
	}
	var parts []part
	var cur []int
	var body []byte
	seen := make(map[Key]bool, len(recs))
	limit := rs.maxTxnBytes - len(rs.keys.packs) - len(id) - 2*binary.MaxVarintLen64 // room for the key and count
	flush := func() {
		if len(cur) == 0 {
			return
		}
		pid := id + "." + strconv.Itoa(len(parts))
		plain := append(binary.AppendUvarint(nil, uint64(len(cur))), body...)
		parts = append(parts, part{rs.keys.packs + pid, string(packValue(plain)), cur})
		for j, i := range cur {
			refs[i] = PackRef{ID: pid, Index: j}
		}
		cur, body = nil, nil
	}
	for i := range recs {
		r := &recs[i]
		k := Key{r.Namespace, r.ID}
		switch _, kerr := taskKey(rs.keys.tasks, r.Namespace, r.ID); {
		case kerr != nil:
			errs[i] = kerr
		case r.NextDue != 0:
			errs[i] = fmt.Errorf("%w: %s/%s: a pack holds one-shot records only (NextDue set)", ErrInvalid, r.Namespace, r.ID)
		case seen[k]:
			errs[i] = ErrDuplicate
		case len(r.Namespace)+len(r.ID)+len(r.Body)+packOverhead > limit:
			errs[i] = fmt.Errorf("%w: %s/%s in a pack", ErrTooLarge, r.Namespace, r.ID)
		}
		if errs[i] != nil {
			continue
		}
		seen[k] = true
		if len(body)+len(r.Namespace)+len(r.ID)+len(r.Body)+packOverhead > limit {
			flush()
		}
		body = appendEntry(body, r)
		cur = append(cur, i)
	}
	flush()
	err = rs.txns.each(len(parts), func(pi int) error {
		p := parts[pi]
		resp, err := f.txn(rs.cli.Txn(ctx)).Then(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(p.key), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(p.key, p.val)},
			[]clientv3.Op{clientv3.OpGet(p.key)})).Commit()
		switch {
		case err != nil:
			err = txnFailed(fmt.Sprintf("put pack %s of %d records", p.key, len(p.idx)), err)
		case !f.held(resp):
			err = ErrFenced
		}
		if err != nil {
			for _, i := range p.idx {
				errs[i] = err
			}
			return err
		}
		inner := resp.Responses[0].GetResponseTxn()
		if inner == nil || inner.Succeeded {
			return nil // created
		}
		if get := inner.Responses[0].GetResponseRange(); get != nil && len(get.Kvs) == 1 && string(get.Kvs[0].Value) == p.val {
			return nil // the identical pack: a retry
		}
		for _, i := range p.idx {
			errs[i] = fmt.Errorf("%w: pack %s holds other records", ErrExists, p.key)
		}
		return nil
	})
	return refs, errs, err
}

// packDoneOp writes done value dv at dk, for the pack at pk, if the pack exists and dk
// is absent or holds a lower popcount than pop:
//
//	txn( create(pk) = 0 ? nothing : txn( create(dk) = 0 ? put : txn( value(dk) < be64(pop) ? put : nothing ) ) )
func packDoneOp(pk, dk, dv string, pop uint64) clientv3.Op {
	put := []clientv3.Op{clientv3.OpPut(dk, dv)}
	grow := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(dk), "<", string(header(pop)))}, put, nil)
	write := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(dk), "=", 0)}, put,
		[]clientv3.Op{grow})
	return clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(pk), "=", 0)}, nil,
		[]clientv3.Op{write})
}

// MarkDoneFenced records the ended entries of packs, while f holds (ErrFenced otherwise),
// in as few transactions as MaxTxnOps allows, TxnConcurrency at once: a pack with every
// entry ended is deleted with its done key; one with some is given its done key (if the
// pack is still there and the stored popcount is lower: see the invariants); one with
// none is skipped. An error may leave some transactions committed: marking again, with
// the same or larger bitmaps, is harmless. A mark whose Done is not ⌈Len/8⌉ bytes, or
// whose ID is malformed, is refused with ErrInvalid and nothing is written.
func (rs *Records) MarkDoneFenced(ctx context.Context, f Fence, marks []PackDone) error {
	var txns [][]clientv3.Op
	var ops []clientv3.Op
	room := rs.maxTxnOps
	seen := map[string]bool{} // etcd refuses a transaction that names a key twice
	for i := range marks {
		m := &marks[i]
		if err := checkPackPartID(m.ID); err != nil {
			return err
		}
		if m.Len <= 0 || len(m.Done) != (m.Len+7)/8 {
			return fmt.Errorf("%w: pack %s: %d done bytes for %d entries", ErrInvalid, m.ID, len(m.Done), m.Len)
		}
		pop := m.count()
		if pop == 0 || seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		pk, dk := rs.keys.packs+m.ID, rs.keys.packDone+m.ID
		var add []clientv3.Op
		cost := 2
		if pop >= m.Len {
			add = []clientv3.Op{clientv3.OpDelete(pk), clientv3.OpDelete(dk)}
		} else {
			add = []clientv3.Op{packDoneOp(pk, dk, string(header(uint64(pop)))+string(m.Done), uint64(pop))}
			cost = 1 + packDoneDepth
		}
		if cost > room {
			txns, ops, room = append(txns, ops), nil, rs.maxTxnOps
		}
		ops = append(ops, add...)
		room -= cost
	}
	if len(ops) > 0 {
		txns = append(txns, ops)
	}
	return rs.txns.commitFenced(ctx, f, txns, "mark pack entries done")
}

// checkPackPartID is checkPackID for a part's ID, which holds one '.'.
func checkPackPartID(id string) error {
	base, n, ok := strings.Cut(id, ".")
	if _, err := strconv.Atoi(n); !ok || err != nil || checkPackID(base) != nil {
		return fmt.Errorf("%w: pack part id %q", ErrInvalid, id)
	}
	return nil
}

// PackSet is packs and their done keys as a reader holds them: read at one revision
// (LoadAll), or kept up to date from Follow's changes (Apply), as a standby's mirror
// does. Merge turns it and the records of their own into one record a task.
// Concurrency: none; its owner serialises its use. Entries are never modified once
// stored, so a Clone shares them.
type PackSet struct {
	packs map[string][]Record // pack ID -> its entries (Record.Pack set)
	done  map[string]PackDone // pack ID -> its stored done key, if any (Len counts whole bytes)
}

// NewPackSet is an empty PackSet.
func NewPackSet() *PackSet {
	return &PackSet{packs: map[string][]Record{}, done: map[string]PackDone{}}
}

// Apply applies a change of a pack or a done key, and reports whether c was one.
func (ps *PackSet) Apply(c Change) bool {
	switch c.Kind {
	case PackPut:
		ps.packs[c.PackID] = c.Pack
	case PackDelete:
		delete(ps.packs, c.PackID)
	case PackDonePut:
		ps.done[c.PackID] = c.Done
	case PackDoneDelete:
		delete(ps.done, c.PackID)
	default:
		return false
	}
	return true
}

// Len is the number of packs held.
func (ps *PackSet) Len() int { return len(ps.packs) }

// Clone is a copy of ps that Apply on either does not change in the other.
func (ps *PackSet) Clone() *PackSet {
	c := &PackSet{packs: make(map[string][]Record, len(ps.packs)), done: make(map[string]PackDone, len(ps.done))}
	for id, e := range ps.packs {
		c.packs[id] = e
	}
	for id, d := range ps.done {
		c.done[id] = d
	}
	return c
}

// LoadHooks are what Merge (and LoadAll) report besides the records.
type LoadHooks struct {
	// Stale, if not nil, gets each entry passed over: a lower version of a task than
	// another entry of it (a tie between its own record and a pack entry goes to its own
	// record, between two pack entries to the first pack). The caller ends it: a record
	// of its own with DeleteBatch at its version, a pack entry with MarkDoneFenced.
	Stale func(Record)
	// Pack, if not nil, gets every pack read, with its exact Len and the entries stored
	// as done (a copy the caller may keep and set bits in), before any record is yielded.
	Pack func(PackDone)
}

// Merge calls fn for the one record of each task among own (records of their own) and
// the entries of ps not done: the highest version (see LoadHooks.Stale for ties). own's
// records come first, in their order, then the pack entries, in pack order (ID, index).
// An error from fn stops Merge and is returned.
func (ps *PackSet) Merge(own []Record, fn func(Record) error, h LoadHooks) error {
	stale := func(r Record) {
		if h.Stale != nil {
			h.Stale(r)
		}
	}
	ids := make([]string, 0, len(ps.packs))
	for id := range ps.packs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	live := map[Key]Record{}
	for _, id := range ids {
		entries := ps.packs[id]
		d := NewPackDone(id, len(entries))
		if stored, ok := ps.done[id]; ok {
			copy(d.Done, stored.Done)
		}
		if h.Pack != nil {
			h.Pack(PackDone{ID: id, Len: d.Len, Done: append([]byte(nil), d.Done...)})
		}
		for _, e := range entries {
			if d.IsSet(e.Pack.Index) {
				continue
			}
			k := Key{e.Namespace, e.ID}
			if old, ok := live[k]; ok {
				if old.Version >= e.Version {
					stale(e)
					continue
				}
				stale(old)
			}
			live[k] = e
		}
	}
	for _, r := range own {
		k := Key{r.Namespace, r.ID}
		if e, ok := live[k]; ok {
			if e.Version > r.Version {
				stale(r)
				continue
			}
			stale(e)
			delete(live, k)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	for _, e := range sortedEntries(live) {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// LoadSet reads the records of their own, the packs and their done keys at one
// revision (etcd's now, returned), in pages of LoadPageSize: the raw snapshot that
// LoadAll merges, for a reader that keeps it up to date from Follow (rev+1 on).
func (rs *Records) LoadSet(ctx context.Context) (own []Record, ps *PackSet, rev int64, err error) {
	ps = NewPackSet()
	rev, err = rs.rangeAt(ctx, rs.keys.packDone, 0, func(key, val []byte) error {
		id := strings.TrimPrefix(string(key), rs.keys.packDone)
		if d, ok := decodePackDone(id, val); ok {
			ps.done[id] = d
		}
		return nil
	})
	if err == nil {
		_, err = rs.rangeAt(ctx, rs.keys.packs, rev, func(key, val []byte) error {
			id := strings.TrimPrefix(string(key), rs.keys.packs)
			entries, err := decodePack(id, val)
			ps.packs[id] = entries
			return err
		})
	}
	if err == nil {
		_, err = rs.rangeAt(ctx, rs.keys.tasks, rev, func(key, val []byte) error {
			r, err := rs.keys.decodeRecord(key, val)
			own = append(own, r)
			return err
		})
	}
	return own, ps, rev, err
}

// rangeAt calls fn for every key under prefix at rev (0: now), in pages of
// LoadPageSize, and returns the revision read.
func (rs *Records) rangeAt(ctx context.Context, prefix string, rev int64, fn func(key, val []byte) error) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	start := prefix
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(rs.pageSize))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := rs.cli.Get(ctx, start, opts...)
		if err != nil {
			return rev, fmt.Errorf("store: load from %q: %w", start, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv.Key, kv.Value); err != nil {
				return rev, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// sortedEntries is live's entries in pack order (pack ID, then index).
func sortedEntries(live map[Key]Record) []Record {
	out := make([]Record, 0, len(live))
	for _, r := range live {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Pack, out[j].Pack
		return a.ID < b.ID || a.ID == b.ID && a.Index < b.Index
	})
	return out
}
