package tockd

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The standby mirror holds what etcd holds: records and run locks present when it
// starts, and every later write, by the revision that wrote it.
func TestStandbyMirrors(t *testing.T) {
	st := openStore(t, t.TempDir())
	ctx := context.Background()
	put := func(id string, v uint64) {
		t.Helper()
		if err := st.Records().Put(ctx, store.Record{Namespace: "default", ID: id, Version: v, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	put("early", 1)
	put("gone", 1)
	if err := st.Locks().Put(ctx, "default", "early", 9); err != nil {
		t.Fatal(err)
	}
	sb := newStandby()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); sb.run(sctx, st, slog.New(slog.DiscardHandler), nil) }()
	defer func() { stop(); <-done }()

	put("late", 2)
	if err := st.Records().DeleteBatch(ctx, []store.Versioned{{Key: store.Key{Namespace: "default", ID: "gone"}, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	// The revision of the last write: a campaign's key, as a new leader would wait for.
	l, err := st.Election().Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	records, _, locks, _, ok := sb.snapshotAt(l.Epoch(), waitBound)
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
	if _, _, _, _, ok := sb.snapshotAt(l.Epoch()+1000, 50*time.Millisecond); ok {
		t.Fatal("snapshot claimed a revision the mirror has not seen")
	}
}

// electionKeys counts the candidates' keys in st's election.
func electionKeys(t *testing.T, st *store.Store) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	resp, err := st.Client().Get(ctx, store.DefaultPrefix+"leader/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// A follower whose mirror lags behind (its watch stalls on the first record written
// after it began campaigning) is elected after the leader wrote 100 durable records:
// it must load all 100, not the mirror's copy from when it started campaigning.
func TestNewLeaderLoadsWritesAfterItsCampaignBegan(t *testing.T) {
	st1 := openStore(t, t.TempDir())
	st2 := openPeerStore(t, st1, "n2")
	leader := startDurable(t, st1, nil)
	follower := newServer(t, Options{Store: st2})
	// The stall: no record written from now on reaches the mirror before the mirror
	// stops (the node stops it once elected, whether or not it caught up).
	follower.replica.lead.standbyHook = func(ctx context.Context, c store.Change) {
		if c.Kind == store.RecordPut || c.Kind == store.PackPut { // a batch of 100 is a pack
			<-ctx.Done()
		}
	}
	serve(t, follower)
	if !waitUntil(func() bool { return electionKeys(t, st1) >= 2 }) {
		t.Fatalf("the follower never campaigned within %v", waitBound)
	}

	const n = 100
	tasks := make([]protocol.Task, n)
	for i := range tasks {
		tasks[i] = durableTask(fmt.Sprintf("b%d", i), time.Hour)
	}
	c := connect(t, leader.addr)
	res, ok := c.call(&protocol.SubmitBatch{ID: 2, Tasks: tasks}).(*protocol.BatchResult)
	if !ok {
		t.Fatal("SUBMIT_BATCH not answered with BATCH_RESULT")
	}
	for _, r := range res.Results {
		if r.Code != 0 || r.Durability != protocol.Durable {
			t.Fatalf("batch item %+v", r)
		}
	}
	leader.stop(t) // resigns
	waitLeading(t, follower, "the follower was not elected")
	held := 0
	for i := range n {
		if _, err := follower.Engine().Get("default", fmt.Sprintf("b%d", i)); err == nil {
			held++
		}
	}
	if held != n {
		t.Fatalf("the new leader holds %d of the %d durable tasks the old one accepted", held, n)
	}
}
