package tockd

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// Versions 2 and 3 of the same durable task submitted at once, 1,000 times over, from
// two connections: whichever the engine refuses, the record of every accepted submit
// stays in etcd (a refused version's clean-up deletes only its own record, never the
// version that won).
func TestConcurrentVersionsKeepTheWinnersRecord(t *testing.T) {
	st, ds := startLeader(t)
	// Many connections a side, so that the request that commits a shared write often
	// commits later ones too (commit.go) and reaches the engine after its rival.
	const pairs, conns = 1000, 20
	accepted := make([]map[string]uint64, 2) // per side: task ID -> version accepted
	var mu sync.Mutex
	var wg sync.WaitGroup
	for side, version := range []uint64{2, 3} {
		accepted[side] = map[string]uint64{}
		for ci := range conns {
			c := connect(t, ds.addr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				for i := ci; i < pairs; i += conns {
					w := durableTask(fmt.Sprintf("k%d", i), time.Hour)
					w.Version = version
					c.send(&protocol.Submit{ID: uint64(2 + i), Task: w})
					n++
				}
				for range n {
					m, err := c.next()
					if err != nil {
						t.Errorf("v%d connection %d: %v", version, ci, err)
						return
					}
					switch r := m.(type) {
					case *protocol.TaskStatus:
						mu.Lock()
						accepted[side][r.TaskID] = r.Version
						mu.Unlock()
					case *protocol.Error:
						if r.Code != protocol.CodeExists {
							t.Errorf("v%d refused with %v (%s), want EXISTS at most", version, r.Code, r.Message)
						}
					default:
						t.Errorf("reply %v %+v", m.Type(), m)
					}
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("accepted: %d v2, %d v3", len(accepted[0]), len(accepted[1]))
	stored := storedVersions(t, st)
	lost := 0
	for i := range pairs {
		id := fmt.Sprintf("k%d", i)
		want := max(accepted[0][id], accepted[1][id])
		if want == 0 {
			t.Errorf("%s: neither version accepted", id)
			continue
		}
		if got := stored["default/"+id]; got != want {
			if lost++; lost <= 5 {
				t.Errorf("%s: accepted at version %d, record in etcd at version %d (0: none)", id, want, got)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d accepted tasks have no record of their version in etcd", lost, pairs)
	}
}

// The interleaving the concurrent test hunts for, made to happen: v2 and v3 both claimed
// and recorded (v3 replacing v2's record), v3 reaches the engine first, and v2, refused
// there, must not take v3's record with it.
func TestRefusedVersionLeavesTheWinnersRecord(t *testing.T) {
	st, ds := startLeader(t)
	s := ds.srv
	w2, w3 := durableTask("k", time.Hour), durableTask("k", time.Hour)
	w2.Version, w3.Version = 2, 3
	p2 := s.requests.prepareOne(&w2)
	p3 := s.requests.prepareOne(&w3)
	s.requests.writeRecords(p2)
	s.requests.writeRecords(p3)
	if _, err := s.requests.submitPrepared(&p3[0]); err != nil {
		t.Fatalf("v3: %v", err)
	}
	if _, err := s.requests.submitPrepared(&p2[0]); err == nil {
		t.Fatal("v2 accepted after v3")
	}
	if got := storedVersions(t, st)["default/k"]; got != 3 {
		t.Fatalf("record at version %d after v2 was refused, want v3's (0: none)", got)
	}
}

// The deleter's side of the same hole: version 1 ended (its delete queued) and version 2
// was claimed before the deleter took the batch. Whether v2's write then fails or lands
// first, the delete removes v1's record and only v1's.
func TestQueuedDeleteBesideAResubmit(t *testing.T) {
	for _, v2Lands := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2_lands=%v", v2Lands), func(t *testing.T) {
			st, ds := startLeader(t)
			v1 := durableTask("k", time.Hour)
			v1.Version = 1
			submit(t, connect(t, ds.addr), 2, v1)
			d := ds.srv.replica.dur
			k := taskKey{"default", "k"}
			v2 := durEntry{version: 2}
			d.mu.Lock() // the deleter cannot take the batch until this is done
			ended := d.tasks[k]
			delete(d.tasks, k) // v1 ends: what onEvent does
			d.queue = append(d.queue, k)
			d.queued[k] = queuedDelete{version: ended.version, term: ended.term}
			d.tasks[k] = v2 // v2 is claimed: what prepare does
			if v2Lands {
				rec := store.Record{Namespace: "default", ID: "k", Version: 2, Body: []byte("v2")}
				if err := st.Records().Put(context.Background(), rec); err != nil {
					d.mu.Unlock()
					t.Fatal(err)
				}
			}
			d.cond.Broadcast()
			d.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), waitBound)
			defer cancel()
			d.flush(ctx)
			if !v2Lands {
				d.release(k, v2) // v2's write failed
			}
			want := uint64(0)
			if v2Lands {
				want = 2
			}
			if got, ok := storedVersions(t, st)["default/k"]; got != want || ok != (want != 0) {
				t.Fatalf("record at version %d (stored %v) after v1's delete, want %d (0: none)", got, ok, want)
			}
		})
	}
}
