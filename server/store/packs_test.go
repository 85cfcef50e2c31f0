package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// mustPutPack writes recs as pack id under f, failing the test if any is refused, and
// returns where each went.
func mustPutPack(t *testing.T, s *Store, f Fence, id string, recs []Record) []PackRef {
	t.Helper()
	refs, errs, err := s.Records().PutPackFenced(ctxT(t), f, id, recs)
	if err != nil {
		t.Fatalf("put pack %s: %v", id, err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("pack %s record %d: %v", id, i, e)
		}
	}
	return refs
}

// keysUnder counts the keys etcd holds under the store's prefix + under.
func keysUnder(t *testing.T, s *Store, under string) int64 {
	t.Helper()
	resp, err := s.cli.Get(ctxT(t), s.keys.prefix+under, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// loadWithStale is LoadAll into a map by "ns/id", with the stale entries listed.
func loadWithStale(t *testing.T, s *Store) (map[string]Record, []Record) {
	t.Helper()
	got := map[string]Record{}
	var stale []Record
	_, err := s.Records().LoadAll(ctxT(t), func(r Record) error {
		k := r.Namespace + "/" + r.ID
		if _, dup := got[k]; dup {
			t.Fatalf("load yields %s twice", k)
		}
		got[k] = r
		return nil
	}, LoadHooks{Stale: func(r Record) { stale = append(stale, r) }})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return got, stale
}

// doneOf is the PackDone of the pack part refs[0] is in, with the entries of recs
// indexes set.
func doneOf(refs []PackRef, n int, idx ...int) PackDone {
	d := NewPackDone(refs[0].ID, n)
	for _, i := range idx {
		d.Set(refs[i].Index)
	}
	return d
}

// A pack whose every entry is marked done leaves no key behind, in the marks' rounds
// (as a deleter records ends as they come); until then Load yields the entries not done.
func TestPackFullyDoneLeavesNoKey(t *testing.T) {
	s := openEmbedded(t, Options{})
	f := mustCampaign(t, s).Fence()
	recs := numbered("a", "t", 10, 1)
	refs := mustPutPack(t, s, f, "p1", recs)
	if n := keysUnder(t, s, "packs/"); n != 1 {
		t.Fatalf("%d pack keys for one pack of 10", n)
	}
	if n := keysUnder(t, s, "tasks/"); n != 0 {
		t.Fatalf("%d record keys written for a pack", n)
	}
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{doneOf(refs, 10, 0, 1, 2)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := loadWithStale(t, s); len(got) != 7 {
		t.Fatalf("after 3 of 10 done, load yields %d", len(got))
	}
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{doneOf(refs, 10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)}); err != nil {
		t.Fatal(err)
	}
	if n, d := keysUnder(t, s, "packs/"), keysUnder(t, s, "packdone/"); n != 0 || d != 0 {
		t.Fatalf("after every entry is done: %d pack keys, %d done keys, want none", n, d)
	}
	if got, stale := loadWithStale(t, s); len(got) != 0 || len(stale) != 0 {
		t.Fatalf("load after the pack is done: %v, stale %v", got, stale)
	}
}

// A partly done pack loaded (as at a takeover) yields exactly the entries not done, with
// their bodies and versions and where each is, beside the records of their own.
func TestPartlyDonePackLoadsTheRest(t *testing.T) {
	s := openEmbedded(t, Options{})
	f := mustCampaign(t, s).Fence()
	recs := numbered("a", "t", 12, 3)
	refs := mustPutPack(t, s, f, "p1", recs)
	mustPut(t, s, Record{Namespace: "b", ID: "own", Version: 1, Body: []byte("own")})
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{doneOf(refs, 12, 0, 3, 7, 11)}); err != nil {
		t.Fatal(err)
	}
	got, stale := loadWithStale(t, s)
	var packs []PackDone
	if _, err := s.Records().LoadAll(ctxT(t), func(Record) error { return nil }, LoadHooks{Pack: func(d PackDone) { packs = append(packs, d) }}); err != nil {
		t.Fatal(err)
	}
	if len(packs) != 1 || packs[0].ID != "p1.0" || packs[0].Len != 12 || packs[0].count() != 4 || !packs[0].IsSet(7) || packs[0].IsSet(8) {
		t.Fatalf("packs reported: %+v, want p1.0 of 12 with 0, 3, 7, 11 done", packs)
	}
	var ids []string
	for k, r := range got {
		ids = append(ids, k)
		if k == "b/own" {
			if r.Pack != (PackRef{}) {
				t.Fatalf("a record of its own loaded as a pack entry: %+v", r)
			}
			continue
		}
		if r.Version != 3 || string(r.Body) != r.ID || r.Pack.ID != "p1.0" || recs[r.Pack.Index].ID != r.ID {
			t.Fatalf("entry %s loaded as %+v", k, r)
		}
	}
	sort.Strings(ids)
	want := "[a/t1 a/t10 a/t2 a/t4 a/t5 a/t6 a/t8 a/t9 b/own]"
	if fmt.Sprint(ids) != want || len(stale) != 0 {
		t.Fatalf("loaded %v (stale %v), want %s", ids, stale, want)
	}
}

// A task split out of its pack (recorded on its own: a retry's new attempt, a cancel,
// a replacement) loads once, as its own record, and the pack entry it leaves is stale
// until marked done; a pack entry of a higher version than a record of its own wins.
func TestSplitOutEntryLoadsOnce(t *testing.T) {
	s := openEmbedded(t, Options{})
	f := mustCampaign(t, s).Fence()
	refs := mustPutPack(t, s, f, "p1", []Record{
		{Namespace: "a", ID: "same", Version: 2, Body: []byte("pack")},
		{Namespace: "a", ID: "older", Version: 2, Body: []byte("pack")},
		{Namespace: "a", ID: "newer", Version: 2, Body: []byte("pack")},
		{Namespace: "a", ID: "alone", Version: 2, Body: []byte("pack")},
	})
	mustPut(t, s,
		Record{Namespace: "a", ID: "same", Version: 2, Body: []byte("own")},  // split out at its version
		Record{Namespace: "a", ID: "older", Version: 3, Body: []byte("own")}, // replaced by a later submit
		Record{Namespace: "a", ID: "newer", Version: 1, Body: []byte("own")}) // the pack replaced it
	got, stale := loadWithStale(t, s)
	want := map[string]string{"a/same": "own", "a/older": "own", "a/newer": "pack", "a/alone": "pack"}
	if len(got) != len(want) {
		t.Fatalf("loaded %v", got)
	}
	for k, body := range want {
		if string(got[k].Body) != body {
			t.Fatalf("%s loaded as %+v, want its %s record", k, got[k], body)
		}
	}
	staleOf := map[string]Record{}
	for _, r := range stale {
		staleOf[r.ID] = r
	}
	if len(stale) != 3 || staleOf["same"].Pack != refs[0] || staleOf["older"].Pack != refs[1] ||
		staleOf["newer"].Pack != (PackRef{}) || staleOf["newer"].Version != 1 {
		t.Fatalf("stale %+v", stale)
	}
	// The caller ends what is stale: the pack entries done, the record deleted.
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{doneOf(refs, 4, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Records().DeleteBatchFenced(ctxT(t), f, []Versioned{{Key{"a", "newer"}, 1}}); err != nil {
		t.Fatal(err)
	}
	if got, stale := loadWithStale(t, s); len(got) != 4 || len(stale) != 0 || string(got["a/newer"].Body) != "pack" {
		t.Fatalf("after ending the stale: %v, stale %v", got, stale)
	}
}

// A deposed leader's done marks and packs are refused (fenced): nothing it writes after
// its term lands, and the next leader loads every entry it did not end in its term.
func TestPackWritesAreFenced(t *testing.T) {
	s := openEmbedded(t, Options{})
	l := mustCampaign(t, s)
	f := l.Fence()
	refs := mustPutPack(t, s, f, "p1", numbered("a", "t", 4, 1))
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{doneOf(refs, 4, 0)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Resign(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{doneOf(refs, 4, 0, 1)}); !errors.Is(err, ErrFenced) {
		t.Fatalf("done mark after the term: %v, want ErrFenced", err)
	}
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{doneOf(refs, 4, 0, 1, 2, 3)}); !errors.Is(err, ErrFenced) {
		t.Fatalf("final done mark after the term: %v, want ErrFenced", err)
	}
	if _, errs, err := s.Records().PutPackFenced(ctxT(t), f, "p2", numbered("a", "u", 2, 1)); !errors.Is(err, ErrFenced) || !errors.Is(errs[0], ErrFenced) {
		t.Fatalf("pack put after the term: %v %v, want ErrFenced", err, errs)
	}
	if got, _ := loadWithStale(t, s); len(got) != 3 || got["a/t0"].ID != "" {
		t.Fatalf("after the deposed leader's writes: %v, want a/t1..t3", got)
	}
}

// Done marks only grow: a smaller bitmap landing after a larger one (two writes of one
// writer in flight at once) changes nothing, and a mark that lands after its pack was
// deleted leaves no done key behind.
func TestPackDoneNeverShrinks(t *testing.T) {
	s := openEmbedded(t, Options{})
	f := mustCampaign(t, s).Fence()
	refs := mustPutPack(t, s, f, "p1", numbered("a", "t", 5, 1))
	for _, d := range []PackDone{doneOf(refs, 5, 0, 1, 2), doneOf(refs, 5, 0), doneOf(refs, 5, 1, 2)} {
		if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{d}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := loadWithStale(t, s); len(got) != 2 || got["a/t3"].ID == "" || got["a/t4"].ID == "" {
		t.Fatalf("after done marks {0,1,2}, {0}, {1,2}: %v, want a/t3 and a/t4", got)
	}
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{doneOf(refs, 5, 0, 1, 2, 3, 4)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{doneOf(refs, 5, 0, 1, 2, 3)}); err != nil {
		t.Fatal(err)
	}
	if n, d := keysUnder(t, s, "packs/"), keysUnder(t, s, "packdone/"); n != 0 || d != 0 {
		t.Fatalf("a late mark after the pack's end: %d pack keys, %d done keys, want none", n, d)
	}
}

// A pack larger than MaxTxnBytes is split into parts, each its own key and done key;
// marks over several parts go in one transaction.
func TestPackSplitsByBytes(t *testing.T) {
	s := openEmbedded(t, Options{MaxTxnBytes: 4096})
	f := mustCampaign(t, s).Fence()
	recs := numbered("a", "t", 60, 1)
	for i := range recs {
		recs[i].Body = make([]byte, 200)
	}
	refs := mustPutPack(t, s, f, "big", recs)
	parts := map[string]int{}
	for _, r := range refs {
		parts[r.ID]++
	}
	if len(parts) < 3 || keysUnder(t, s, "packs/") != int64(len(parts)) {
		t.Fatalf("60 records of 200 bytes in 4 KiB transactions: parts %v", parts)
	}
	if got, _ := loadWithStale(t, s); len(got) != 60 {
		t.Fatalf("load yields %d of 60", len(got))
	}
	var marks []PackDone
	for id, n := range parts {
		d := NewPackDone(id, n)
		for i := range n {
			d.Set(i)
		}
		marks = append(marks, d)
	}
	if err := s.Records().MarkDoneFenced(ctxT(t), f, marks); err != nil {
		t.Fatal(err)
	}
	if n := keysUnder(t, s, "pack"); n != 0 {
		t.Fatalf("%d pack keys left after every part is done", n)
	}
}

// Writing a pack again is an idempotent retry; another pack under its ID is refused, and
// so are records a pack cannot hold.
func TestPackPutOutcomes(t *testing.T) {
	s := openEmbedded(t, Options{})
	f := mustCampaign(t, s).Fence()
	recs := numbered("a", "t", 3, 1)
	mustPutPack(t, s, f, "p1", recs)
	mustPutPack(t, s, f, "p1", recs)
	_, errs, err := s.Records().PutPackFenced(ctxT(t), f, "p1", numbered("a", "u", 3, 1))
	if err != nil || !errors.Is(errs[0], ErrExists) {
		t.Fatalf("another pack under p1: %v %v, want ErrExists", err, errs)
	}
	_, errs, err = s.Records().PutPackFenced(ctxT(t), f, "p2", []Record{
		{Namespace: "a", ID: "ok", Version: 1},
		{Namespace: "a/b", ID: "x", Version: 1},
		{Namespace: "a", ID: "ok", Version: 2},
		{Namespace: "a", ID: "every", Version: 1, NextDue: 5},
	})
	if err != nil || errs[0] != nil || !errors.Is(errs[1], ErrInvalid) || !errors.Is(errs[2], ErrDuplicate) || !errors.Is(errs[3], ErrInvalid) {
		t.Fatalf("mixed pack: %v %v", err, errs)
	}
	for _, id := range []string{"", "a/b", "a.b"} {
		if _, _, err := s.Records().PutPackFenced(ctxT(t), f, id, recs); !errors.Is(err, ErrInvalid) {
			t.Fatalf("pack id %q: %v, want ErrInvalid", id, err)
		}
	}
	if err := s.Records().MarkDoneFenced(ctxT(t), f, []PackDone{{ID: "p2.0", Len: 9, Done: []byte{1}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bitmap of the wrong size: %v, want ErrInvalid", err)
	}
	if got, _ := loadWithStale(t, s); len(got) != 4 {
		t.Fatalf("loaded %v", got)
	}
}

// Follow decodes packs and their done keys.
func TestFollowPacks(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	f := mustCampaign(t, s).Fence()
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan Change, 16)
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Follow(fctx, rev+1, func(c Change) { changes <- c }) }()
	refs := mustPutPack(t, s, f, "p1", numbered("a", "t", 3, 1))
	for _, d := range []PackDone{doneOf(refs, 3, 1), doneOf(refs, 3, 0, 1, 2)} {
		if err := s.Records().MarkDoneFenced(ctx, f, []PackDone{d}); err != nil {
			t.Fatal(err)
		}
	}
	next := func() Change {
		select {
		case c := <-changes:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("change not seen")
			return Change{}
		}
	}
	if c := next(); c.Kind != PackPut || c.PackID != "p1.0" || len(c.Pack) != 3 || c.Pack[2].ID != "t2" || c.Pack[2].Pack.Index != 2 {
		t.Fatalf("first change %+v, want the pack", c)
	}
	if c := next(); c.Kind != PackDonePut || c.PackID != "p1.0" || c.Done.IsSet(0) || !c.Done.IsSet(1) {
		t.Fatalf("second change %+v, want entry 1 done", c)
	}
	c1, c2 := next(), next()
	if c1.Rev != c2.Rev || c1.Kind != PackDelete || c2.Kind != PackDoneDelete {
		t.Fatalf("last changes %+v, %+v: want the pack and its done key deleted at one revision", c1, c2)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A pack is stored compressed when that is smaller, plain otherwise; both load the same,
// and an unknown format is refused as corrupt.
func TestPackFormats(t *testing.T) {
	s := openEmbedded(t, Options{})
	f := mustCampaign(t, s).Fence()
	recs := numbered("a", "t", 50, 1)
	for i := range recs {
		recs[i].Body = []byte(fmt.Sprintf("the same type, the same retry policy, payload %d", i))
	}
	mustPutPack(t, s, f, "z", recs)
	packCompress = false
	mustPutPack(t, s, f, "p", numbered("b", "t", 50, 1))
	packCompress = true
	formats := map[string]byte{}
	resp, err := s.cli.Get(ctxT(t), s.keys.packs, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		formats[string(kv.Key)] = kv.Value[0]
	}
	if formats[s.keys.packs+"z.0"] != packS2 || formats[s.keys.packs+"p.0"] != packPlain {
		t.Fatalf("formats %v: want z.0 compressed, p.0 plain", formats)
	}
	got, _ := loadWithStale(t, s)
	if len(got) != 100 || string(got["a/t7"].Body) != string(recs[7].Body) || string(got["b/t9"].Body) != "t9" {
		t.Fatalf("loaded %d records; a/t7 %q, b/t9 %q", len(got), got["a/t7"].Body, got["b/t9"].Body)
	}
	if _, err := decodePack("x", []byte{7, 0}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("format 7: %v, want ErrCorrupt", err)
	}
}
