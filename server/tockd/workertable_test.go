package tockd

import (
	"errors"
	"strings"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// The worker table alone: pure logic, no router, no sockets.

func newTestTable(strategy Dispatch) *workerTable[*fakeWorker] {
	t := &workerTable[*fakeWorker]{}
	t.init(strategy)
	return t
}

func TestWorkerTableSubscribeDropTake(t *testing.T) {
	tab := newTestTable(DispatchLeastLoaded)
	w := &fakeWorker{name: "w"}
	ws, first := tab.subscribe(w, "w", []string{"a", "b"}, 2)
	if !first || ws.seq != 1 {
		t.Fatalf("first SUBSCRIBE: first=%v seq=%d, want true and 1", first, ws.seq)
	}
	if _, again := tab.subscribe(w, "w", []string{"b"}, 5); again {
		t.Fatal("a second SUBSCRIBE reported first")
	}
	if tab.byType["a"][w] != nil || tab.byType["b"][w] != ws || ws.credits != 5 {
		t.Fatalf("after resubscribing to b only: in a %v, in b %v, credits %d", tab.byType["a"][w] != nil, tab.byType["b"][w] != nil, ws.credits)
	}
	f := &protocol.Fire{RunID: 7, Namespace: "ns", TaskID: "t", TaskType: "b"}
	tab.charge(ws, f)
	if ws.credits != 4 {
		t.Fatalf("credits after a charge: %d, want 4", ws.credits)
	}
	if key, fired := tab.take(w, 7); !fired || key != (taskKey{"ns", "t"}) {
		t.Fatalf("take(7) = %v, %v; want its task, true", key, fired)
	}
	if _, fired := tab.take(w, 7); fired {
		t.Fatal("a run was taken twice")
	}
	tab.charge(ws, f)
	if inflight := tab.drop(w); len(inflight) != 1 {
		t.Fatalf("drop returned %d runs in flight, want 1", len(inflight))
	}
	if len(tab.workers) != 0 || len(tab.byType["b"]) != 0 {
		t.Fatalf("after drop: %d workers, %d subscribed to b", len(tab.workers), len(tab.byType["b"]))
	}
	if _, err := tab.verify(); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerTableChooseSkipsTriedAndCreditless(t *testing.T) {
	tab := newTestTable(DispatchLeastLoaded)
	w1, w2, w3 := &fakeWorker{name: "1"}, &fakeWorker{name: "2"}, &fakeWorker{name: "3"}
	tab.subscribe(w1, "1", []string{"a"}, 3)
	tab.subscribe(w2, "2", []string{"a"}, 5)
	tab.subscribe(w3, "3", []string{"a"}, 0)
	if got, _, _ := tab.choose("a", 0, nil); got != w2 {
		t.Fatalf("least loaded chose %s, want 2 (most credits)", got.name)
	}
	if got, _, _ := tab.choose("a", 0, map[*fakeWorker]bool{w2: true}); got != w1 {
		t.Fatalf("with 2 tried, chose %s, want 1", got.name)
	}
	if _, _, ok := tab.choose("a", 0, map[*fakeWorker]bool{w1: true, w2: true}); ok {
		t.Fatal("chose a worker with no credit")
	}
	if _, _, ok := tab.choose("other", 0, nil); ok {
		t.Fatal("chose a worker for a type no one subscribes to")
	}
}

// verify must catch each broken invariant: a check that cannot fail proves nothing.
func TestWorkerTableVerifyCatchesBrokenState(t *testing.T) {
	for _, c := range []struct {
		name    string
		breakIt func(tab *workerTable[*fakeWorker], w1, w2 *fakeWorker)
		want    string
	}{
		{"state not the workers' one", func(tab *workerTable[*fakeWorker], w1, _ *fakeWorker) {
			tab.byType["a"][w1] = &workerState{types: []string{"a"}}
		}, "not workers'"},
		{"subscribed elsewhere", func(tab *workerTable[*fakeWorker], w1, _ *fakeWorker) {
			tab.byType["z"] = map[*fakeWorker]*workerState{w1: tab.workers[w1]}
		}, "subscribed to"},
		{"missing from byType", func(tab *workerTable[*fakeWorker], w1, _ *fakeWorker) {
			delete(tab.byType["a"], w1)
		}, "not in byType"},
		{"in flight twice", func(tab *workerTable[*fakeWorker], w1, w2 *fakeWorker) {
			tab.workers[w1].inflight[9] = taskKey{"ns", "x"}
			tab.workers[w2].inflight[9] = taskKey{"ns", "x"}
		}, "two workers"},
		{"shards miscounted", func(tab *workerTable[*fakeWorker], w1, _ *fakeWorker) {
			tab.workers[w1].shardsOf = map[taskKey]int{{"ns", "x"}: 1} // no run of it in flight
		}, "shards of"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tab := newTestTable(DispatchRoundRobin)
			w1, w2 := &fakeWorker{name: "1"}, &fakeWorker{name: "2"}
			tab.subscribe(w1, "1", []string{"a"}, 1)
			tab.subscribe(w2, "2", []string{"a"}, 1)
			if _, err := tab.verify(); err != nil {
				t.Fatalf("a sound table failed verify: %v", err)
			}
			c.breakIt(tab, w1, w2)
			_, err := tab.verify()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("verify after breaking it = %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// The router's own verify catches what only it can see: the waiting count and runs both
// waiting and in flight, and pushed runs never flushed.
func TestRouterVerifyCatchesBrokenState(t *testing.T) {
	tr := newTestRouter(t, Options{MaxWaitingRuns: 10, MaxWaitingRunsPerType: 10})
	w := &fakeWorker{name: "w", room: -1}
	tr.r.subscribe(w, "w", []string{"a"}, 1)
	tr.r.route(&protocol.Fire{RunID: 1, TaskType: "a", Namespace: "ns", TaskID: "t1"}, false)
	tr.r.route(&protocol.Fire{RunID: 2, TaskType: "a", Namespace: "ns", TaskID: "t2"}, false)
	tr.verify()
	tr.r.mu.Lock()
	tr.r.nWaiting++
	tr.r.mu.Unlock()
	if err := tr.r.verify(); err == nil || !strings.Contains(err.Error(), "nWaiting") {
		t.Fatalf("verify with a miscounted wait = %v, want nWaiting named", err)
	}
	tr.r.mu.Lock()
	tr.r.nWaiting--
	tr.r.table.workers[w].inflight[2] = taskKey{"ns", "t2"}
	tr.r.mu.Unlock()
	if err := tr.r.verify(); err == nil || !strings.Contains(err.Error(), "both waiting and in flight") {
		t.Fatalf("verify with a run in two places = %v", err)
	}
	tr.r.mu.Lock()
	delete(tr.r.table.workers[w].inflight, 2)
	tr.r.pushed.add(w)
	tr.r.mu.Unlock()
	if err := tr.r.verify(); err == nil || !strings.Contains(err.Error(), "never flushed") {
		t.Fatalf("verify with a push never flushed = %v", err)
	}
}

// sinkWorker takes every FIRE and keeps none: the router's own cost, without a fake's
// bookkeeping.
type sinkWorker struct {
	name string
	last **sinkWorker // set to the worker pushed last
}

func (w *sinkWorker) push(*protocol.Fire) bool { *w.last = w; return true }
func (*sinkWorker) flush()                     {}
func (*sinkWorker) setBackedUp()               {}
func (*sinkWorker) evict()                     {}

// BenchmarkRouterFireAck is one run through the router: routed to one of 8 workers
// (least loaded), then taken by its ACK and the credit given back. It allocates nothing.
func BenchmarkRouterFireAck(b *testing.B) {
	opts := Options{ReconnectGrace: -1}
	opts.setDefaults()
	r := &router[*sinkWorker]{}
	r.init(newFakeEngine(), &opts, true)
	var owner *sinkWorker
	workers := make([]*sinkWorker, 8)
	for i := range workers {
		workers[i] = &sinkWorker{name: string(rune('a' + i)), last: &owner}
		r.subscribe(workers[i], workers[i].name, []string{"t"}, 64)
	}
	f := &protocol.Fire{Namespace: "ns", TaskID: "task", TaskType: "t"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.RunID = uint64(i)
		if err := r.route(f, false); !errors.Is(err, task.ErrDeferred) {
			b.Fatalf("route: %v, want the run fired (deferred to its ACK)", err)
		}
		if _, fired, _ := r.take(owner, 1, r.epoch, f.RunID); !fired {
			b.Fatal("the run was not in flight")
		}
		r.credit(owner, 1)
	}
}

// The shards of one task go to distinct workers while some worker runs none of them,
// whichever strategy, and then evenly (to the worker running fewest); a shard taken
// back is no longer counted.
func TestWorkerTableSpreadsShards(t *testing.T) {
	for _, strategy := range []Dispatch{DispatchLeastLoaded, DispatchRoundRobin, DispatchKeyHash} {
		t.Run(strategy.String(), func(t *testing.T) {
			tab := newTestTable(strategy)
			ws := []*fakeWorker{{name: "1"}, {name: "2"}, {name: "3"}, {name: "4"}}
			for i, w := range ws {
				tab.subscribe(w, w.name, []string{"a"}, uint64(10+i)) // least loaded alone would pick 4 every time
			}
			task := taskKey{"ns", "s"}
			fire := func(runID uint64, i int) *fakeWorker {
				f := &protocol.Fire{RunID: runID, Namespace: "ns", TaskID: "s", TaskType: "a", Shard: protocol.ShardOf{Index: uint16(i), Of: 8}}
				w, st, ok := tab.chooseSpread("a", tab.dispatchKey(f), nil, &task)
				if !ok {
					t.Fatalf("no worker for shard %d", i)
				}
				tab.charge(st, f)
				return w
			}
			seen := map[*fakeWorker]int{}
			for i := range 8 {
				w := fire(uint64(i+1), i)
				seen[w]++
				if i < 4 && seen[w] != 1 {
					t.Fatalf("shard %d went to worker %s, already running one, with others idle", i, w.name)
				}
			}
			for _, w := range ws {
				if seen[w] != 2 {
					t.Errorf("worker %s runs %d of 8 shards, want 2 (%v)", w.name, seen[w], seen)
				}
			}
			if _, err := tab.verify(); err != nil {
				t.Fatal(err)
			}
			for runID := uint64(1); runID <= 8; runID++ {
				for _, w := range ws {
					tab.take(w, runID)
				}
			}
			for _, w := range ws {
				if n := len(tab.workers[w].shardsOf); n != 0 {
					t.Errorf("worker %s still counts shards of %d tasks", w.name, n)
				}
			}
		})
	}
}
