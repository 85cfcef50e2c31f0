package task

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// testTable is a slot table and its index, as a shard keeps them: add puts a record of
// (ns, id) under hash h into a free slot and indexes it, drop does the reverse.
type testTable struct {
	ix    index
	slots []*record
	free  []uint32
}

func (tt *testTable) add(h uint64, ns, id string) *record {
	rec := &record{task: Task{Namespace: ns, ID: id}, hash: h}
	if n := len(tt.free); n > 0 {
		rec.slot = tt.free[n-1]
		tt.free = tt.free[:n-1]
		tt.slots[rec.slot] = rec
	} else {
		rec.slot = uint32(len(tt.slots))
		tt.slots = append(tt.slots, rec)
	}
	tt.ix.insert(h, rec.slot)
	return rec
}

func (tt *testTable) drop(rec *record) {
	tt.ix.remove(rec.hash, rec.slot)
	tt.slots[rec.slot] = nil
	tt.free = append(tt.free, rec.slot)
}

// collidingHash returns a hash whose probe starts at home (in any table of more than
// home entries) and whose full value is one of a few, so that distinct keys share it.
func collidingHash(rng *rand.Rand, homes int) uint64 {
	return uint64(rng.IntN(homes))<<shardBits | uint64(rng.IntN(2))<<40
}

// TestIndexChurn inserts and removes keys whose hashes crowd a few homes (long probe runs,
// runs that wrap past the table's end, distinct keys of equal hash), through several
// doublings, checking after every change that verify holds, that every live key is found
// and that recently removed keys are not.
func TestIndexChurn(t *testing.T) {
	for _, homes := range []int{1, 3, 16, 64} {
		t.Run(fmt.Sprint("homes=", homes), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(homes), 2))
			tt := &testTable{}
			live := map[key]*record{}
			var dropped []*record
			check := func(step int) {
				t.Helper()
				if err := tt.ix.verify(tt.slots, nil); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				for k, rec := range live {
					if got := tt.ix.find(tt.slots, rec.hash, k.ns, k.id); got != rec {
						t.Fatalf("step %d: find %v = %p, want %p", step, k, got, rec)
					}
				}
				for _, rec := range dropped[max(0, len(dropped)-20):] {
					k := key{rec.task.Namespace, rec.task.ID}
					if _, ok := live[k]; ok {
						continue
					}
					if got := tt.ix.find(tt.slots, rec.hash, k.ns, k.id); got != nil {
						t.Fatalf("step %d: removed %v still found", step, k)
					}
				}
			}
			for i := 0; i < 600; i++ {
				// Grow to ~120 keys, then shrink: removals outnumber adds late on.
				if p := map[bool]int{true: 3, false: 2}[i < 360]; len(live) > 0 && rng.IntN(p) == 0 {
					for k, rec := range live { // map order: a random victim
						tt.drop(rec)
						delete(live, k)
						dropped = append(dropped, rec)
						break
					}
				} else {
					k := key{fmt.Sprint("ns", rng.IntN(2)), fmt.Sprint("id", i)}
					live[k] = tt.add(collidingHash(rng, homes), k.ns, k.id)
				}
				check(i)
			}
			for k, rec := range live {
				tt.drop(rec)
				delete(live, k)
			}
			check(-1)
			if tt.ix.n != 0 {
				t.Fatalf("%d entries in use after every record was removed", tt.ix.n)
			}
		})
	}
}

// TestIndexRemoveWrapped removes each entry in turn from a probe run that wraps past the
// table's end: the cases where backward shifting must compare homes cyclically.
func TestIndexRemoveWrapped(t *testing.T) {
	for victim := 0; victim < 6; victim++ {
		tt := &testTable{}
		var recs []*record
		// A 16-entry table (6 of 16 keeps it under half full); homes 14, 14, 15, 15, 0, 1:
		// the run covers 14, 15, 0, 1, 2, 3.
		for i, home := range []uint64{14, 14, 15, 15, 0, 1} {
			recs = append(recs, tt.add(home<<shardBits, "n", fmt.Sprint(i)))
		}
		if len(tt.ix.entries) != 16 {
			t.Fatalf("table of %d entries, want 16", len(tt.ix.entries))
		}
		tt.drop(recs[victim])
		if err := tt.ix.verify(tt.slots, nil); err != nil {
			t.Fatalf("removing %d: %v", victim, err)
		}
		for i, rec := range recs {
			got := tt.ix.find(tt.slots, rec.hash, "n", rec.task.ID)
			if want := map[bool]*record{true: nil, false: rec}[i == victim]; got != want {
				t.Fatalf("removing %d: find %d = %p, want %p", victim, i, got, want)
			}
		}
	}
}

// TestIndexVerifyCatches breaks the index in the ways verify must notice.
func TestIndexVerifyCatches(t *testing.T) {
	for name, corrupt := range map[string]func(tt *testTable, a, b *record){
		"unindexed record": func(tt *testTable, a, b *record) { tt.ix.remove(a.hash, a.slot) },
		"cut-off run": func(tt *testTable, a, b *record) {
			tt.ix.entries[a.hash>>shardBits] = indexEntry{} // a's home: b sits after it
			tt.ix.n--
		},
		"count":         func(tt *testTable, a, b *record) { tt.ix.n++ },
		"wrong hash":    func(tt *testTable, a, b *record) { a.hash++ },
		"duplicate key": func(tt *testTable, a, b *record) { a.task.ID = b.task.ID },
		"empty slot":    func(tt *testTable, a, b *record) { tt.slots[a.slot] = nil },
	} {
		tt := &testTable{}
		a, b := tt.add(5<<shardBits, "n", "a"), tt.add(5<<shardBits, "n", "b") // one run: a, b
		if err := tt.ix.verify(tt.slots, nil); err != nil {
			t.Fatalf("%s: before corrupting: %v", name, err)
		}
		corrupt(tt, a, b)
		if tt.ix.verify(tt.slots, nil) == nil {
			t.Errorf("%s: verify found nothing", name)
		}
	}
}
