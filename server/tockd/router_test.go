package tockd

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// The router's unit tests: fake worker connections and a fake engine, no sockets, no
// etcd, no goroutines. Everything the router does happens inside the call under test,
// so each test checks the outcome right after the call.

// fakeWorker is a worker connection whose reply queue takes room more FIREs (negative:
// any number). The runs pushed count as sent once flushed.
type fakeWorker struct {
	name     string
	room     int
	pending  []*protocol.Fire // pushed, not yet flushed
	fires    []*protocol.Fire // FIREs flushed to it, in order
	flushes  []int            // the runs each flush let go
	backedUp bool             // setBackedUp was called and not yet reset by the test
	evicted  int              // times evict was called
}

func (w *fakeWorker) push(f *protocol.Fire) bool {
	if w.room == 0 {
		return false
	}
	if w.room > 0 {
		w.room--
	}
	w.pending = append(w.pending, f)
	return true
}

func (w *fakeWorker) flush() {
	if len(w.pending) > 0 {
		w.flushes = append(w.flushes, len(w.pending))
	}
	w.fires, w.pending = append(w.fires, w.pending...), nil
}

func (w *fakeWorker) setBackedUp() { w.backedUp = true }

func (w *fakeWorker) evict() { w.evicted++ }

// runIDs lists the runs FIREd at w, in order.
func (w *fakeWorker) runIDs() []uint64 {
	ids := make([]uint64, len(w.fires))
	for i, f := range w.fires {
		ids[i] = f.RunID
	}
	return ids
}

// fakeEngine records what the router asks of the engine.
type fakeEngine struct {
	held      map[uint64]bool  // run: its timeout is held (waiting); false once started
	gone      map[uint64]bool  // runs the engine no longer has: StartTimeout fails
	completed map[uint64]error // runs the router ended, with their error
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{held: map[uint64]bool{}, gone: map[uint64]bool{}, completed: map[uint64]error{}}
}

func (e *fakeEngine) HoldTimeout(runID uint64) error {
	if e.gone[runID] {
		return task.ErrUnknownRun
	}
	e.held[runID] = true
	return nil
}

func (e *fakeEngine) StartTimeout(runID uint64) error {
	if e.gone[runID] {
		return task.ErrUnknownRun
	}
	e.held[runID] = false
	return nil
}

func (e *fakeEngine) Complete(runID uint64, err error) error {
	if e.gone[runID] {
		return task.ErrUnknownRun
	}
	e.completed[runID] = err
	return nil
}

type testRouter struct {
	t   *testing.T
	r   *router[*fakeWorker]
	eng *fakeEngine
}

// newTestRouter is a leading router (no Store) with opts' routing options and defaults,
// but for ReconnectGrace: unless a test sets one, a removed worker's runs fail at once.
func newTestRouter(t *testing.T, opts Options) *testRouter {
	if opts.ReconnectGrace == 0 {
		opts.ReconnectGrace = -1
	}
	opts.setDefaults()
	tr := &testRouter{t: t, r: &router[*fakeWorker]{}, eng: newFakeEngine()}
	tr.r.init(tr.eng, &opts, true)
	return tr
}

// worker subscribes a new fake worker to types with credits.
func (tr *testRouter) worker(name string, credits uint64, types ...string) *fakeWorker {
	w := &fakeWorker{name: name, room: -1}
	tr.r.subscribe(w, name, types, credits)
	tr.verify()
	return w
}

// route hands the router a run of type typ (run ID id, task ID "t<id>") and wants it
// deferred: fired or waiting.
func (tr *testRouter) route(id uint64, typ string) {
	tr.t.Helper()
	tr.routeKey(id, typ, fmt.Sprintf("t%d", id))
}

func (tr *testRouter) routeKey(id uint64, typ, taskID string) {
	tr.t.Helper()
	if err := tr.r.route(&protocol.Fire{Namespace: task.DefaultNamespace, TaskID: taskID, TaskType: typ, RunID: id}, false); !errors.Is(err, task.ErrDeferred) {
		tr.t.Fatalf("route of run %d (%s): %v, want ErrDeferred", id, typ, err)
	}
	tr.verify()
}

func (tr *testRouter) verify() {
	tr.t.Helper()
	if err := tr.r.verify(); err != nil {
		tr.t.Fatalf("router invariant broken: %v", err)
	}
}

// state is w's record (nil if none).
func (tr *testRouter) state(w *fakeWorker) *workerState {
	tr.r.mu.Lock()
	defer tr.r.mu.Unlock()
	return tr.r.table.workers[w]
}

func (tr *testRouter) wantWaiting(n int) {
	tr.t.Helper()
	if got := tr.r.waitingLen(); got != n {
		tr.t.Fatalf("%d runs waiting, want %d", got, n)
	}
}

func wantRuns(t *testing.T, w *fakeWorker, want ...uint64) {
	t.Helper()
	if got := w.runIDs(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("worker %s got runs %v, want %v", w.name, got, want)
	}
}

func TestRouterSubscribeUnsubscribe(t *testing.T) {
	tr := newTestRouter(t, Options{})
	w := tr.worker("w", 10, "a")
	tr.route(1, "a")
	wantRuns(t, w, 1)
	if tr.eng.held[1] {
		t.Fatal("a run fired at once had its timeout held")
	}
	tr.route(2, "b") // nobody serves b: it waits, its timeout held
	tr.wantWaiting(1)
	if !tr.eng.held[2] {
		t.Fatal("a waiting run's timeout is not held")
	}

	// A second SUBSCRIBE replaces the types (and credits): b's waiting run goes out,
	// with its timeout started afresh, and a is no longer served.
	tr.r.subscribe(w, w.name, []string{"b"}, 1)
	tr.verify()
	wantRuns(t, w, 1, 2)
	if tr.eng.held[2] {
		t.Fatal("a run fired from the waiting queue still has its timeout held")
	}
	tr.wantWaiting(0)
	tr.r.subscribe(w, w.name, []string{"b"}, 5)
	tr.route(3, "a")
	wantRuns(t, w, 1, 2)
	tr.wantWaiting(1)
	if st := tr.state(w); st.seq != 1 || st.credits != 5 {
		t.Fatalf("after resubscribing: seq %d credits %d, want 1 and 5 (numbered once; credits replaced)", st.seq, st.credits)
	}

	// Subscribing to nothing leaves the worker registered but served nowhere.
	tr.r.subscribe(w, w.name, nil, 5)
	tr.verify()
	tr.route(4, "b")
	wantRuns(t, w, 1, 2)
	tr.wantWaiting(2)
	var listed []string
	tr.r.subscribed(func(w *fakeWorker, _ *workerState) { listed = append(listed, w.name) })
	if len(listed) != 0 {
		t.Fatalf("workers subscribed to no type are listed for the registry: %v", listed)
	}

	// A second worker subscribing takes both waiting runs, oldest first per type.
	w2 := tr.worker("w2", 5, "a", "b")
	wantRuns(t, w2, 3, 4)
	tr.wantWaiting(0)
	tr.r.subscribed(func(w *fakeWorker, ws *workerState) { listed = append(listed, fmt.Sprint(w.name, ws.seq)) })
	if fmt.Sprint(listed) != "[w22]" {
		t.Fatalf("registry lists %v, want [w22]", listed)
	}
}

func TestRouterCredits(t *testing.T) {
	tr := newTestRouter(t, Options{})
	w := tr.worker("w", 0, "a")
	for id := uint64(1); id <= 3; id++ {
		tr.route(id, "a")
	}
	wantRuns(t, w)
	tr.wantWaiting(3)

	tr.r.credit(w, 2) // two credits: the two oldest go out
	tr.verify()
	wantRuns(t, w, 1, 2)
	tr.wantWaiting(1)
	if st := tr.state(w); st.credits != 0 || len(st.inflight) != 2 {
		t.Fatalf("credits %d, in flight %d; want 0 and 2", st.credits, len(st.inflight))
	}

	// ACK and NACK return no credit (PROTOCOL.md): the last run still waits.
	if _, fired, stale := tr.r.take(w, 9, 0, 1); !fired || stale != nil {
		t.Fatalf("take of run 1: fired %v, stale %v", fired, stale)
	}
	tr.wantWaiting(1)

	// Credits saturate.
	tr.r.credit(w, ^uint64(0))
	tr.r.credit(w, ^uint64(0))
	tr.verify()
	wantRuns(t, w, 1, 2, 3)
	if st := tr.state(w); st.credits != ^uint64(0) {
		t.Fatalf("credits %d, want saturated at %d", st.credits, ^uint64(0))
	}
}

func TestRouterLeastLoaded(t *testing.T) {
	tr := newTestRouter(t, Options{Dispatch: DispatchLeastLoaded})
	w1 := tr.worker("w1", 3, "a")
	w2 := tr.worker("w2", 5, "a")
	for id := uint64(1); id <= 8; id++ {
		tr.route(id, "a")
	}
	// The most free credits wins; a tie goes to the earlier subscriber:
	// 3/5 w2, 3/4 w2, 3/3 w1, 2/3 w2, 2/2 w1, 1/2 w2, 1/1 w1, 0/1 w2.
	wantRuns(t, w1, 3, 5, 7)
	wantRuns(t, w2, 1, 2, 4, 6, 8)
	tr.route(9, "a")
	tr.wantWaiting(1)
}

func TestRouterRoundRobin(t *testing.T) {
	tr := newTestRouter(t, Options{Dispatch: DispatchRoundRobin})
	w1 := tr.worker("w1", 10, "a")
	w2 := tr.worker("w2", 1, "a")
	w3 := tr.worker("w3", 10, "a")
	for id := uint64(1); id <= 7; id++ {
		tr.route(id, "a")
	}
	// In subscription order, wrapping around; w2, out of credits after one, is skipped.
	wantRuns(t, w1, 1, 4, 6)
	wantRuns(t, w2, 2)
	wantRuns(t, w3, 3, 5, 7)
}

func TestRouterKeyHash(t *testing.T) {
	tr := newTestRouter(t, Options{Dispatch: DispatchKeyHash})
	ws := []*fakeWorker{tr.worker("w1", 1000, "a"), tr.worker("w2", 1000, "a"), tr.worker("w3", 1000, "a")}
	const keys = 90
	// owner is the worker each key's runs go to.
	owner := func(id uint64) *fakeWorker {
		for _, w := range ws {
			if n := len(w.fires); n > 0 && w.fires[n-1].RunID == id {
				return w
			}
		}
		t.Fatalf("run %d was not fired", id)
		return nil
	}
	first := map[string]*fakeWorker{}
	id := uint64(0)
	for round := 0; round < 3; round++ {
		for k := 0; k < keys; k++ {
			id++
			key := fmt.Sprintf("key%d", k)
			tr.routeKey(id, "a", key)
			w := owner(id)
			if first[key] == nil {
				first[key] = w
			} else if w != first[key] {
				t.Fatalf("round %d: key %s went to %s, before to %s", round, key, w.name, first[key].name)
			}
		}
	}
	perWorker := map[*fakeWorker]int{}
	for _, w := range first {
		perWorker[w]++
	}
	for _, w := range ws {
		// 90 keys over 3 workers: 30 each on average; none gets fewer than 10 unless
		// the hash is badly skewed (the hash is fixed, so this cannot flake).
		if perWorker[w] < 10 {
			t.Fatalf("worker %s owns %d of %d keys: %v", w.name, perWorker[w], keys, perWorker)
		}
	}

	// Rendezvous: removing w3 moves only the keys w3 owned.
	tr.r.remove(ws[2], false)
	tr.verify()
	ws = ws[:2]
	for k := 0; k < keys; k++ {
		id++
		key := fmt.Sprintf("key%d", k)
		tr.routeKey(id, "a", key)
		if w := owner(id); first[key].name != "w3" && w != first[key] {
			t.Fatalf("key %s moved from %s to %s when w3 left", key, first[key].name, w.name)
		}
	}
}

func TestRouterWaitingBounds(t *testing.T) {
	tr := newTestRouter(t, Options{MaxWaitingRuns: 3, MaxWaitingRunsPerType: 2})
	tr.route(1, "a")
	tr.route(2, "a")
	routeErr := func(id uint64, typ string) error {
		return tr.r.route(&protocol.Fire{Namespace: task.DefaultNamespace, TaskID: fmt.Sprint(id), TaskType: typ, RunID: id}, false)
	}
	err := routeErr(3, "a") // a has MaxWaitingRunsPerType waiting
	if !errors.Is(err, errNoWorker) || !strings.Contains(err.Error(), "MaxWaitingRunsPerType") {
		t.Fatalf("a third run of a: %v, want errNoWorker (MaxWaitingRunsPerType)", err)
	}
	tr.route(4, "b") // another type still has room
	err = routeErr(5, "c")
	if !errors.Is(err, errNoWorker) || !strings.Contains(err.Error(), "(MaxWaitingRuns)") {
		t.Fatalf("a fourth waiting run: %v, want errNoWorker (MaxWaitingRuns)", err)
	}
	if tr.eng.held[3] || tr.eng.held[5] {
		t.Fatal("a refused run's timeout was held")
	}
	tr.verify()
	tr.wantWaiting(3)

	// A worker taking a's runs makes room for a again.
	w := tr.worker("w", 2, "a")
	wantRuns(t, w, 1, 2)
	tr.route(6, "a")
	tr.route(7, "a")
	tr.wantWaiting(3)
}

// TestRouterWaitingBoundsChanged: bounds lowered below the runs waiting (the runtime
// configuration's max_waiting_runs) refuse new runs and keep the waiting ones, which
// still go out; raised, they admit runs again.
func TestRouterWaitingBoundsChanged(t *testing.T) {
	tr := newTestRouter(t, Options{})
	tr.route(1, "a")
	tr.route(2, "a")
	tr.route(3, "b")
	tr.r.setWaitingLimits(2, 1)
	tr.verify()
	tr.wantWaiting(3)
	for _, typ := range []string{"a", "c"} {
		err := tr.r.route(&protocol.Fire{Namespace: task.DefaultNamespace, TaskID: "x", TaskType: typ, RunID: 9}, false)
		if !errors.Is(err, errNoWorker) {
			t.Fatalf("a run of %s over the lowered bounds: %v, want errNoWorker", typ, err)
		}
	}
	wantRuns(t, tr.worker("w", 2, "a"), 1, 2)
	tr.r.setWaitingLimits(10, 5)
	tr.route(4, "c")
	tr.route(5, "c")
	tr.wantWaiting(3)
}

func TestRouterBackedUpWorker(t *testing.T) {
	tr := newTestRouter(t, Options{})
	full := tr.worker("full", 5, "a")
	full.room = 0 // not reading: its reply queue is full
	other := tr.worker("other", 1, "a")

	tr.route(1, "a") // full has more credits but no room: skipped for other
	if !full.backedUp {
		t.Fatal("a FIRE that found the queue full did not report it backed up")
	}
	wantRuns(t, full)
	wantRuns(t, other, 1)
	if st := tr.state(full); st.credits != 5 || len(st.inflight) != 0 {
		t.Fatalf("a FIRE not queued spent a credit (%d left) or is in flight (%d)", st.credits, len(st.inflight))
	}

	full.backedUp = false
	tr.route(2, "a") // other has no credit left: the run waits for full's room
	tr.wantWaiting(1)
	if !full.backedUp {
		t.Fatal("the FIRE that found the queue full again did not report it backed up")
	}
	tr.r.offer(other) // a worker without credit offers nothing
	tr.wantWaiting(1)

	full.room = -1 // its writer made room, and offers the waiting runs again
	tr.r.offer(full)
	tr.verify()
	wantRuns(t, full, 2)
	tr.wantWaiting(0)
	if tr.eng.held[2] {
		t.Fatal("the run fired on offer still has its timeout held")
	}
}

func TestRouterRemoveFailsRunsInFlight(t *testing.T) {
	tr := newTestRouter(t, Options{})
	w := tr.worker("w", 3, "a")
	tr.route(1, "a")
	tr.route(2, "a")
	if _, fired, _ := tr.r.take(w, 1, 0, 1); !fired { // ACKed: no longer in flight
		t.Fatal("run 1 was not in flight")
	}
	tr.r.remove(w, false)
	tr.verify()
	if len(tr.eng.completed) != 1 || !errors.Is(tr.eng.completed[2], errWorkerGone) {
		t.Fatalf("engine completions %v, want run 2 failed with errWorkerGone", tr.eng.completed)
	}
	if n := tr.r.redelivered.Load(); n != 1 {
		t.Fatalf("redelivered %d, want 1", n)
	}
	if tr.state(w) != nil {
		t.Fatal("a removed worker keeps its record")
	}
	tr.route(3, "a") // no worker left
	tr.wantWaiting(1)
	if _, fired, _ := tr.r.take(w, 1, 0, 2); fired {
		t.Fatal("a removed worker's run is still in flight")
	}
	tr.r.offer(w) // its writer's last offer does nothing
	tr.wantWaiting(1)
}

// With a ReconnectGrace, a removed worker's runs in flight are kept as orphans: one
// taken by a carried outcome (the worker reconnected) is not failed; one whose grace
// ends is failed (redelivered); a step-down hands the rest back, unfailed.
func TestRouterKeepsOrphansForTheGrace(t *testing.T) {
	tr := newTestRouter(t, Options{ReconnectGrace: time.Hour}) // the test ends the grace itself
	tr.r.setLeading(true, 7, nil, nil)
	w := tr.worker("w", 3, "a")
	for id := uint64(1); id <= 3; id++ {
		tr.route(id, "a")
	}
	tr.r.remove(w, false)
	tr.verify()
	if len(tr.eng.completed) != 0 {
		t.Fatalf("runs failed at the disconnect: %v", tr.eng.completed)
	}
	tr.r.mu.Lock()
	wrongTask := tr.r.orphans.take(1, taskKey{task.DefaultNamespace, "t2"}, 7, tr.r.epoch)
	wrongEpoch := tr.r.orphans.take(1, taskKey{task.DefaultNamespace, "t1"}, 6, tr.r.epoch)
	took := tr.r.orphans.take(1, taskKey{task.DefaultNamespace, "t1"}, 7, tr.r.epoch)
	again := tr.r.orphans.take(1, taskKey{task.DefaultNamespace, "t1"}, 7, tr.r.epoch)
	tr.r.mu.Unlock()
	if wrongTask || wrongEpoch || !took || again {
		t.Fatalf("taking orphan 1: other task %v, other epoch %v, its own %v, twice %v; want only its own, once", wrongTask, wrongEpoch, took, again)
	}
	tr.r.expireOrphan(2, 7) // its grace ends
	if len(tr.eng.completed) != 1 || !errors.Is(tr.eng.completed[2], errWorkerGone) || tr.r.redelivered.Load() != 1 {
		t.Fatalf("after run 2's grace: completions %v, redelivered %d; want run 2 failed", tr.eng.completed, tr.r.redelivered.Load())
	}
	tr.r.setLeading(false, 7, nil, nil)
	tr.r.expireOrphan(3, 7) // a timer that lost the race with the step-down
	if len(tr.eng.completed) != 1 {
		t.Fatalf("a step-down's orphan was failed: %v", tr.eng.completed)
	}
}

func TestRouterRemoveHandsBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		draining bool
	}{{"draining", true}, {"deposed", false}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestRouter(t, Options{})
			w := tr.worker("w", 3, "a")
			tr.route(1, "a")
			if !tc.draining {
				tr.r.setLeading(false, 0, nil, nil)
			}
			tr.r.remove(w, tc.draining)
			tr.verify()
			if len(tr.eng.completed) != 0 || tr.r.redelivered.Load() != 0 {
				t.Fatalf("runs in flight were failed, not handed back: %v", tr.eng.completed)
			}
		})
	}
}

func TestRouterTakeStaleEpoch(t *testing.T) {
	tr := newTestRouter(t, Options{})
	tr.r.setLeading(true, 7, nil, nil)
	w := tr.worker("w", 3, "a")
	tr.route(1, "a")
	tr.route(2, "a")
	if w.fires[0].Epoch != 7 {
		t.Fatalf("FIRE epoch %d, want 7", w.fires[0].Epoch)
	}
	if _, fired, stale := tr.r.take(w, 5, 6, 1); fired || stale == nil || stale.Code != protocol.CodeStaleEpoch || stale.ID != 5 {
		t.Fatalf("take with a stale epoch: fired %v, error %+v; want STALE_EPOCH, id 5", fired, stale)
	}
	key, fired, stale := tr.r.take(w, 5, 7, 1)
	if !fired || stale != nil || key != (taskKey{task.DefaultNamespace, "t1"}) {
		t.Fatalf("take: key %v fired %v stale %v", key, fired, stale)
	}
	if _, fired, _ := tr.r.take(w, 5, 7, 1); fired {
		t.Fatal("a run taken twice")
	}
	keys, fireds, stale := tr.r.takeAll(w, 6, 7, []uint64{2, 1, 2})
	if stale != nil || fmt.Sprint(fireds) != "[true false false]" || keys[0].id != "t2" {
		t.Fatalf("takeAll: keys %v fired %v stale %v", keys, fireds, stale)
	}
	tr.r.setLeading(false, 7, nil, nil)
	if _, _, stale := tr.r.takeAll(w, 8, 7, []uint64{3}); stale == nil || !strings.Contains(stale.Message, "no longer leads") {
		t.Fatalf("takeAll while not leading: %+v", stale)
	}
	tr.verify()
}

func TestRouterPauseAndLeadership(t *testing.T) {
	tr := newTestRouter(t, Options{})
	w := tr.worker("w", 10, "a", "b")
	tr.r.pause("a", true)
	tr.route(1, "a") // paused: waits although w has credits
	tr.route(2, "b")
	wantRuns(t, w, 2)
	tr.r.pause("a", false)
	tr.verify()
	wantRuns(t, w, 2, 1)

	if changed, _ := tr.r.setLeading(false, 3, nil, nil); !changed {
		t.Fatal("losing leadership is no change")
	}
	tr.route(3, "b") // not leading: waits
	tr.wantWaiting(1)
	tr.route(4, "b")
	tr.eng.gone[4] = true // cancelled while it waits: dropped when its turn comes
	tr.route(5, "b")
	tr.wantWaiting(3)
	if changed, _ := tr.r.setLeading(true, 4, nil, nil); !changed {
		t.Fatal("gaining leadership is no change")
	}
	tr.verify()
	tr.wantWaiting(0)
	wantRuns(t, w, 2, 1, 3, 5)
	if f := w.fires[2]; f.Epoch != 4 {
		t.Fatalf("a run fired on taking over carries epoch %d, want 4", f.Epoch)
	}
	if changed, _ := tr.r.setLeading(true, 4, nil, nil); changed {
		t.Fatal("leading again at the same epoch is a change")
	}
	if leading, epoch := tr.r.leadership(); !leading || epoch != 4 {
		t.Fatalf("leadership %v %d", leading, epoch)
	}
}

// evictAll sends away every subscribed worker, once each whatever its types, and none
// that has not subscribed (a connection that only sent CARRY) or that was removed.
func TestRouterEvictAll(t *testing.T) {
	tr := newTestRouter(t, Options{})
	both := tr.worker("both", 1, "a", "b")
	one := tr.worker("one", 1, "b")
	gone := tr.worker("gone", 1, "a")
	tr.r.remove(gone, false)
	carrier := &fakeWorker{name: "carrier", room: -1}
	tr.r.mu.Lock()
	tr.r.hold.handIn(tr.r.table.state(carrier))
	tr.r.mu.Unlock()
	tr.verify()

	tr.r.evictAll()
	for w, want := range map[*fakeWorker]int{both: 1, one: 1, gone: 0, carrier: 0} {
		if w.evicted != want {
			t.Errorf("worker %s evicted %d times, want %d", w.name, w.evicted, want)
		}
	}
}

// A takeover indexes for carried outcomes only the waiting runs the engine still holds:
// a run left in a queue by this node's earlier term (its durable task was dropped at the
// step-down, and is loaded anew with a new run) must not take the outcome meant for the
// new run. Under load a re-elected node refused hundreds of outcomes so ("the held run
// ended meanwhile: unknown run"), and FIREd their runs again.
func TestRouterTakeoverIndexesOnlyLiveRuns(t *testing.T) {
	tr := newTestRouter(t, Options{CarryGrace: maxCarryGrace})
	tr.r.setLeading(false, 0, nil, nil)
	tr.routeKey(1, "a", "stale") // the earlier term's run, waiting still
	tr.eng.gone[1] = true        // its task dropped at the step-down
	tr.routeKey(2, "a", "live")
	tr.r.setLeading(true, 5, nil, func() int { return 1 })
	tr.r.mu.Lock()
	_, stale := tr.r.hold.held[taskKey{task.DefaultNamespace, "stale"}]
	_, live := tr.r.hold.held[taskKey{task.DefaultNamespace, "live"}]
	tr.r.mu.Unlock()
	tr.r.setLeading(false, 5, nil, nil) // stops the grace timer
	if stale || !live {
		t.Fatalf("indexed at the takeover: stale run %v, live run %v; want only the live one", stale, live)
	}
}

// A worker hands in at its first SUBSCRIBE after the takeover, which it sends after all
// its CARRY frames (a worker carrying more than protocol.MaxBatch outcomes sends several):
// the hold ends when every expected worker has subscribed, not at the last one's first
// CARRY frame. Before, with two workers, the hold ended at the second one's first frame,
// the first worker was FIREd runs whose outcomes the later frames carried, and those were
// refused as "started" (7,701 in make loadgen-cluster -workers 2 over 4 kills) and run
// again.
func TestRouterHoldEndsWhenEveryWorkerSubscribed(t *testing.T) {
	tr := newTestRouter(t, Options{CarryGrace: maxCarryGrace}) // ends by the workers alone
	tr.r.setLeading(false, 0, nil, nil)
	tr.route(1, "a") // loaded: waits for the hold
	tr.r.setLeading(true, 5, nil, func() int { return 2 })
	w1 := tr.worker("w1", 10, "a") // handed in (its CARRYs, then SUBSCRIBE)
	tr.route(2, "a")
	wantRuns(t, w1)                // one of two expected workers has handed in: the hold goes on
	w2 := tr.worker("w2", 10, "a") // the second and last expected worker
	tr.verify()
	tr.wantWaiting(0)
	if n := len(w1.fires) + len(w2.fires); n != 2 {
		t.Fatalf("%d runs FIREd once both workers subscribed, want 2", n)
	}
	tr.r.setLeading(false, 5, nil, nil)
}

func TestRouterTakeoverHold(t *testing.T) {
	// The grace outlasts the test: the hold ends by the workers' CARRYs alone, and the
	// step-down at the end stops the grace timer before it fires.
	tr := newTestRouter(t, Options{CarryGrace: maxCarryGrace})
	tr.r.setLeading(false, 0, nil, nil)
	w1 := tr.worker("w1", 10, "a")
	w2 := &fakeWorker{name: "w2", room: -1}
	tr.route(1, "a") // due before the takeover: waits, and is held once it begins
	tr.r.setLeading(true, 5, nil, func() int { return 2 })
	tr.route(2, "a") // due during the hold: held back although w1 has credits
	tr.verify()
	wantRuns(t, w1)
	tr.wantWaiting(2)
	tr.r.mu.Lock()
	held := len(tr.r.hold.held)
	first := tr.r.hold.handIn(tr.r.table.state(w1))
	again := tr.r.hold.handIn(tr.r.table.state(w1)) // a connection's second CARRY counts once
	last := tr.r.hold.handIn(tr.r.table.state(w2))  // w2 has not subscribed: a CARRY comes first
	if last {
		tr.r.hold.end()
	}
	tr.r.mu.Unlock()
	if held != 2 || first || again || !last {
		t.Fatalf("held %d runs (want 2); hand-ins ended the hold: %v %v %v, want only the second worker's", held, first, again, last)
	}
	tr.verify()
	wantRuns(t, w1, 1, 2)
	if f := w1.fires[0]; f.Epoch != 5 {
		t.Fatalf("a held run fired at epoch %d, want 5", f.Epoch)
	}
	if _, refused := tr.r.setLeading(false, 5, nil, nil); len(refused) != 0 {
		t.Fatalf("%d outcomes refused at the step-down, none pending", len(refused))
	}
	tr.r.mu.Lock()
	grace := tr.r.hold.grace
	tr.r.mu.Unlock()
	if grace != nil {
		t.Fatal("the step-down left the grace timer running")
	}
}

// fakeLease is a term's lease whose validity the test sets.
type fakeLease struct {
	valid  bool
	lapsed int // calls of Lapsed
}

func (l *fakeLease) Valid(time.Time) bool { return l.valid }
func (l *fakeLease) Lapsed()              { l.lapsed++ }

// TestRouterFiresOnlyWhileLeaseValid: a run due once the term's lease is no longer
// certainly alive is not fired, whether routed or drained: it waits (its timeout held),
// and the term is reported over (Lapsed).
func TestRouterFiresOnlyWhileLeaseValid(t *testing.T) {
	tr := newTestRouter(t, Options{})
	lease := &fakeLease{valid: true}
	tr.r.setLeading(true, 7, lease, nil)
	w := tr.worker("w", 10, "a")
	tr.route(1, "a")
	if len(w.fires) != 1 {
		t.Fatalf("%d FIREs with the lease valid, want 1", len(w.fires))
	}
	lease.valid = false
	tr.route(2, "a")
	if len(w.fires) != 1 || lease.lapsed == 0 || !tr.eng.held[2] || tr.r.waitingLen() != 1 {
		t.Fatalf("lease lapsed: %d FIREs (want 1), Lapsed called %d times, run 2 held %v, %d waiting (want 1)",
			len(w.fires), lease.lapsed, tr.eng.held[2], tr.r.waitingLen())
	}
	tr.r.credit(w, 1) // drains: still not fired
	if len(w.fires) != 1 || tr.r.waitingLen() != 1 {
		t.Fatalf("a drain fired past the lease: %d FIREs, %d waiting", len(w.fires), tr.r.waitingLen())
	}
	tr.verify()
}

// TestRouterHoldLastsWhileCarriesArrive: a takeover's hold outlasts CarryGrace while
// CARRY frames keep arriving (a worker handing in ~10k outcomes sends ~10 frames, and the
// runs its later frames carry must not be FIREd meanwhile at a worker already
// subscribed), up to CarryHoldMax after the takeover; when the frames stop, it ends
// CarryGrace after the last one. The frames come every 10 ms, 30 times more often than
// the grace: only a box stalled for 300 ms between two of them ends the hold early.
func TestRouterHoldLastsWhileCarriesArrive(t *testing.T) {
	// The hold runs on the wall clock, so "capped" fails if this goroutine is not run for
	// a whole grace between two frames: a grace of 1 s (100 frame intervals) makes that a
	// stall no loaded CI box gives a runnable goroutine, where 300 ms was within reach.
	const grace, every = time.Second, 10 * time.Millisecond
	takeover := func(tr *testRouter) (w1 *fakeWorker, fired func() bool) {
		tr.r.setLeading(false, 0, nil, nil)
		tr.route(1, "a") // loaded: waits for the hold
		tr.r.setLeading(true, 5, nil, func() int { return 2 })
		w1 = tr.worker("w1", 10, "a") // handed in; the second worker is still handing in
		return w1, func() bool {
			tr.r.mu.Lock()
			defer tr.r.mu.Unlock()
			return len(w1.fires) > 0
		}
	}
	carryArrived := func(tr *testRouter) time.Time {
		tr.r.mu.Lock()
		defer tr.r.mu.Unlock()
		now := time.Now()
		tr.r.hold.carryArrived(now)
		return now
	}

	t.Run("capped", func(t *testing.T) {
		const holdMax = 2500 * time.Millisecond
		tr := newTestRouter(t, Options{CarryGrace: grace, CarryHoldMax: holdMax})
		start := time.Now()
		_, fired := takeover(tr)
		for !fired() {
			if time.Since(start) > maxCarryGrace {
				t.Fatalf("the hold did not end within %v of frames", maxCarryGrace)
			}
			carryArrived(tr)
			time.Sleep(every)
		}
		if held := time.Since(start); held < holdMax {
			t.Fatalf("the hold ended %v after the takeover, CARRY frames arriving every %v: want it on until CarryHoldMax (%v)", held, every, holdMax)
		}
		tr.r.setLeading(false, 5, nil, nil)
	})

	t.Run("frames stop", func(t *testing.T) {
		tr := newTestRouter(t, Options{CarryGrace: grace, CarryHoldMax: maxCarryGrace})
		start := time.Now()
		_, fired := takeover(tr)
		time.Sleep(grace / 2)
		last := carryArrived(tr)
		for !fired() {
			if time.Since(start) > maxCarryGrace {
				t.Fatalf("the hold lasted past CarryHoldMax (%v) with one frame", maxCarryGrace)
			}
			time.Sleep(every)
		}
		if after := time.Since(last); after < grace {
			t.Fatalf("the hold ended %v after the last CARRY frame, want CarryGrace (%v)", after, grace)
		}
		tr.r.setLeading(false, 5, nil, nil)
	})
}

// TestRouterFlushesWhatOneCallFired: the runs one call fires reach each worker in one
// flush (what a worker that asked for FIRES gets in one frame), and a run routed to a
// worker with a credit is flushed at once, alone: nothing waits for a later call.
func TestRouterFlushesWhatOneCallFired(t *testing.T) {
	tr := newTestRouter(t, Options{Dispatch: DispatchRoundRobin})
	a, b := tr.worker("a", 0, "x"), tr.worker("b", 0, "x")
	for id := uint64(1); id <= 6; id++ {
		tr.route(id, "x")
	}
	tr.wantWaiting(6)
	tr.r.credit(a, 4)
	tr.verify()
	if wantRuns(t, a, 1, 2, 3, 4); fmt.Sprint(a.flushes) != "[4]" {
		t.Fatalf("worker a's flushes let go %v runs, want one of 4", a.flushes)
	}
	tr.r.credit(b, 5)
	tr.verify()
	wantRuns(t, b, 5, 6)
	tr.route(7, "x")
	if wantRuns(t, b, 5, 6, 7); fmt.Sprint(b.flushes) != "[2 1]" {
		t.Fatalf("worker b's flushes let go %v runs, want 2 then 1", b.flushes)
	}
}

// A waiting run taken over by ADOPT (adoptWaitingLocked) is in flight on the worker that
// handed it in, its timeout started, spending no credit; when workers with credits come,
// the queue drops it unFIREd and FIREs the run behind it; the adopter's ACK takes it.
func TestRouterAdoptedWaitingRunIsNotFired(t *testing.T) {
	tr := newTestRouter(t, Options{})
	tr.route(1, "a") // nobody serves a yet: both wait
	tr.route(2, "a")
	adopter := &fakeWorker{name: "adopter", room: -1}
	tr.r.mu.Lock()
	f := tr.r.waiting["a"].front()
	took := tr.r.adoptWaitingLocked(adopter, f)
	tr.r.mu.Unlock()
	if !took || tr.eng.held[1] {
		t.Fatalf("adopted %v, run 1's timeout held %v: want taken over, its timeout started", took, tr.eng.held[1])
	}
	tr.verify() // waiting and in flight, marked adopted: allowed
	w := tr.worker("w", 10, "a")
	wantRuns(t, w, 2)
	tr.wantWaiting(0)
	if st := tr.state(w); st.credits != 9 {
		t.Fatalf("the subscriber has %d credits, want 9: one FIRE", st.credits)
	}
	if len(adopter.fires) != 0 {
		t.Fatalf("the adopter was FIREd %v", adopter.runIDs())
	}
	if _, fired, _ := tr.r.take(adopter, 3, 0, 1); !fired {
		t.Fatal("the adopted run is not in flight on the worker that handed it in")
	}
	tr.verify()
	tr.r.mu.Lock()
	left := len(tr.r.adoptedWaiting)
	tr.r.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d adopted runs still marked after their queue's turn", left)
	}
}
