package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestPartitionMapEncoding: a map survives its encoding; every truncation of it, and
// a value of another format, is ErrCorrupt; the encoding is compact.
func TestPartitionMapEncoding(t *testing.T) {
	m := PartitionMap{Rev: 7, Basis: 123456, Owners: []string{"node-b", "node-a", "node-c", "node-a"}}
	for range 12 {
		m.Owners = append(m.Owners, m.Owners[len(m.Owners)%3])
	}
	val := encodeMap(m)
	got, err := decodeMap(val, 7)
	if err != nil || got.Rev != 7 || got.Basis != m.Basis || !slices.Equal(got.Owners, m.Owners) {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", m, got, err)
	}
	if len(val) != 43 {
		t.Fatalf("16 partitions of 3 nodes at basis %d take %d bytes, want 40 and 3 for the basis", m.Basis, len(val))
	}
	for n := range len(val) {
		if _, err := decodeMap(val[:n], 7); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("the first %d of %d bytes decoded: %v, want ErrCorrupt", n, len(val), err)
		}
	}
	for _, v := range [][]byte{append(slices.Clone(val), 0), append([]byte{2}, val[1:]...)} {
		if _, err := decodeMap(v, 7); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%x decoded: %v, want ErrCorrupt", v, err)
		}
	}
}

// readSet is st's node set now, as Watch delivers it (with each entry's revision).
func readSet(t *testing.T, st *Store) NodeSet {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	var set NodeSet
	err := st.Nodes().Watch(ctx, func(s NodeSet) { set = s; cancel() })
	if err != nil {
		t.Fatalf("read the node set: %v", err)
	}
	return set
}

// register registers name on st.
func register(t *testing.T, st *Store, name string) {
	t.Helper()
	if _, err := st.Nodes().Register(ctxT(t), Node{Name: name, Addr: name + ":1"}); err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
}

// TestPartitionMapCompareAndSwap: a write over the map's revision and the node set
// read wins once; a write over a stale map, or over a node set that has since gained,
// lost or rewritten an entry, loses with ErrConflict and writes nothing; of writers
// racing over one revision exactly one wins.
func TestPartitionMapCompareAndSwap(t *testing.T) {
	a := openEmbedded(t, Options{SessionTTL: 5 * time.Second})
	b := openPeer(t, a, "n2", Options{SessionTTL: 5 * time.Second})
	c := openPeer(t, a, "n3", Options{SessionTTL: 5 * time.Second})
	ctx := ctxT(t)
	register(t, a, "node-a")
	register(t, b, "node-b")
	set := readSet(t, a)
	ab := []string{"node-a", "node-b", "node-a", "node-b"}
	m, err := a.Partitions().WriteMap(ctx, 0, set, ab)
	if err != nil || m.Rev <= set.Rev || m.Basis != set.Rev {
		t.Fatalf("first write: %+v, %v; want a map after the set's revision %d", m, err, set.Rev)
	}
	if _, err := b.Partitions().WriteMap(ctx, 0, set, ab); !errors.Is(err, ErrConflict) {
		t.Fatalf("a second write over no map: %v, want ErrConflict", err)
	}
	// conflicts checks that writing over m and stale loses and leaves m stored.
	conflicts := func(stale NodeSet, why string) {
		t.Helper()
		if _, err := b.Partitions().WriteMap(ctx, m.Rev, stale, []string{"node-b"}); !errors.Is(err, ErrConflict) {
			t.Fatalf("a write over the node set before %s: %v, want ErrConflict", why, err)
		}
		if got, err := a.Partitions().ReadMap(ctx); err != nil || got.Rev != m.Rev || !slices.Equal(got.Owners, m.Owners) {
			t.Fatalf("after the lost write (%s): %+v, %v; want %+v unchanged", why, got, err, m)
		}
	}
	register(t, c, "node-c")
	conflicts(set, "node-c joined")
	set = readSet(t, a)
	if err := c.Nodes().Deregister(ctx, "node-c"); err != nil {
		t.Fatal(err)
	}
	conflicts(set, "node-c left")
	set = readSet(t, a)
	register(t, b, "node-b") // the same name and lease, written again
	conflicts(set, "node-b rewrote its entry")
	set = readSet(t, a)

	for round := range 5 {
		var wg sync.WaitGroup
		errs := make([]error, 3)
		maps := make([]PartitionMap, 3)
		for i, st := range []*Store{a, b, c} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				maps[i], errs[i] = st.Partitions().WriteMap(ctx, m.Rev, set, []string{set.Nodes[i%2].Name, "w" + string(rune('0'+i))})
			}()
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("round %d: writers %d and %d both won over revision %d", round, won, i, m.Rev)
			case !errors.Is(err, ErrConflict):
				t.Fatalf("round %d: writer %d: %v, want success or ErrConflict", round, i, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no writer won over revision %d: %v", round, m.Rev, errs)
		}
		got, err := c.Partitions().ReadMap(ctx)
		if err != nil || got.Rev != maps[won].Rev || !slices.Equal(got.Owners, maps[won].Owners) {
			t.Fatalf("round %d: stored %+v, %v; want the winner's %+v", round, got, err, maps[won])
		}
		m = got
	}
	if _, err := a.Partitions().WriteMap(ctx, m.Rev, set, []string{"node-a", "bad/name"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an owner with a '/': %v, want ErrInvalid", err)
	}
}

// TestPartitionMapWatch: a watcher sees the map as it stood, then every revision
// written after, in order and each once; a corrupt value comes as no map at its
// revision (so a write over that revision replaces it), a delete as none at all.
func TestPartitionMapWatch(t *testing.T) {
	a := openEmbedded(t, Options{})
	ctx := ctxT(t)
	register(t, a, "node-a")
	set := readSet(t, a)
	first, err := a.Partitions().WriteMap(ctx, 0, set, []string{"node-a"})
	if err != nil {
		t.Fatal(err)
	}
	maps := make(chan PartitionMap, 64)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Partitions().WatchMap(wctx, func(m PartitionMap) { maps <- m }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	}()
	next := func(why string) PartitionMap { t.Helper(); return receive(t, maps, why) }
	if m := next("the first read"); m.Rev != first.Rev || !slices.Equal(m.Owners, first.Owners) {
		t.Fatalf("first delivery %+v, want %+v", m, first)
	}
	written := []PartitionMap{first}
	for i := range 5 {
		owners := slices.Repeat([]string{"node-a"}, i+2)
		m, err := a.Partitions().WriteMap(ctx, written[len(written)-1].Rev, set, owners)
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, m)
	}
	for _, w := range written[1:] {
		if m := next("a written revision"); m.Rev != w.Rev || m.Basis != set.Rev || !slices.Equal(m.Owners, w.Owners) {
			t.Fatalf("watch delivered %+v, want %+v", m, w)
		}
	}
	resp, err := a.Client().Put(ctx, "/tock/partitions/map", "garbage")
	if err != nil {
		t.Fatal(err)
	}
	if m := next("the corrupt value"); m.Rev != resp.Header.Revision || m.Owners != nil {
		t.Fatalf("a corrupt map came as %+v, want none at revision %d", m, resp.Header.Revision)
	}
	if _, err := a.Partitions().ReadMap(ctx); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadMap of a corrupt map: %v, want ErrCorrupt", err)
	}
	repaired, err := a.Partitions().WriteMap(ctx, resp.Header.Revision, set, []string{"node-a"})
	if err != nil {
		t.Fatalf("a write over the corrupt map's revision: %v", err)
	}
	if m := next("the repaired map"); m.Rev != repaired.Rev {
		t.Fatalf("watch delivered %+v, want the repaired map at %d", m, repaired.Rev)
	}
	if _, err := a.Client().Delete(ctx, "/tock/partitions/map"); err != nil {
		t.Fatal(err)
	}
	if m := next("the delete"); m.Rev != 0 || m.Owners != nil {
		t.Fatalf("a deleted map came as %+v, want none", m)
	}
}

// TestPartitionHolders: a claim creates the owner key only while it is absent; the
// holder's claim again finds its own holding at the same epoch, another node's finds the
// holder; a release of another epoch leaves the key; after the holder's release the next
// claim holds at a higher epoch; a revoked lease takes its keys and closes lost.
func TestPartitionHolders(t *testing.T) {
	a := openEmbedded(t, Options{SessionTTL: 5 * time.Second})
	b := openPeer(t, a, "n2", Options{SessionTTL: 5 * time.Second})
	ctx := ctxT(t)
	holders := make(chan Holders, 64)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Partitions().WatchHolders(wctx, func(h Holders) { holders <- h }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	}()
	if h := receive(t, holders, "the first read"); len(h.By) != 0 {
		t.Fatalf("holders before any claim: %+v", h)
	}
	ha, held, _, err := a.Partitions().Claim(ctx, 3, "node-a")
	if err != nil || !held || ha.Node != "node-a" || ha.Epoch == 0 {
		t.Fatalf("the first claim: %+v held %v, %v", ha, held, err)
	}
	if h := receive(t, holders, "the claim"); h.By[3] != ha || h.Rev != ha.Epoch || len(h.By) != 1 {
		t.Fatalf("watched %+v, want partition 3 held as %+v", h, ha)
	}
	if h, held, _, err := b.Partitions().Claim(ctx, 3, "node-b"); err != nil || held || h != ha {
		t.Fatalf("node-b's claim of a held partition: %+v held %v, %v; want the holder %+v", h, held, err, ha)
	}
	if h, held, _, err := a.Partitions().Claim(ctx, 3, "node-a"); err != nil || !held || h != ha {
		t.Fatalf("node-a's claim again: %+v held %v, %v; want its holding %+v", h, held, err, ha)
	}
	if err := b.Partitions().Release(ctx, 3, ha.Epoch+1); err != nil {
		t.Fatal(err)
	}
	if err := a.Partitions().Release(ctx, 3, ha.Epoch); err != nil {
		t.Fatal(err)
	}
	if h := receive(t, holders, "the release"); len(h.By) != 0 {
		t.Fatalf("after the release (the wrong epoch's first): %+v, want none", h)
	}
	hb, held, term, err := b.Partitions().Claim(ctx, 3, "node-b")
	if err != nil || !held || hb.Epoch <= ha.Epoch {
		t.Fatalf("node-b's claim after the release: %+v held %v, %v; want an epoch after %d", hb, held, err, ha.Epoch)
	}
	receive(t, holders, "node-b's claim")
	if !term.Valid(time.Now()) {
		t.Fatal("node-b's term is not valid just after its claim")
	}
	if _, err := a.Client().Revoke(ctx, sessionOf(b).Lease()); err != nil {
		t.Fatal(err)
	}
	if h := receive(t, holders, "the revoke"); len(h.By) != 0 {
		t.Fatalf("after node-b's lease was revoked: %+v, want none", h)
	}
	select {
	case <-term.Lost():
	case <-time.After(wait):
		t.Fatalf("Lost not closed within %v of the revoke", wait)
	}
	if term.Valid(time.Now()) || (Term{}).Valid(time.Now()) {
		t.Fatal("a lost term, or the zero Term, is valid")
	}
	if _, _, _, err := a.Partitions().Claim(ctx, -1, "node-a"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a claim of partition -1: %v, want ErrInvalid", err)
	}
}

// TestPartitionNeverHeldTwice: three nodes claim one partition over and over, each
// releasing what it got, while a raw watch records the owner key's history: every put
// creates the key (no holder's key is ever overwritten), a put follows a delete, and the
// epochs only grow.
func TestPartitionNeverHeldTwice(t *testing.T) {
	a := openEmbedded(t, Options{SessionTTL: 5 * time.Second})
	stores := []*Store{a, openPeer(t, a, "n2", Options{SessionTTL: 5 * time.Second}), openPeer(t, a, "n3", Options{SessionTTL: 5 * time.Second})}
	ctx := ctxT(t)
	from, err := a.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	var wg sync.WaitGroup
	wins := make([]int, len(stores))
	for i, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				h, held, _, err := st.Partitions().Claim(ctx, 0, "node-"+string(rune('a'+i)))
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if held {
					wins[i]++
					if err := st.Partitions().Release(ctx, 0, h.Epoch); err != nil {
						t.Errorf("release: %v", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	to, err := a.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held, last, puts := false, int64(0), 0
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range a.Client().Watch(wctx, "/tock/partitions/owner/0", clientv3.WithRev(from+1)) {
		for _, ev := range wr.Events {
			switch {
			case ev.Type == clientv3.EventTypeDelete:
				held = false
			case held || ev.Kv.Version != 1 || ev.Kv.CreateRevision <= last:
				t.Fatalf("a put at %d (version %d, create %d) while held %v, last epoch %d", ev.Kv.ModRevision, ev.Kv.Version, ev.Kv.CreateRevision, held, last)
			default:
				held, last, puts = true, ev.Kv.CreateRevision, puts+1
			}
		}
		// Every write since from is to this key (the last a release), so its history
		// is complete at to.
		if len(wr.Events) > 0 && wr.Events[len(wr.Events)-1].Kv.ModRevision >= to {
			break
		}
	}
	if total := wins[0] + wins[1] + wins[2]; puts != total || held {
		t.Fatalf("%d creates watched, %d claims won %v, held at the end %v", puts, total, wins, held)
	}
	t.Logf("%d holdings over %d revisions, won %v", puts, to-from, wins)
}
