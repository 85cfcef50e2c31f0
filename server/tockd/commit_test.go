package tockd

import (
	"fmt"
	"sync"
	"testing"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// A request naming a key already in the batch being formed waits for the next batch.
func TestCommitterTakeKeepsKeysApart(t *testing.T) {
	req := func(ids ...string) *commitReq {
		r := &commitReq{}
		for _, id := range ids {
			r.recs = append(r.recs, store.Record{Namespace: "n", ID: id})
		}
		return r
	}
	a, b, c, d := req("x", "y"), req("y"), req("z"), req("y", "w")
	cm := &committer{queue: []*commitReq{a, b, c, d}}
	if got := cm.take(); len(got) != 2 || got[0] != a || got[1] != c {
		t.Fatalf("first batch %v, want a and c", got)
	}
	if got := cm.take(); len(got) != 1 || got[0] != b {
		t.Fatalf("second batch %v, want b", got)
	}
	if got := cm.take(); len(got) != 1 || got[0] != d || len(cm.queue) != 0 {
		t.Fatalf("third batch %v (left %d), want d", got, len(cm.queue))
	}
}

// Durable SUBMITs from many connections at once all land, in fewer etcd writes than
// requests (they share transactions).
func TestConcurrentDurableSubmitsShareWrites(t *testing.T) {
	st, ds := startLeader(t)
	const conns, each = 16, 20
	clients := make([]*client, conns)
	for i := range clients {
		clients[i] = connect(t, ds.addr)
	}
	var wg sync.WaitGroup
	errs := make(chan string, conns*each)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				c.send(&protocol.Submit{ID: uint64(2 + j), Task: durableTask(fmt.Sprintf("c%d-%d", i, j), 3600e9)})
			}
			for range each {
				m, err := c.next()
				if err != nil {
					errs <- err.Error()
					return
				}
				if st, ok := m.(*protocol.TaskStatus); !ok || st.Durability != protocol.Durable {
					errs <- fmt.Sprintf("%v %+v", m.Type(), m)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if n := len(storedIDs(t, st)); n != conns*each {
		t.Fatalf("%d records stored, want %d", n, conns*each)
	}
	if commits := ds.srv.replica.committer.commits.Load(); commits >= conns*each {
		t.Fatalf("%d etcd writes for %d submits: none shared", commits, conns*each)
	} else {
		t.Logf("%d durable submits in %d shared writes", conns*each, commits)
	}
}
