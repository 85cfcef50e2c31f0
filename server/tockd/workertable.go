package tockd

import (
	"fmt"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/tock-sched/tock/server/protocol"
)

// workerTable is the router's table of worker connections: each one's state (types,
// credits, runs in flight), the subscribed workers of each type, and the choice of the
// worker a run goes to (Options.Dispatch). It knows nothing of leadership, waiting runs
// or the engine: the router decides whether a run may be fired, the table only which
// worker takes it.
//
// Invariants (checked by verify):
//   - byType[t] holds exactly the workers whose state lists type t, and the state held
//     for each is workers[w]: ∀ t, w: byType[t][w] = ws ⇔ workers[w] = ws ∧ t ∈ ws.types.
//   - A run is in flight on one worker at most: ∀ w ≠ w': inflight(w) ∩ inflight(w') = ∅.
//   - seq numbers workers in first-SUBSCRIBE order, from 1; 0 only before SUBSCRIBE.
//
// Locking: guarded by router.mu; every method requires it.
//
// Costs: choose is O(workers of the type); state, take and charge are O(1); subscribe
// and drop are O(types of the worker).
type workerTable[W workerConn] struct {
	strategy Dispatch
	workers  map[W]*workerState            // every worker connection that subscribed or sent CARRY, until dropped
	byType   map[string]map[W]*workerState // subscribed, open worker connections per type
	nextSeq  uint64                        // numbers worker connections in subscription order
	lastRR   map[string]uint64             // per type: seq of the worker the last round-robin FIRE went to
}

// workerState is the router's record of one worker connection; guarded by router.mu.
type workerState struct {
	types    []string
	credits  uint64
	seq      uint64             // subscription order, from 1 (round robin; tie-break; registry entry); 0 until SUBSCRIBE
	weight   uint64             // xxhash of the worker's HELLO name (key hashing)
	since    time.Time          // first SUBSCRIBE (the registry)
	inflight map[uint64]taskKey // runs FIREd on this connection and not yet ACKed/NACKed
	carried  bool               // it handed in at a takeover: SUBSCRIBEd after its CARRYs (carry.go)
	// shardsOf counts, per sharded task, its runs in flight here (nil until one is
	// fired here): chooseSpread prefers the worker running fewest of the task's shards.
	shardsOf map[taskKey]int
}

// init readies an empty table choosing workers by strategy.
func (t *workerTable[W]) init(strategy Dispatch) {
	t.strategy = strategy
	t.workers, t.byType, t.lastRR = map[W]*workerState{}, map[string]map[W]*workerState{}, map[string]uint64{}
}

// state is w's record, made on its first use. Requires router.mu.
func (t *workerTable[W]) state(w W) *workerState {
	ws := t.workers[w]
	if ws == nil {
		ws = &workerState{inflight: map[uint64]taskKey{}}
		t.workers[w] = ws
	}
	return ws
}

// subscribe replaces w's types and credits, and returns its state; first is true for
// w's first SUBSCRIBE, which numbers it and hashes its HELLO name. Requires router.mu.
func (t *workerTable[W]) subscribe(w W, name string, types []string, credits uint64) (ws *workerState, first bool) {
	ws = t.state(w)
	for _, typ := range ws.types {
		delete(t.byType[typ], w)
	}
	ws.types, ws.credits = append([]string(nil), types...), credits
	if ws.seq == 0 {
		t.nextSeq++
		ws.seq, ws.weight, ws.since = t.nextSeq, xxhash.Sum64String(name), time.Now()
		first = true
	}
	for _, typ := range ws.types {
		if t.byType[typ] == nil {
			t.byType[typ] = map[W]*workerState{}
		}
		t.byType[typ][w] = ws
	}
	return ws, first
}

// drop forgets w and returns its runs in flight (nil if it had no record). Requires
// router.mu.
func (t *workerTable[W]) drop(w W) map[uint64]taskKey {
	ws := t.workers[w]
	if ws == nil {
		return nil
	}
	delete(t.workers, w)
	for _, typ := range ws.types {
		delete(t.byType[typ], w)
	}
	return ws.inflight
}

// take removes runID from w's runs in flight, and returns its task: fired is false when
// it was not there. Requires router.mu.
func (t *workerTable[W]) take(w W, runID uint64) (key taskKey, fired bool) {
	if ws := t.workers[w]; ws != nil {
		key, fired = ws.inflight[runID]
		delete(ws.inflight, runID)
		if n, ok := ws.shardsOf[key]; fired && ok { // a sharded task's runs are all shards
			if n <= 1 {
				delete(ws.shardsOf, key)
			} else {
				ws.shardsOf[key] = n - 1
			}
		}
	}
	return key, fired
}

// dispatchKey is f's key for DispatchKeyHash (0 for the other strategies): its task's
// namespace and ID, mixed.
func (t *workerTable[W]) dispatchKey(f *protocol.Fire) uint64 {
	if t.strategy != DispatchKeyHash {
		return 0
	}
	return xxhash.Sum64String(f.Namespace) ^ xxhash.Sum64String(f.TaskID)*0x9E3779B97F4A7C15
}

// choose returns the subscribed worker of typ the strategy picks among those with a
// credit and not in tried (key: dispatchKey's), and its state; ok is false when there
// is none. Requires router.mu.
func (t *workerTable[W]) choose(typ string, key uint64, tried map[W]bool) (best W, bestState *workerState, ok bool) {
	return t.chooseSpread(typ, key, tried, nil)
}

// chooseSpread is choose for a run of the sharded task spread (nil for any other run):
// the worker running fewest of its shards wins (so a worker running none, where there
// is one, over every worker running some), and among those the strategy picks.
// Requires router.mu.
func (t *workerTable[W]) chooseSpread(typ string, key uint64, tried map[W]bool, spread *taskKey) (best W, bestState *workerState, ok bool) {
	var bestScore uint64
	bestShards := 0
	for w, ws := range t.byType[typ] {
		if ws.credits == 0 || tried[w] {
			continue
		}
		shards := 0
		if spread != nil {
			shards = ws.shardsOf[*spread]
		}
		if bestState != nil && shards != bestShards {
			if shards > bestShards {
				continue
			}
			bestState = nil // fewer of the task's shards beats any score
		}
		var score uint64
		switch t.strategy {
		case DispatchRoundRobin:
			// The next worker after the last one served, in subscription order,
			// wrapping around: seqs just after the last score highest.
			score = ^(ws.seq - t.lastRR[typ] - 1)
		case DispatchKeyHash:
			// Rendezvous hashing: the key goes to the worker with the highest hash of
			// (key, worker); a worker joining or leaving moves only the keys it wins or
			// won.
			score = mix64(key ^ ws.weight)
		default: // DispatchLeastLoaded
			score = ws.credits
		}
		if bestState == nil || score > bestScore || (score == bestScore && ws.seq < bestState.seq) {
			best, bestState, bestScore, bestShards = w, ws, score, shards
		}
	}
	return best, bestState, bestState != nil
}

// charge records that f went to the worker whose state is ws: one credit spent, the run
// in flight on it, and the round robin's position. Requires router.mu.
func (t *workerTable[W]) charge(ws *workerState, f *protocol.Fire) {
	ws.credits--
	t.inflightOn(ws, f.RunID, taskKey{f.Namespace, f.TaskID}, f.Shard.Of > 1)
	if t.strategy == DispatchRoundRobin {
		t.lastRR[f.TaskType] = ws.seq
	}
}

// inflightOn records run runID of task k (a shard of it: shard) in flight on the worker
// whose state is ws. Requires router.mu.
func (t *workerTable[W]) inflightOn(ws *workerState, runID uint64, k taskKey, shard bool) {
	ws.inflight[runID] = k
	if shard {
		if ws.shardsOf == nil {
			ws.shardsOf = map[taskKey]int{}
		}
		ws.shardsOf[k]++
	}
}

// each calls fn with each subscribed worker (one with a type) and its state. Requires
// router.mu.
func (t *workerTable[W]) each(fn func(W, *workerState)) {
	for w, ws := range t.workers {
		if len(ws.types) > 0 {
			fn(w, ws)
		}
	}
}

// verify checks the table's invariants and returns the runs in flight; the router's
// verify adds its own. Cost: O(workers × types + runs in flight). Requires router.mu.
func (t *workerTable[W]) verify() (inflight map[uint64]bool, err error) {
	for typ, set := range t.byType {
		for w, ws := range set {
			if t.workers[w] != ws {
				return nil, fmt.Errorf("byType[%q] holds a worker whose state is not workers'", typ)
			}
			if !slices.Contains(ws.types, typ) {
				return nil, fmt.Errorf("byType[%q] holds worker %d, subscribed to %q", typ, ws.seq, ws.types)
			}
		}
	}
	inflight = map[uint64]bool{}
	for w, ws := range t.workers {
		for _, typ := range ws.types {
			if t.byType[typ][w] != ws {
				return nil, fmt.Errorf("worker %d subscribes to %q but is not in byType", ws.seq, typ)
			}
		}
		perTask := map[taskKey]int{}
		for runID, k := range ws.inflight {
			if inflight[runID] {
				return nil, fmt.Errorf("run %d is in flight on two workers", runID)
			}
			inflight[runID] = true
			perTask[k]++
		}
		for k, n := range ws.shardsOf { // shards counted are runs in flight
			if n <= 0 || n > perTask[k] {
				return nil, fmt.Errorf("worker %d counts %d shards of %v in flight, with %d runs of it", ws.seq, n, k, perTask[k])
			}
		}
	}
	return inflight, nil
}

// pushedConns are the worker connections pushed a run since the last flush, each once:
// the router flushes them before it lets go of router.mu, so that the runs one call
// fired leave together (one FIRES frame per worker). Guarded by router.mu.
type pushedConns[W workerConn] []W

// add records that w was pushed a run. O(connections pushed since the flush).
func (p *pushedConns[W]) add(w W) {
	if !slices.Contains(*p, w) {
		*p = append(*p, w)
	}
}

// flush flushes each connection recorded and forgets them (keeping the slice's room).
func (p *pushedConns[W]) flush() {
	s := *p
	for i, w := range s {
		w.flush()
		var zero W
		s[i] = zero
	}
	*p = s[:0]
}

// typeSet is a set of task type names (the paused types). Guarded by router.mu.
type typeSet map[string]bool

// sorted lists the set's types in order.
func (s typeSet) sorted() []string {
	out := make([]string, 0, len(s))
	for typ := range s {
		out = append(out, typ)
	}
	slices.Sort(out)
	return out
}
