package tockd

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/store"
)

// The standby mirror holds what etcd holds: records and run locks present when it
// starts, and every later write, by the revision that wrote it.
func TestStandbyMirrors(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	ctx := context.Background()
	put := func(id string, v uint64) {
		t.Helper()
		if err := st.Put(ctx, store.Record{Namespace: "default", ID: id, Version: v, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	put("early", 1)
	put("gone", 1)
	if err := st.PutLock(ctx, "default", "early", 9); err != nil {
		t.Fatal(err)
	}
	sb := newStandby()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); sb.run(sctx, st, slog.New(slog.DiscardHandler)) }()
	defer func() { stop(); <-done }()

	put("late", 2)
	if err := st.Delete(ctx, "default", "gone"); err != nil {
		t.Fatal(err)
	}
	// The revision of the last write: a campaign's key, as a new leader would wait for.
	l, err := st.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	records, locks, _, ok := sb.snapshotAt(l.Epoch(), replyWait)
	if !ok {
		t.Fatal("the mirror never reached the election's revision")
	}
	got := map[string]uint64{}
	for _, r := range records {
		got[r.ID] = r.Version
	}
	if len(got) != 2 || got["early"] != 1 || got["late"] != 2 {
		t.Fatalf("mirrored records %v, want early@1 and late@2", got)
	}
	if !locks[store.Key{Namespace: "default", ID: "early"}] || len(locks) != 1 {
		t.Fatalf("mirrored locks %v", locks)
	}
	// A revision it cannot reach in time: false, so the leader reads etcd instead.
	if _, _, _, ok := sb.snapshotAt(l.Epoch()+1000, 50*time.Millisecond); ok {
		t.Fatal("snapshot claimed a revision the mirror has not seen")
	}
}
