package tockd

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// etcdCost is what a run of durable tasks cost etcd: the keys it wrote, as a watch over
// the prefix saw them (a put and a delete of a record are one key each), the revisions
// those writes made, and the write requests etcd's own counters saw (a delete of a key
// that is absent counts there, not in the watch).
type etcdCost struct {
	// Watched events under the prefix: records, and the other keys of tasks (progress,
	// run locks); revisions counts their distinct revisions.
	recordPuts, recordDeletes, other int
	revisions                        int
	puts, deletes, txns              int64 // etcd_mvcc_{put,delete,txn}_total deltas
}

// etcdCounters reads the embedded etcd's mvcc counters from the process's default
// registry, where etcd registers them.
func etcdCounters(t *testing.T) (puts, deletes, txns int64) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		var v float64
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue()
		}
		switch mf.GetName() {
		case "etcd_mvcc_put_total":
			puts = int64(v)
		case "etcd_mvcc_delete_total":
			deletes = int64(v)
		case "etcd_mvcc_txn_total":
			txns = int64(v)
		}
	}
	return puts, deletes, txns
}

// measureEtcd follows st from now while run runs, and returns what run cost etcd: run
// must leave every write it caused committed when it returns (the test waits for the
// records to be gone).
func measureEtcd(t *testing.T, st *store.Store, run func()) etcdCost {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	from, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p0, d0, x0 := etcdCounters(t)
	run()
	last, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var c etcdCost
	revs := map[int64]bool{}
	var mu sync.Mutex
	followed := make(chan error, 1)
	go func() {
		followed <- st.Follow(ctx, from+1, func(ch store.Change) {
			mu.Lock()
			defer mu.Unlock()
			if ch.Rev > last {
				cancel() // everything up to last is seen
				return
			}
			switch ch.Kind {
			case store.RecordPut:
				c.recordPuts++
			case store.RecordDelete:
				c.recordDeletes++
			case store.OtherChange:
				return // not a task's (the worker registry, the election)
			default:
				c.other++
			}
			revs[ch.Rev] = true
			if ch.Rev == last {
				cancel()
			}
		})
	}()
	if err := <-followed; err != nil {
		t.Fatalf("follow: %v", err)
	}
	p1, d1, x1 := etcdCounters(t)
	mu.Lock()
	defer mu.Unlock()
	c.revisions = len(revs)
	c.puts, c.deletes, c.txns = p1-p0, d1-d0, x1-x0
	return c
}

// What one durable one-shot task costs etcd from its submit to its record's delete
// (submit -> FIRE -> ACK -> record gone), for n tasks submitted in one SUBMIT_BATCH and
// acknowledged one ACK each: the figures behind the durable path's ceiling (etcd writes
// ~40k keys/s in transactions here). Pinned: one record put and one record delete a
// task, nothing else written, and the group commit's batching (far fewer revisions
// than tasks).
func TestDurableTaskEtcdCost(t *testing.T) {
	st, _, c, w := startDurableWithWorker(t, 1000)
	const n = 500
	cost := measureEtcd(t, st, func() {
		batch := make([]protocol.Task, n)
		for i := range batch {
			batch[i] = durableWorkTask(fmt.Sprint("cost-", i))
		}
		if r, ok := c.call(&protocol.SubmitBatch{ID: 2, Tasks: batch}).(*protocol.BatchResult); !ok || len(r.Results) != n {
			t.Fatalf("SUBMIT_BATCH answered %+v", r)
		}
		for fired, oks := 0, 0; fired < n || oks < n; { // ACKs pipelined: their OKs come between FIREs
			var m protocol.Message
			if len(w.fires) > 0 {
				m, w.fires = w.fires[0], w.fires[1:]
			} else {
				m = w.recv()
			}
			switch m := m.(type) {
			case *protocol.Fire:
				fired++
				w.send(&protocol.Ack{ID: 1000 + m.RunID, RunID: m.RunID, Epoch: m.Epoch})
			case *protocol.Fires:
				w.push(m)
			case *protocol.OK:
				oks++
			default:
				t.Fatalf("after %d FIREs and %d OKs: got %v %+v", fired, oks, m.Type(), m)
			}
		}
		if !waitUntil(func() bool { return len(storedIDs(t, st)) == 0 }) {
			t.Fatalf("%d records left after every ACK", len(storedIDs(t, st)))
		}
	})
	t.Logf("%d durable tasks: watched %d record puts, %d record deletes, %d other writes, in %d revisions; "+
		"etcd requests (any key): %d puts, %d deletes, %d write txns (per task: %.2f keys written, %.3f revisions, %.2f put+delete requests)",
		n, cost.recordPuts, cost.recordDeletes, cost.other, cost.revisions, cost.puts, cost.deletes, cost.txns,
		float64(cost.recordPuts+cost.recordDeletes+cost.other)/n, float64(cost.revisions)/n, float64(cost.puts+cost.deletes)/n)
	if cost.recordPuts != n || cost.recordDeletes != n || cost.other != 0 {
		t.Errorf("keys written: %d record puts, %d record deletes, %d other; want %d, %d, 0",
			cost.recordPuts, cost.recordDeletes, cost.other, n, n)
	}
	if cost.revisions > n/8 {
		t.Errorf("%d revisions for %d tasks: the writes are not grouped (want <= %d)", cost.revisions, n, n/8)
	}
}
