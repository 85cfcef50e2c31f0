package task

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// index finds a shard's records, and its retained log's entries, by (namespace, ID). It
// is an open-addressing hash table with linear probing over the keys' 64-bit hashes
// (keyHash), holding each record's slot in shard.slots; a retained entry keeps the slot
// its record had (shard.held names the entry). It exists instead of a Go map because of what this engine does to it:
// a million inserts and as many deletes a second. A map keyed by the two strings hashed
// both strings on every operation, and its deletes leave tombstones that lengthen every
// later probe until the next rehash (matching control groups was the largest single cost
// of a submit-to-success). Here a delete shifts the entries after it back instead
// (backward-shift deletion), so no tombstones exist, a lookup hashes nothing, and the
// entries hold no pointers, so the collector never scans them. Like a Go map it never
// shrinks: its size follows the shard's peak (16 B an entry, at most half of them used).
//
// Invariants (checked by verify):
//   - len(entries) is zero or a power of two, and n (entries in use) is at most
//     len(entries)*maxLoadNum/maxLoadDen.
//   - An entry is in use iff v != 0; it names slot v-1: slots[v-1], whose record has the
//     entry's hash, or, if that is nil, the retained log's live entry held[v-1] - 1
//     (retained.go, which checks it). Each record held is named by exactly one entry.
//   - Linear probing: every entry between an entry's home (hash & mask) and its position,
//     cyclically, is in use. So a lookup may stop at the first free entry.
//
// Distinct keys may share a hash: they sit in the same probe run, and a lookup compares
// the record's (or retained entry's) namespace and ID for each entry of the hash.
type index struct {
	entries []indexEntry
	n       int
}

// indexEntry is one key's entry: v is the slot + 1 of its record, or of its retained
// log entry (retained.go). 0: free.
type indexEntry struct {
	hash uint64
	v    uint64
}

const (
	minIndexLen = 16
	// maxLoadNum/maxLoadDen is the fullest the table gets before it doubles: at 1/2 a
	// lookup that misses probes 2.5 entries on average (Knuth), within a cache line or two.
	maxLoadNum, maxLoadDen = 1, 2
)

// keyHash names (namespace, ID) by 64 bits: its low bits pick the shard, the whole is the
// index key. Cost: two xxhash sums.
func keyHash(ns, id string) uint64 {
	return xxhash.Sum64String(id) ^ xxhash.Sum64String(ns)*0x9E3779B97F4A7C15
}

// shardOf returns the shard of a key hash.
func (e *Engine) shardOf(h uint64) *shard { return &e.shards[h&(numShards-1)] }

// home is where the probe for hash h starts. The low bits pick the shard, so every hash in
// a shard has the same ones: the index takes the bits above them.
func (ix *index) home(h uint64) int { return int(h>>shardBits) & (len(ix.entries) - 1) }

// find returns the record of (ns, id), whose keyHash is h, or nil (also when the key
// names a retained log entry). slots is the shard's slot table. Cost: O(1) expected;
// one probe run.
func (ix *index) find(slots []*record, h uint64, ns, id string) *record {
	rec, _, _ := ix.lookup(slots, nil, nil, h, ns, id)
	return rec
}

// lookup returns the record of (ns, id), whose keyHash is h; or, if the key names an
// entry of the retained log l (nil: none to look at; held is the shard's), that entry
// and its chunk; or neither. Cost: O(1) expected; one probe run.
func (ix *index) lookup(slots []*record, held []uint64, l *retained, h uint64, ns, id string) (*record, *retChunk, *retEntry) {
	if len(ix.entries) == 0 {
		return nil, nil, nil
	}
	mask := len(ix.entries) - 1
	for i := ix.home(h); ; i = (i + 1) & mask {
		en := &ix.entries[i]
		switch {
		case en.v == 0:
			return nil, nil, nil
		case en.hash != h:
		case slots[en.v-1] != nil:
			if rec := slots[en.v-1]; rec.task.ID == id && rec.task.Namespace == ns {
				return rec, nil, nil
			}
		case l != nil:
			if c, re := l.entry(held[en.v-1] - 1); c.is(re, ns, id) {
				return nil, c, re
			}
		}
	}
}

// at returns the position of the entry of hash h and value v, which is in the table.
func (ix *index) at(h, v uint64) int {
	mask := len(ix.entries) - 1
	i := ix.home(h)
	for ix.entries[i].v != v {
		if ix.entries[i].v == 0 {
			panic(fmt.Sprintf("task: index: value %d (hash %x) not found", v, h)) // a broken invariant
		}
		i = (i + 1) & mask
	}
	return i
}

// insert adds an entry for the record in slot, whose hash is h; the caller has checked
// that its key is not in the index. Cost: O(1) expected, O(n) when the table doubles.
func (ix *index) insert(h uint64, slot uint32) { ix.add(h, uint64(slot)+1) }

// add is insert of any value v != 0.
func (ix *index) add(h, v uint64) {
	if (ix.n+1)*maxLoadDen > len(ix.entries)*maxLoadNum {
		ix.grow()
	}
	ix.place(indexEntry{hash: h, v: v})
	ix.n++
}

// place puts en at the first free entry from its home. The table has a free entry.
func (ix *index) place(en indexEntry) {
	mask := len(ix.entries) - 1
	i := ix.home(en.hash)
	for ix.entries[i].v != 0 {
		i = (i + 1) & mask
	}
	ix.entries[i] = en
}

func (ix *index) grow() {
	old := ix.entries
	ix.entries = make([]indexEntry, max(minIndexLen, 2*len(old)))
	for _, en := range old {
		if en.v != 0 {
			ix.place(en)
		}
	}
}

// remove deletes the entry of the record in slot, whose hash is h, and shifts back the
// entries of its probe run that may move closer to their homes, so that no free entry
// separates an entry from its home. Cost: O(1) expected.
func (ix *index) remove(h uint64, slot uint32) { ix.del(h, uint64(slot)+1) }

// del is remove of the entry of value v.
func (ix *index) del(h, v uint64) {
	mask := len(ix.entries) - 1
	i := ix.at(h, v)
	ix.n--
	// i is the hole. An entry further on moves into it unless its home lies cyclically
	// in (i, j]: then it is still reachable from its home without crossing the hole.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		en := ix.entries[j]
		if en.v == 0 {
			break
		}
		k := ix.home(en.hash)
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		ix.entries[i] = en
		i = j
	}
	ix.entries[i] = indexEntry{}
}

// verify checks the invariants above against the shard's slot table and held marks (nil:
// none). Cost: O(entries).
func (ix *index) verify(slots []*record, held []uint64) error {
	vals, err := ix.verifyTable()
	if err != nil {
		return err
	}
	named := make(map[uint32]bool, len(vals))
	used := 0
	for v, h := range vals {
		s := uint32(v - 1)
		if int(s) < len(slots) && slots[s] == nil && int(s) < len(held) && held[s] != 0 {
			continue // a retained entry's: retained.verify checks it
		}
		used++
		if int(s) >= len(slots) || slots[s] == nil {
			return fmt.Errorf("index: an entry names empty slot %d", s)
		}
		named[s] = true
		if slots[s].hash != h {
			return fmt.Errorf("index: the entry of slot %d has hash %x, its record %x", s, h, slots[s].hash)
		}
	}
	records := 0
	seen := make(map[key]bool)
	for s, rec := range slots {
		if rec == nil {
			continue
		}
		records++
		k := key{rec.task.Namespace, rec.task.ID}
		if !named[uint32(s)] {
			return fmt.Errorf("index: %v (slot %d) is not indexed", k, s)
		}
		if seen[k] {
			return fmt.Errorf("index: %v is held twice", k)
		}
		seen[k] = true
	}
	if records != used {
		return fmt.Errorf("index: %d records held, %d indexed", records, used)
	}
	return nil
}

// verifyTable checks the table's own invariants (its length and load, n, probe runs)
// and returns its values, each with its entry's hash; a value held twice is an error.
// Cost: O(entries).
func (ix *index) verifyTable() (map[uint64]uint64, error) {
	if l := len(ix.entries); l != 0 && (l&(l-1) != 0 || l < minIndexLen) {
		return nil, fmt.Errorf("index: %d entries, not a power of two >= %d", l, minIndexLen)
	}
	if ix.n*maxLoadDen > len(ix.entries)*maxLoadNum {
		return nil, fmt.Errorf("index: %d in use of %d entries: over the maximum load", ix.n, len(ix.entries))
	}
	mask := len(ix.entries) - 1
	vals := make(map[uint64]uint64)
	for i, en := range ix.entries {
		if en.v == 0 {
			continue
		}
		if _, dup := vals[en.v]; dup {
			return nil, fmt.Errorf("index: value %d held twice", en.v)
		}
		vals[en.v] = en.hash
		for k := ix.home(en.hash); k != i; k = (k + 1) & mask {
			if ix.entries[k].v == 0 {
				return nil, fmt.Errorf("index: entry %d (home %d) is cut off by free entry %d", i, ix.home(en.hash), k)
			}
		}
	}
	if len(vals) != ix.n {
		return nil, fmt.Errorf("index: %d entries in use, n says %d", len(vals), ix.n)
	}
	return vals, nil
}

// verify checks each shard's table: its index, its free slots, its count, and that every
// record's hash is its key's and picks this shard; and that the payload bytes counted
// (Options.MaxPayloadBytes) are those the records hold; then the concurrency keys and
// the workflows. Cost: O(records); tests call it.
func (e *Engine) verify() error {
	var payloads int64
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		err := sh.verify()
		for _, rec := range sh.slots {
			if rec != nil {
				payloads += int64(len(rec.task.Payload))
			}
		}
		if err == nil {
			var retained int64
			retained, err = sh.ret.verify(sh)
			payloads += retained
		}
		sh.mu.Unlock()
		if err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
	}
	// Exact only while no Submit runs (it counts a payload before inserting its record).
	if held := e.payloads.Load(); held != payloads {
		return fmt.Errorf("payload bytes held: counter %d, records %d", held, payloads)
	}
	if err := e.verifyKeys(); err != nil {
		return err
	}
	if err := e.verifyShards(); err != nil {
		return err
	}
	return e.verifyDAG()
}

// verify checks one shard's table. Requires sh.mu.
func (sh *shard) verify() error {
	free := make(map[uint32]bool, len(sh.free))
	for _, s := range sh.free {
		if int(s) >= len(sh.slots) || sh.slots[s] != nil || free[s] {
			return fmt.Errorf("free slot %d: out of range, in use or listed twice", s)
		}
		free[s] = true
	}
	held := 0
	if len(sh.held) != len(sh.slots) {
		return fmt.Errorf("%d slots, %d held marks", len(sh.slots), len(sh.held))
	}
	for s, rec := range sh.slots {
		switch {
		case rec == nil && sh.held[s] != 0:
			if free[uint32(s)] {
				return fmt.Errorf("slot %d is free but holds retained entry %d", s, sh.held[s]-1)
			}
			continue
		case rec == nil:
			if !free[uint32(s)] {
				return fmt.Errorf("slot %d is empty but not free", s)
			}
			continue
		case sh.held[s] != 0:
			return fmt.Errorf("slot %d holds a record and retained entry %d", s, sh.held[s]-1)
		}
		held++
		if rec.slot != uint32(s) {
			return fmt.Errorf("slot %d holds a record that names slot %d", s, rec.slot)
		}
		if h := keyHash(rec.task.Namespace, rec.task.ID); rec.hash != h || h&(numShards-1) != sh.idx {
			return fmt.Errorf("%s/%s: hash %x in shard %d, want %x", rec.task.Namespace, rec.task.ID, rec.hash, sh.idx, h)
		}
	}
	if held+sh.ret.live != sh.tasks {
		return fmt.Errorf("%d records held and %d retained, tasks counts %d", held, sh.ret.live, sh.tasks)
	}
	return sh.index.verify(sh.slots, sh.held)
}
