package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

const wait = 10 * time.Second // bound on any single etcd step in these tests

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func openEmbedded(t testing.TB, o Options) *Store {
	t.Helper()
	o.Embedded = t.TempDir()
	o.EmbeddedTick = 10 * time.Millisecond
	o.EmbeddedElection = 100 * time.Millisecond
	o.EmbeddedLog = zap.NewNop() // etcd logs its own shutdown as errors
	if o.Node == "" {
		o.Node = "n1"
	}
	s, err := Open(ctxT(t), WithOptions(o))
	if err != nil {
		t.Fatalf("open embedded etcd: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openPeer(t *testing.T, first *Store, node string, o Options) *Store {
	t.Helper()
	co := first.ClientOptions()
	o.Endpoints, o.Username, o.Password, o.TLS = co.Endpoints, co.Username, co.Password, co.TLS
	o.Node = node
	s, err := Open(ctxT(t), WithOptions(o))
	if err != nil {
		t.Fatalf("open second store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// mustPut puts each record in turn, failing the test at the first error.
func mustPut(t *testing.T, s *Store, recs ...Record) {
	t.Helper()
	for _, r := range recs {
		if err := s.Records().Put(ctxT(t), r); err != nil {
			t.Fatalf("put %s/%s at version %d: %v", r.Namespace, r.ID, r.Version, err)
		}
	}
}

// mustPutBatch writes recs with one PutBatch, failing the test if any is refused.
func mustPutBatch(t *testing.T, s *Store, recs []Record) {
	t.Helper()
	errs, err := s.Records().PutBatch(ctxT(t), recs)
	if err != nil {
		t.Fatalf("put batch: %v", err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("record %d: %v", i, e)
		}
	}
}

// numbered returns n records ns/prefix0 ... ns/prefix(n-1) at version v, each with its
// ID as its body.
func numbered(ns, prefix string, n int, v uint64) []Record {
	recs := make([]Record, n)
	for i := range recs {
		id := fmt.Sprint(prefix, i)
		recs[i] = Record{Namespace: ns, ID: id, Version: v, Body: []byte(id)}
	}
	return recs
}

// mustCampaign makes s the leader, failing the test if it cannot.
func mustCampaign(t *testing.T, s *Store) *Leadership {
	t.Helper()
	l, err := s.Election().Campaign(ctxT(t))
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	return l
}

// sessionOf returns the session s campaigns with now.
func sessionOf(s *Store) *concurrency.Session {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	return s.sessions.cur.sess
}

func loadAll(t *testing.T, s *Store) (map[string]Record, int64) {
	t.Helper()
	got := map[string]Record{}
	rev, err := s.Records().Load(ctxT(t), func(r Record) error {
		got[r.Namespace+"/"+r.ID] = r
		return nil
	})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return got, rev
}

func TestPutLoadRoundTrip(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	in := []Record{
		{Namespace: "a", ID: "1", Version: 1, Body: []byte("one")},
		{Namespace: "a", ID: "x/y", Version: 7, Body: nil},
		{Namespace: "b", ID: "1", Version: 2, Body: []byte{0, 1, 2}},
	}
	mustPut(t, s, in...)
	got, rev := loadAll(t, s)
	if rev <= 0 || len(got) != len(in) {
		t.Fatalf("load: rev %d, %d records, want >0 and %d", rev, len(got), len(in))
	}
	for _, r := range in {
		g := got[r.Namespace+"/"+r.ID]
		if g.Version != r.Version || string(g.Body) != string(r.Body) {
			t.Fatalf("loaded %+v, want %+v", g, r)
		}
	}
	for range 2 { // the second time, nothing to delete: no error either
		if err := s.Records().DeleteBatch(ctx, []Versioned{{Key{"a", "1"}, 1}}); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
	if got, _ := loadAll(t, s); len(got) != 2 {
		t.Fatalf("after delete: %d records, want 2", len(got))
	}
	// A batch of deletes: present, absent and repeated keys, over several transactions.
	var many []Record
	var keys []Versioned
	for i := range 300 {
		many = append(many, Record{Namespace: "m", ID: fmt.Sprint(i), Version: 1, Body: []byte("x")})
		keys = append(keys, Versioned{Key{"m", fmt.Sprint(i)}, 1}, Versioned{Key{"m", fmt.Sprint(i)}, 1})
	}
	if errs, err := s.Records().PutBatch(ctx, many); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("put 300: %v %v", err, errors.Join(errs...))
	}
	if err := s.Records().DeleteBatch(ctx, append(keys, Versioned{Key{"m", "absent"}, 1})); err != nil {
		t.Fatalf("DeleteBatch: %v", err)
	}
	if got, _ := loadAll(t, s); len(got) != 2 {
		t.Fatalf("after DeleteBatch: %d records, want the 2 others", len(got))
	}
	for _, bad := range []Record{{Namespace: "", ID: "1"}, {Namespace: "a/b", ID: "1"}, {Namespace: "a", ID: ""}} {
		if err := s.Records().Put(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("put %+v: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestVersions(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	r := Record{Namespace: "ns", ID: "t", Version: 5, Body: []byte("v5")}
	if err := s.Records().Put(ctx, r); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := s.Records().Put(ctx, r); err != nil {
		t.Fatalf("identical rewrite must be idempotent: %v", err)
	}
	for _, v := range []uint64{5, 4, 0} {
		other := Record{Namespace: "ns", ID: "t", Version: v, Body: []byte("other")}
		if err := s.Records().Put(ctx, other); !errors.Is(err, ErrExists) {
			t.Fatalf("put version %d over 5: %v, want ErrExists", v, err)
		}
	}
	// 256 > 5 numerically, and its first byte differs: checks the header order.
	for _, v := range []uint64{6, 256, 1 << 40} {
		if err := s.Records().Put(ctx, Record{Namespace: "ns", ID: "t", Version: v, Body: []byte("new")}); err != nil {
			t.Fatalf("replace with version %d: %v", v, err)
		}
	}
	got, _ := loadAll(t, s)
	if g := got["ns/t"]; g.Version != 1<<40 || string(g.Body) != "new" {
		t.Fatalf("stored %+v, want version 1<<40", g)
	}
}

func TestConcurrentCreateOneWins(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	const n = 8
	errc := make(chan error, n)
	for i := range n {
		go func() {
			errc <- s.Records().Put(ctx, Record{Namespace: "ns", ID: "race", Version: 1, Body: fmt.Appendf(nil, "writer %d", i)})
		}()
	}
	wins := 0
	for range n {
		err := <-errc
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, ErrExists):
			t.Fatalf("concurrent create: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d concurrent creates succeeded, want exactly 1", wins)
	}
}

func TestPutBatchAndPagedLoad(t *testing.T) {
	s := openEmbedded(t, Options{LoadPageSize: 300})
	ctx := ctxT(t)
	recs := make([]Record, 1000)
	for i := range recs {
		recs[i] = Record{Namespace: fmt.Sprintf("ns%d", i%3), ID: fmt.Sprintf("task-%04d", i), Version: 1, Body: fmt.Appendf(nil, "body %d", i)}
	}
	start := time.Now()
	mustPutBatch(t, s, recs)
	t.Logf("1000 records in %v", time.Since(start))
	pages, last := 0, ""
	if _, err := s.Records().Load(ctx, func(r Record) error {
		if k := r.Namespace + "/" + r.ID; k <= last {
			return fmt.Errorf("key %q after %q: not in order", k, last)
		} else {
			last = k
		}
		pages++
		return nil
	}); err != nil || pages != len(recs) {
		t.Fatalf("ordered load: %d records, %v", pages, err)
	}
	got, rev := loadAll(t, s)
	if len(got) != len(recs) {
		t.Fatalf("loaded %d records, want %d (page size 300, so >1 page)", len(got), len(recs))
	}
	for _, r := range recs {
		if g := got[r.Namespace+"/"+r.ID]; string(g.Body) != string(r.Body) {
			t.Fatalf("record %s/%s: got %q, want %q", r.Namespace, r.ID, g.Body, r.Body)
		}
	}
	// The revision is a snapshot: a write after Load is above it.
	mustPut(t, s, Record{Namespace: "late", ID: "1", Version: 1})
	if _, rev2 := loadAll(t, s); rev2 <= rev {
		t.Fatalf("revision after a write %d, want > %d", rev2, rev)
	}

	// Duplicates, conflicts and new records mixed in one batch.
	mixed := []Record{recs[0], {Namespace: "ns1", ID: "task-0001", Version: 1, Body: []byte("other")}, {Namespace: "new", ID: "1", Version: 1}, {Namespace: "new", ID: "1", Version: 2}, {Namespace: "bad/ns", ID: "1"}}
	errs, err := s.Records().PutBatch(ctx, mixed)
	if err != nil {
		t.Fatal(err)
	}
	want := []error{nil, ErrExists, nil, ErrDuplicate, ErrInvalid}
	for i := range want {
		if (want[i] == nil) != (errs[i] == nil) || (want[i] != nil && !errors.Is(errs[i], want[i])) {
			t.Fatalf("mixed batch record %d: %v, want %v", i, errs[i], want[i])
		}
	}
}

func TestBatchSplitsByBytes(t *testing.T) {
	s := openEmbedded(t, Options{MaxTxnBytes: 4096})
	ctx := ctxT(t)
	recs := make([]Record, 20)
	for i := range recs {
		recs[i] = Record{Namespace: "big", ID: fmt.Sprint(i), Version: 1, Body: make([]byte, 1000)}
	}
	recs = append(recs, Record{Namespace: "big", ID: "huge", Version: 1, Body: make([]byte, 5000)})
	errs, err := s.Records().PutBatch(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs[:20] {
		if e != nil {
			t.Fatalf("record %d: %v", i, e)
		}
	}
	if !errors.Is(errs[20], ErrTooLarge) {
		t.Fatalf("oversized record: %v, want ErrTooLarge", errs[20])
	}
	if got, _ := loadAll(t, s); len(got) != 20 {
		t.Fatalf("loaded %d, want 20", len(got))
	}
}

// Run locks: put, replaced by a later run, deleted only by the run they name, listed.
func TestRunLocks(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	if err := s.Locks().Put(ctx, "a", "x", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Locks().Put(ctx, "a", "y", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Locks().Put(ctx, "a", "x", 3); err != nil { // a later run of x
		t.Fatal(err)
	}
	if err := s.Locks().Delete(ctx, "a", "x", 1); err != nil { // the earlier run's unlock: no effect
		t.Fatal(err)
	}
	if got, err := s.Locks().Held(ctx); err != nil || !got[Key{"a", "x"}] || !got[Key{"a", "y"}] || len(got) != 2 {
		t.Fatalf("locks %v, %v; want a/x and a/y", got, err)
	}
	if err := s.Locks().Delete(ctx, "a", "x", 3); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Locks().Held(ctx); got[Key{"a", "x"}] || len(got) != 1 {
		t.Fatalf("locks after x's unlock: %v", got)
	}
	if err := s.Locks().Put(ctx, "a/b", "x", 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad namespace: %v", err)
	}
}

// Follow sees every write after a Load's revision, in order: records put and deleted,
// run locks, and the election's keys, so a follower can mirror the task set.
func TestFollow(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	mustPut(t, s, Record{Namespace: "a", ID: "before", Version: 1, Body: []byte("b")})
	rev, err := s.Records().Load(ctx, func(Record) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan Change, 16)
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Follow(fctx, rev+1, func(c Change) { changes <- c }) }()
	mustPut(t, s, Record{Namespace: "a", ID: "x", Version: 2, Body: []byte("x2")})
	if err := s.Locks().Put(ctx, "a", "x", 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Records().DeleteBatch(ctx, []Versioned{{Key{"a", "before"}, 1}}); err != nil {
		t.Fatal(err)
	}
	l := mustCampaign(t, s)
	want := []struct {
		kind ChangeKind
		key  Key
	}{{RecordPut, Key{"a", "x"}}, {LockPut, Key{"a", "x"}}, {RecordDelete, Key{"a", "before"}}, {OtherChange, Key{}}}
	var last int64
	for i, w := range want {
		select {
		case c := <-changes:
			if c.Kind != w.kind || c.Key != w.key || c.Rev <= last {
				t.Fatalf("change %d: %+v, want kind %d key %v after revision %d", i, c, w.kind, w.key, last)
			}
			if c.Kind == RecordPut && (c.Record.Version != 2 || string(c.Record.Body) != "x2") {
				t.Fatalf("record %+v", c.Record)
			}
			if c.Kind == OtherChange && c.Rev != l.Epoch() {
				t.Fatalf("election change at %d, want the election key's revision %d", c.Rev, l.Epoch())
			}
			last = c.Rev
		case <-time.After(5 * time.Second):
			t.Fatalf("change %d (%v) not seen", i, w)
		}
	}
	if locks, err := s.Locks().HeldAt(ctx, last); err != nil || !locks[Key{"a", "x"}] {
		t.Fatalf("Locks.HeldAt: %v, %v", locks, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Follow after its context ended: %v", err)
	}
}

// Fenced writes apply during the writer's term only.
func TestFencedWrites(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	l := mustCampaign(t, s)
	f := l.Fence()
	if errs, err := s.Records().PutBatchFenced(ctx, f, []Record{{Namespace: "a", ID: "x", Version: 1}}); err != nil || errs[0] != nil {
		t.Fatalf("fenced put while leading: %v %v", err, errs)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if errs, err := s.Records().PutBatchFenced(ctx, f, []Record{{Namespace: "a", ID: "y", Version: 1}}); !errors.Is(err, ErrFenced) || !errors.Is(errs[0], ErrFenced) {
		t.Fatalf("fenced put after the term: %v %v, want ErrFenced", err, errs)
	}
	if err := s.Records().DeleteBatchFenced(ctx, f, []Versioned{{Key{"a", "x"}, 1}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced delete after the term: %v, want ErrFenced", err)
	}
	if got, _ := loadAll(t, s); len(got) != 1 {
		t.Fatalf("records %v: want only a/x, still there", got)
	}
}

// Run locks written and deleted under a fence apply during the writer's term only: a
// deposed leader can neither start an exclusive run (its lock write is refused) nor
// remove the lock of the next leader's run.
func TestFencedRunLocks(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	l := mustCampaign(t, s)
	f := l.Fence()
	if err := s.Locks().PutFenced(ctx, f, "a", "x", 1); err != nil {
		t.Fatalf("fenced lock while leading: %v", err)
	}
	if err := s.Locks().DeleteFenced(ctx, f, "a", "x", 2); err != nil { // another run's: no effect
		t.Fatalf("fenced unlock of another run while leading: %v", err)
	}
	if got, _ := s.Locks().Held(ctx); !got[Key{"a", "x"}] {
		t.Fatalf("locks %v: the unlock of another run removed a/x's", got)
	}
	if err := s.Locks().DeleteFenced(ctx, f, "a", "x", 1); err != nil {
		t.Fatalf("fenced unlock while leading: %v", err)
	}
	if err := s.Locks().PutFenced(ctx, f, "a", "y", 3); err != nil {
		t.Fatal(err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Locks().PutFenced(ctx, f, "a", "x", 4); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced lock after the term: %v, want ErrFenced", err)
	}
	if err := s.Locks().DeleteFenced(ctx, f, "a", "y", 3); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced unlock after the term: %v, want ErrFenced", err)
	}
	if got, _ := s.Locks().Held(ctx); got[Key{"a", "x"}] || !got[Key{"a", "y"}] || len(got) != 1 {
		t.Fatalf("locks after the term %v: want only a/y's, untouched", got)
	}
}

// Progress of recurring tasks: written fenced with its task's version, read at a
// revision, deleted with the record.
func TestNextDue(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	l := mustCampaign(t, s)
	mustPut(t, s, Record{Namespace: "a", ID: "r", Version: 3, Body: []byte("r")}, Record{Namespace: "a", ID: "s", Version: 1},
		Record{Namespace: "a", ID: "v", Version: 2, Body: []byte("v")})
	// Written only where the record holds the progress's version: not for a/v (stored at
	// version 2, not 1 or 3), nor for a/none (no record).
	if err := s.Progress().PutFenced(ctx, l.Fence(), []NextDue{{Key{"a", "r"}, 3, 42}, {Key{"a", "s"}, 1, -7},
		{Key{"a", "v"}, 1, 5}, {Key{"a", "none"}, 1, 8}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Progress().PutFenced(ctx, l.Fence(), []NextDue{{Key{"a", "v"}, 3, 6}}); err != nil {
		t.Fatal(err)
	}
	next, err := s.Progress().At(ctx, 0)
	if err != nil || len(next) != 2 || next[Key{"a", "r"}] != (NextDue{Key{"a", "r"}, 3, 42}) || next[Key{"a", "s"}] != (NextDue{Key{"a", "s"}, 1, -7}) {
		t.Fatalf("Progress.At: %v, %v; want a/r's and a/s's only", next, err)
	}
	if err := s.Records().DeleteBatch(ctx, []Versioned{{Key{"a", "r"}, 3}}); err != nil {
		t.Fatal(err)
	}
	if next, _ := s.Progress().At(ctx, 0); len(next) != 1 || next[Key{"a", "s"}].Due != -7 {
		t.Fatalf("after deleting a/r: %v", next)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Progress().PutFenced(ctx, l.Fence(), []NextDue{{Key{"a", "s"}, 1, 8}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("after the term: %v, want ErrFenced", err)
	}
}

// Progress writes, each a nested transaction, fit etcd's --max-txn-ops however many
// there are.
func TestNextDueFitsMaxTxnOps(t *testing.T) {
	s := openEmbedded(t, Options{MaxTxnOps: 8})
	ctx := ctxT(t)
	recs := numbered("a", "r", 20, 1)
	mustPut(t, s, recs...)
	var items []NextDue
	for i, r := range recs {
		items = append(items, NextDue{Key{r.Namespace, r.ID}, 1, int64(i)})
	}
	if err := s.Progress().PutFenced(ctx, Fence{}, items); err != nil {
		t.Fatal(err)
	}
	if next, err := s.Progress().At(ctx, 0); err != nil || len(next) != 20 {
		t.Fatalf("Progress.At: %d entries, %v; want 20", len(next), err)
	}
}

// A record put with its first due time writes its progress in the same transaction, and
// only when the record itself is written (a refused lower version leaves the progress of
// the stored one); batches of them fit etcd's --max-txn-ops.
func TestRecordWithProgress(t *testing.T) {
	s := openEmbedded(t, Options{MaxTxnOps: 8})
	ctx := ctxT(t)
	recs := numbered("a", "r", 20, 2)
	for i := range recs {
		recs[i].NextDue = int64(100 + i)
	}
	mustPutBatch(t, s, append(recs, Record{Namespace: "a", ID: "plain", Version: 1, Body: []byte("p")}))
	next, err := s.Progress().At(ctx, 0)
	if err != nil || len(next) != 20 || next[Key{"a", "r7"}] != (NextDue{Key{"a", "r7"}, 2, 107}) {
		t.Fatalf("Progress.At: %v, %v; want the 20 records' first due times", next, err)
	}
	// A lower version is refused, and its progress is not written.
	if err := s.Records().Put(ctx, Record{Namespace: "a", ID: "r7", Version: 1, Body: []byte("old"), NextDue: 5}); err == nil {
		t.Fatal("a lower version was accepted")
	}
	if next, _ := s.Progress().At(ctx, 0); next[Key{"a", "r7"}] != (NextDue{Key{"a", "r7"}, 2, 107}) {
		t.Fatalf("after a refused lower version: %v, want version 2 at 107", next[Key{"a", "r7"}])
	}
}

// Registry entries live under the session lease: they go when the session does.
func TestWorkerRegistry(t *testing.T) {
	s := openEmbedded(t, Options{SessionTTL: time.Second})
	ctx := ctxT(t)
	if err := s.Workers().Put(ctx, "n1", "3", []byte(`{"credits":4}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Workers().Put(ctx, "n1", "4", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Workers().Delete(ctx, "n1", "4"); err != nil {
		t.Fatal(err)
	}
	ws, err := s.Workers().List(ctx)
	if err != nil || len(ws) != 1 || ws[0].Node != "n1" || ws[0].Name != "3" || string(ws[0].Value) != `{"credits":4}` {
		t.Fatalf("workers %+v, %v", ws, err)
	}
	if _, err := s.Client().Revoke(ctx, sessionOf(s).Lease()); err != nil { // the node dies: its lease goes
		t.Fatal(err)
	}
	if ws, err := s.Workers().List(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("workers after the lease went: %+v, %v", ws, err)
	}
	if err := s.Workers().Put(ctx, "n/1", "3", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad node: %v", err)
	}
}

// A delete names the version it removes: a record replaced by a later version stays,
// with its progress; the version named (the highest too) goes.
func TestDeleteOnlyItsVersion(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	mustPut(t, s, Record{Namespace: "a", ID: "x", Version: 2, Body: []byte("x2")},
		Record{Namespace: "a", ID: "top", Version: math.MaxUint64, Body: []byte("t")})
	if err := s.Progress().PutFenced(ctx, Fence{}, []NextDue{{Key{"a", "x"}, 2, 42}}); err != nil {
		t.Fatal(err)
	}
	stale := []Versioned{{Key{"a", "x"}, 1}, {Key{"a", "x"}, 3}, {Key{"a", "top"}, math.MaxUint64 - 1}}
	for _, v := range stale {
		if err := s.Records().DeleteBatch(ctx, []Versioned{v}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := loadAll(t, s); len(got) != 2 || got["a/x"].Version != 2 {
		t.Fatalf("after deletes of other versions: %v, want a/x@2 and a/top", got)
	}
	if next, _ := s.Progress().At(ctx, 0); next[Key{"a", "x"}].Due != 42 {
		t.Fatalf("progress after deletes of other versions: %v", next)
	}
	if err := s.Records().DeleteBatch(ctx, []Versioned{{Key{"a", "x"}, 2}, {Key{"a", "top"}, math.MaxUint64}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := loadAll(t, s); len(got) != 0 {
		t.Fatalf("after deleting the versions stored: %v", got)
	}
	if next, _ := s.Progress().At(ctx, 0); len(next) != 0 {
		t.Fatalf("progress after its record went: %v", next)
	}
}

// A record's delete takes its run lock with it (only when the version matches), and a
// batch of such deletes fits a small --max-txn-ops; Locks.DeleteBeforeFenced removes a
// lock written at or below the revision given, whatever run it names, and keeps a later one.
func TestLocksGoWithTheirRecord(t *testing.T) {
	s := openEmbedded(t, Options{MaxTxnOps: 8})
	ctx := ctxT(t)
	recs := numbered("a", "x", 10, 2)
	mustPut(t, s, recs...)
	var dels []Versioned
	for i, r := range recs {
		if err := s.Locks().Put(ctx, r.Namespace, r.ID, uint64(i)); err != nil {
			t.Fatal(err)
		}
		dels = append(dels, Versioned{Key{r.Namespace, r.ID}, r.Version})
	}
	if err := s.Records().DeleteBatch(ctx, []Versioned{{Key{"a", "x0"}, 1}}); err != nil {
		t.Fatal(err)
	}
	if locks, err := s.Locks().Held(ctx); err != nil || !locks[Key{"a", "x0"}] {
		t.Fatalf("locks after a delete of another version: %v, %v; want x0's kept", locks, err)
	}
	if err := s.Records().DeleteBatch(ctx, dels); err != nil {
		t.Fatal(err)
	}
	if locks, err := s.Locks().Held(ctx); err != nil || len(locks) != 0 {
		t.Fatalf("locks after their records went: %v, %v; want none", locks, err)
	}

	if err := s.Locks().Put(ctx, "a", "y", 1); err != nil {
		t.Fatal(err)
	}
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Locks().Put(ctx, "a", "z", 2); err != nil { // after rev
		t.Fatal(err)
	}
	for _, id := range []string{"y", "z"} {
		if err := s.Locks().DeleteBeforeFenced(ctx, Fence{}, "a", id, rev); err != nil {
			t.Fatal(err)
		}
	}
	if locks, err := s.Locks().Held(ctx); err != nil || len(locks) != 1 || !locks[Key{"a", "z"}] {
		t.Fatalf("locks after Locks.DeleteBeforeFenced: %v, %v; want only z's (written after the revision)", locks, err)
	}
}

// A refused put reports the record etcd holds, so that a caller can recognise its own
// earlier write.
func TestExistsCarriesTheStoredRecord(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	mustPut(t, s, Record{Namespace: "a", ID: "x", Version: 3, Body: []byte("first")})
	err := s.Records().Put(ctx, Record{Namespace: "a", ID: "x", Version: 3, Body: []byte("second")})
	var ee *ExistsError
	if !errors.Is(err, ErrExists) || !errors.As(err, &ee) || ee.Stored.Version != 3 || string(ee.Stored.Body) != "first" {
		t.Fatalf("put over an equal version: %v (%+v), want an ExistsError holding the stored record", err, ee)
	}
}

// A failed write is uncertain unless etcd refused it before proposing it.
func TestTxnFailedClassifies(t *testing.T) {
	for _, c := range []struct {
		err       error
		uncertain bool
	}{
		{context.DeadlineExceeded, true},
		{context.Canceled, true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrTimeoutDueToConnectionLost, true},
		{errors.New("rpc error: code = Unavailable desc = connection reset"), true},
		{rpctypes.ErrNoSpace, false},
		{rpctypes.ErrTooManyRequests, false},
		{rpctypes.ErrTooManyOps, false},
		{rpctypes.ErrNoLeader, false},
	} {
		err := txnFailed("put", c.err)
		if errors.Is(err, ErrUncertain) != c.uncertain || !errors.Is(err, c.err) {
			t.Errorf("txnFailed(%v) = %v: uncertain %v, want %v (and the cause kept)", c.err, err, errors.Is(err, ErrUncertain), c.uncertain)
		}
	}
}

// Locks.SwapFenced returns the run the lock named before it: 0 when there was none.
func TestSwapLockReturnsThePreviousRun(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := ctxT(t)
	for _, c := range []struct{ run, prev uint64 }{{7, 0}, {9, 7}, {9, 9}} {
		if prev, err := s.Locks().SwapFenced(ctx, Fence{}, "a", "x", c.run); err != nil || prev != c.prev {
			t.Fatalf("swap to %d: previous %d, %v; want %d", c.run, prev, err, c.prev)
		}
	}
}
