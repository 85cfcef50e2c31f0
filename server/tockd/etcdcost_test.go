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
	// Watched events under the prefix: records, packs and their done keys (packKeys:
	// puts and deletes), and the other keys of tasks (progress, run locks); revisions
	// counts their distinct revisions.
	recordPuts, recordDeletes, packKeys, other int
	revisions                                  int
	puts, deletes, txns                        int64 // etcd_mvcc_{put,delete,txn}_total deltas
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
			case store.PackPut, store.PackDelete, store.PackDonePut, store.PackDoneDelete:
				c.packKeys++
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

// keys is every key the run wrote, per task of n.
func (c etcdCost) keys(n int) float64 {
	return float64(c.recordPuts+c.recordDeletes+c.packKeys+c.other) / float64(n)
}

// runDurable submits n durable one-shot tasks in one SUBMIT_BATCH, acknowledges each
// with an ACK (pipelined), and waits until no record or pack is left.
func runDurable(t *testing.T, st *store.Store, c *client, w *wkr, prefix string, n int) {
	t.Helper()
	batch := make([]protocol.Task, n)
	for i := range batch {
		batch[i] = durableWorkTask(fmt.Sprint(prefix, i))
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
	if !waitUntil(func() bool { return len(storedIDs(t, st)) == 0 && packsLeft(t, st) == 0 }) {
		t.Fatalf("%d records and %d packs left after every ACK", len(storedIDs(t, st)), packsLeft(t, st))
	}
}

// What one durable one-shot task costs etcd from its submit to its record's end
// (submit -> FIRE -> ACK -> nothing left), for n tasks submitted in one SUBMIT_BATCH and
// acknowledged one ACK each: the figures behind the durable path's ceiling (etcd writes
// ~40k keys/s in transactions here). A batch of packFrom or more is one pack: its put,
// a done mark per deleter round and the final delete of both keys, where records of
// their own (a smaller batch) are a put and a delete each. Pinned: no record key for a
// packed batch, at most a key per 10 tasks, and the group commit's batching for records
// of their own (far fewer revisions than tasks).
func TestDurableTaskEtcdCost(t *testing.T) {
	st, _, c, w := startDurableWithWorker(t, 1000)
	logCost := func(what string, n int, cost etcdCost) {
		t.Logf("%s, %d durable tasks: watched %d record puts, %d record deletes, %d pack keys, %d other writes, in %d revisions; "+
			"etcd requests (any key): %d puts, %d deletes, %d write txns (per task: %.3f keys written, %.3f revisions, %.3f put+delete requests)",
			what, n, cost.recordPuts, cost.recordDeletes, cost.packKeys, cost.other, cost.revisions, cost.puts, cost.deletes, cost.txns,
			cost.keys(n), float64(cost.revisions)/float64(n), float64(cost.puts+cost.deletes)/float64(n))
	}
	const n = 500
	packed := measureEtcd(t, st, func() { runDurable(t, st, c, w, "packed-", n) })
	logCost("one pack", n, packed)
	if packed.recordPuts != 0 || packed.recordDeletes != 0 || packed.other != 0 || packed.keys(n) > 0.1 {
		t.Errorf("a packed batch wrote %d record puts, %d record deletes, %d other keys, %d pack keys; want 0, 0, 0, <= %d",
			packed.recordPuts, packed.recordDeletes, packed.other, packed.packKeys, n/10)
	}
	const small = packFrom - 1
	own := measureEtcd(t, st, func() { runDurable(t, st, c, w, "own-", small) })
	logCost("records of their own", small, own)
	if own.recordPuts != small || own.recordDeletes != small || own.packKeys != 0 || own.other != 0 {
		t.Errorf("keys written: %d record puts, %d record deletes, %d pack keys, %d other; want %d, %d, 0, 0",
			own.recordPuts, own.recordDeletes, own.packKeys, own.other, small, small)
	}
	if own.revisions > small/2 {
		t.Errorf("%d revisions for %d tasks: the writes are not grouped (want <= %d)", own.revisions, small, small/2)
	}
}
