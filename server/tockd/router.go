package tockd

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// errNoWorker fails an attempt (retryably) when it cannot wait for a worker: the
// server already holds Options.MaxWaitingRuns runs waiting, or
// Options.MaxWaitingRunsPerType of the attempt's type. The task's retry policy decides
// what follows.
var errNoWorker = errors.New("tockd: no worker available")

// errWorkerGone fails (retryably) every run in flight on a worker connection that closed,
// so that the engine redelivers it, to another worker, per the task's retry policy.
var errWorkerGone = errors.New("tockd: worker disconnected")

// workerConn is what the router needs of a worker connection (*conn; a fake in the
// router's unit tests). Both methods are called with router.mu held, so neither may
// block or call back into the router.
type workerConn interface {
	comparable
	// push queues a FIRE of f on the connection without blocking: false when its reply
	// queue is full (the worker is not reading) or the connection is closing. A
	// connection may hold what it was pushed until flush.
	push(f *protocol.Fire) bool
	// flush lets go the runs pushed since the last flush: the router calls it once a
	// call has fired all it will, so that a connection that sends FIRES puts the runs
	// fired together in one frame.
	flush()
	// setBackedUp records that a FIRE found the reply queue full: once the connection
	// has made room it must call router.offer, so that runs waiting for want of room
	// are fired.
	setBackedUp()
	// evict sends the worker away (this node stopped leading): its connection answers
	// ERROR NOT_LEADER and closes, and then calls router.remove.
	evict()
}

// runEngine is what the router needs of the engine (*task.Engine; a fake in the
// router's unit tests): start, hold and fail a run. Hold and start are O(1) (a shard
// lock) and called with router.mu held; Complete is called without it.
type runEngine interface {
	// HoldTimeout stops the run's timeout while it waits for a worker.
	HoldTimeout(runID uint64) error
	// StartTimeout starts the run's timeout afresh as it is fired; an error means the
	// run is gone (cancelled, replaced, or ended by a carried outcome).
	StartTimeout(runID uint64) error
	// Complete ends the run with err (errWorkerGone: redelivered per the retry policy).
	Complete(runID uint64, err error) error
}

// router routes due runs to subscribed worker connections: which workers subscribe to
// which types and with how many credits, the choice of a worker (Options.Dispatch), the
// runs waiting for one and their bounds, the runs in flight on each worker, and removing
// a worker. It learns of the engine's runs from remoteRuns.handler (route) and of workers'
// requests from their readers (subscribe, credit, take, remove), and talks back to them
// only through workerConn and runEngine, and sends its workers away when this node stops
// leading (evictAll).
//
// Invariants (checked by verify):
//   - The worker table's own (workertable.go).
//   - nWaiting = Σ_t waiting[t].len(); nWaiting ≤ maxWaiting and waiting[t].len() ≤
//     maxPerType for every t when the run was queued (a queue's stale runs, cancelled
//     meanwhile, count until their turn; runs queued before setWaitingLimits lowered a
//     bound stay). No waiting queue is empty.
//   - A run is in one place at most: waiting (its engine timeout held), in flight on
//     exactly one worker (FIREd, or handed in by ADOPT, its timeout running), until that
//     worker's ACK/NACK (take) or its removal (remove), or an orphan of a removed worker
//     until a carried outcome or an ADOPT takes it or reconnectGrace fails it (only
//     while leading). A run ADOPT took from a waiting queue stays there, marked in
//     adoptedWaiting, until its turn drops it: waiting and in flight only so.
//   - Each FIRE spends one credit of the worker it went to; credits only grow by
//     subscribe (replaces them) and credit (adds, saturating).
//   - Every worker pushed a run is flushed before mu is released: pushed is empty
//     outside route and drainLocked, which fire, and flush what they fired
//     (pushed.flush).
//   - Runs are fired only while leading, outside a takeover's hold (hold.on), and for
//     types not paused, and each FIRE only while the term's lease is valid at the moment
//     it is pushed (lease.Valid(time.Now())); a run that fails the check waits; a type's waiting runs go out oldest first, and a run due while
//     older runs of its type wait queues behind them.
//
// Locking: every field below mu is guarded by mu unless it says otherwise. mu is taken
// by engine handlers (route, broadcasts.route) and broadcast fan-outs (broadcasts.fanOut),
// worker connections' readers (subscribe, credit, take, remove, CARRY) and writers
// (offer), PAUSE and RESUME, leadership changes (setLeading, evictAll), the takeover
// hold's timers (holdState) and the registry (subscribed); it is never held across a
// blocking operation. Lock order: router.mu, then a connection's
// outMu (workerConn.push) or an engine shard's lock (runEngine.HoldTimeout,
// StartTimeout, and Engine.Get in carry.go). Nothing holding either of those takes mu.
//
// Costs: route, credit and offer are O(workers of the type) per run fired (the choice
// is a scan of the type's subscribed workers); take is O(1) per run; subscribe and
// remove are O(types of the worker), plus the runs they fire or fail.
type router[W workerConn] struct {
	// Set by init, immutable after.
	eng      runEngine
	strategy Dispatch
	// reconnectGrace is Options.ReconnectGrace: how long a closed worker connection's
	// runs in flight are kept for it (orphans) before they fail; 0 or less: at once.
	reconnectGrace time.Duration
	log            *slog.Logger

	fired       atomic.Uint64 // FIREs queued to workers
	redelivered atomic.Uint64 // runs failed because their worker disconnected
	changes     atomic.Uint64 // times this node gained or lost leadership (setLeading)

	mu sync.Mutex
	// maxWaiting and maxPerType are Options.MaxWaitingRuns and MaxWaitingRunsPerType, or
	// what the runtime configuration set them to (setWaitingLimits).
	maxWaiting, maxPerType int

	table    workerTable[W]       // the worker connections, their credits and runs in flight
	waiting  map[string]*runQueue // due runs per type that no worker has taken yet; each at most maxPerType
	nWaiting int                  // runs in all waiting queues (some may be stale); at most maxWaiting
	paused   typeSet              // types not dispatched until RESUME
	leading  bool                 // this node dispatches; FIREs carry epoch
	epoch    uint64
	lease    leaseCheck // this term's lease (nil: none, no Store); checked before every FIRE
	hold     holdState  // a takeover's hold and the carried outcomes (carry.go)
	orphans  orphanRuns
	// adoptedWaiting holds the runs taken from a waiting queue by ADOPT (adopt.go): in
	// flight on the worker that handed them in, they are dropped from their queue when
	// their turn comes (drainLocked), unFIREd.
	adoptedWaiting map[uint64]bool
	pushed         pushedConns[W] // flushed before mu is let go
	// broadcasts routes broadcast tasks' runs, each to its own worker (broadcast.go).
	broadcasts broadcaster[W]
}

// orphanRuns are the runs in flight on worker connections that closed while this node
// led, kept for reconnectGrace so that the worker, reconnecting, can carry their
// outcomes (carry.go) instead of the runs being redelivered; by run ID. Guarded by
// router.mu.
type orphanRuns map[uint64]orphan

// orphan is a run whose worker connection closed (router.orphans).
type orphan struct {
	key   taskKey
	epoch uint64      // the term it was FIREd in
	timer *time.Timer // fails it (errWorkerGone) when the grace ends
}

// take removes and reports whether runID is an orphan of task k, FIREd in the term at
// epoch, which is the current one (now): a reconnected worker carries its outcome.
// Requires router.mu.
func (o orphanRuns) take(runID uint64, k taskKey, epoch, now uint64) bool {
	r, ok := o[runID]
	if !ok || r.key != k || r.epoch != epoch || epoch != now {
		return false
	}
	r.timer.Stop()
	delete(o, runID)
	return true
}

// dropAll forgets every orphan (their runs are handed back: the node stopped leading).
// Requires router.mu.
func (o orphanRuns) dropAll() {
	for runID, r := range o {
		r.timer.Stop()
		delete(o, runID)
	}
}

// leaseCheck is what the router needs of a term's lease (*store.Leadership and the
// function that ends the term; a fake in the router's unit tests).
type leaseCheck interface {
	// Valid reports whether the lease is certainly alive at now: one atomic load and a
	// compare (store.Leadership.Valid), called with router.mu held before every FIRE.
	Valid(now time.Time) bool
	// Lapsed is called (with router.mu held; it must not block) when a FIRE found the
	// lease no longer valid: the term is over, whatever the session watch says yet.
	Lapsed()
}

// init readies r for use with eng and opts' routing options (Dispatch, the waiting
// bounds, CarryGrace); leading is whether this node dispatches from the start (no
// Store: it is alone). Called once, before r is shared.
func (r *router[W]) init(eng runEngine, opts *Options, leading bool) {
	r.eng, r.log = eng, opts.Logger
	r.maxWaiting, r.maxPerType = opts.MaxWaitingRuns, opts.MaxWaitingRunsPerType
	r.hold.init(&r.mu, opts, func() {
		if r.leading {
			r.drainAllLocked()
		}
	})
	r.reconnectGrace, r.orphans = opts.ReconnectGrace, orphanRuns{}
	r.table.init(opts.Dispatch)
	r.waiting, r.paused = map[string]*runQueue{}, typeSet{}
	r.leading = leading
	r.broadcasts.r = r
}

// route is the engine handler's part: it FIREs f (the attempt of a task, recurring or
// not) at a worker, or queues it until one has a credit (and the type is not paused, and
// this node leads outside a hold), its timeout held. It returns task.ErrDeferred (the
// worker's ACK or NACK ends the attempt), errNoWorker (wrapped) when the waiting bounds
// are reached, or the engine's error holding the timeout.
func (r *router[W]) route(f *protocol.Fire, recurring bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.waiting[f.TaskType]
	if r.leading && !r.hold.on && !r.paused[f.TaskType] && (q == nil || q.len() == 0) && r.fireLocked(f) {
		r.pushed.flush()
		return task.ErrDeferred
	}
	// Wait for a credit: the attempt's timeout (its time to run) starts when it is fired.
	if r.nWaiting >= r.maxWaiting {
		return fmt.Errorf("%w for type %q: %d runs are already waiting (MaxWaitingRuns)", errNoWorker, f.TaskType, r.nWaiting)
	}
	if q != nil && q.len() >= r.maxPerType {
		return fmt.Errorf("%w for type %q: %d runs of the type are already waiting (MaxWaitingRunsPerType)", errNoWorker, f.TaskType, q.len())
	}
	if err := r.eng.HoldTimeout(f.RunID); err != nil {
		return err
	}
	if q == nil {
		q = &runQueue{}
		r.waiting[f.TaskType] = q
	}
	q.push(f)
	r.nWaiting++
	r.hold.note(f, recurring)
	return task.ErrDeferred
}

// fireLocked FIREs f at the subscribed worker of its type chosen by the strategy among
// those with a credit, skipping those whose reply queue is full (not reading) or that
// are closing; false when none took it, or when the term's lease is no longer certainly
// alive (then the term is over: lease.Lapsed, and f waits, to be handed back at the
// step-down). Requires r.mu.
func (r *router[W]) fireLocked(f *protocol.Fire) bool {
	f.Epoch = r.epoch
	key := r.table.dispatchKey(f)
	var tried map[W]bool
	var spread *taskKey // a shard's task: its runs go to distinct workers where there are enough
	if f.Shard.Of > 1 {
		spread = &taskKey{f.Namespace, f.TaskID}
	}
	for {
		best, bestState, ok := r.table.chooseSpread(f.TaskType, key, tried, spread)
		if !ok {
			return false
		}
		// Checked here, just before the push: a goroutine that ends the term (the session
		// watch, leadership.loop) may run late, after a stall, while this one fires.
		if r.lease != nil && !r.lease.Valid(time.Now()) {
			r.lease.Lapsed()
			return false
		}
		if !best.push(f) {
			// Its writer offers the waiting runs again once it has made room. The flag
			// is set before a second try: a writer that made room before seeing it
			// leaves room for that try, so that a run never waits with no one due to
			// offer it again.
			best.setBackedUp()
			if !best.push(f) {
				if tried == nil {
					tried = map[W]bool{}
				}
				tried[best] = true
				continue
			}
		}
		r.pushed.add(best)
		r.table.charge(bestState, f)
		r.fired.Add(1)
		return true
	}
}

// mix64 is splitmix64's finalizer: it spreads a 64-bit value's bits over all 64.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// drainLocked FIREs waiting runs of typ, oldest first, while workers have credits.
// A run the engine no longer holds (cancelled, or the task replaced) is dropped.
// Requires r.mu.
func (r *router[W]) drainLocked(typ string) {
	q := r.waiting[typ]
	for q != nil && q.len() > 0 && r.leading && !r.hold.on && !r.paused[typ] {
		f := q.front()
		if len(r.adoptedWaiting) > 0 && r.adoptedWaiting[f.RunID] {
			delete(r.adoptedWaiting, f.RunID)
			q.pop()
			r.nWaiting--
			continue // handed in by the worker that runs it (ADOPT): in flight already
		}
		if err := r.eng.StartTimeout(f.RunID); err != nil {
			q.pop()
			r.nWaiting--
			r.hold.forget(f)
			continue // gone from the engine (or ended by a carried outcome): nothing to fire
		}
		if !r.fireLocked(f) {
			// No credit (or every worker is backed up): wait again, with no time limit.
			_ = r.eng.HoldTimeout(f.RunID)
			break
		}
		q.pop()
		r.nWaiting--
		r.hold.forget(f)
	}
	if q != nil && q.len() == 0 {
		delete(r.waiting, typ)
	}
	r.pushed.flush()
}

// drainTypesLocked drains ws's types while it has credits. Requires r.mu.
func (r *router[W]) drainTypesLocked(ws *workerState) {
	for _, typ := range ws.types {
		if ws.credits == 0 {
			return
		}
		r.drainLocked(typ)
	}
}

// drainAllLocked drains every type with waiting runs. Requires r.mu.
func (r *router[W]) drainAllLocked() {
	for typ := range r.waiting {
		r.drainLocked(typ)
	}
}

// offer fires waiting runs of w's types: w's writer calls it when it has made room in a
// reply queue that was full when a FIRE was due (so runs may wait for want of room, not
// of credit).
func (r *router[W]) offer(w W) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ws := r.table.workers[w]; ws != nil {
		r.drainTypesLocked(ws)
	}
}

// subscribe replaces w's types and credits (SUBSCRIBE; the types are checked by the
// caller) and fires waiting runs of those types. name is the worker's HELLO name (key
// hashing). first is true for w's first SUBSCRIBE: it was numbered then.
func (r *router[W]) subscribe(w W, name string, types []string, credits uint64) (first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws, first := r.table.subscribe(w, name, types, credits)
	if first && r.leading && r.hold.handIn(ws) {
		// Every worker expected has sent its CARRY frames (before this SUBSCRIBE).
		r.log.Info("tockd: every registered worker handed in its outcomes; dispatching", "workers", r.hold.handedIn)
		r.hold.end()
		return first
	}
	for _, typ := range ws.types {
		r.drainLocked(typ)
	}
	return first
}

// credit adds n credits to w (CREDIT, saturating) and fires waiting runs of its types.
func (r *router[W]) credit(w W, n uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.table.state(w)
	ws.credits += min(n, ^uint64(0)-ws.credits)
	r.drainTypesLocked(ws)
}

// take takes runID off w's runs in flight for its ACK or NACK (request id, naming
// epoch): fired says whether it was there, and key is its task. A stale epoch takes
// nothing and returns the STALE_EPOCH error instead.
func (r *router[W]) take(w W, id, epoch, runID uint64) (key taskKey, fired bool, stale *protocol.Error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if stale := staleEpoch(id, epoch, r.leading, r.epoch); stale != nil {
		return taskKey{}, false, stale
	}
	key, fired = r.table.take(w, runID)
	return key, fired, nil
}

// takeAll is take for each of runIDs (ACKS): keys[i] and fired[i] are runIDs[i]'s.
func (r *router[W]) takeAll(w W, id, epoch uint64, runIDs []uint64) (keys []taskKey, fired []bool, stale *protocol.Error) {
	keys = make([]taskKey, len(runIDs))
	fired = make([]bool, len(runIDs))
	r.mu.Lock()
	defer r.mu.Unlock()
	if stale := staleEpoch(id, epoch, r.leading, r.epoch); stale != nil {
		return nil, nil, stale
	}
	for i, runID := range runIDs {
		keys[i], fired[i] = r.table.take(w, runID)
	}
	return keys, fired, nil
}

// staleEpoch returns the STALE_EPOCH error for an ACK, NACK or ACKS (request id)
// naming epoch, or nil when epoch is the current one of a node that leads.
func staleEpoch(id, epoch uint64, leading bool, current uint64) *protocol.Error {
	if leading && epoch == current {
		return nil
	}
	msg := fmt.Sprintf("epoch %d is not the leader's (%d)", epoch, current)
	if !leading {
		msg = fmt.Sprintf("epoch %d: this node no longer leads", epoch)
	}
	return &protocol.Error{ID: id, Code: protocol.CodeStaleEpoch, Message: msg}
}

// remove forgets w, whose connection closed: it gets no more FIREs, and every run in
// flight on it fails retryably (errWorkerGone), so the engine redelivers it per its
// retry policy: after reconnectGrace (the runs are orphans meanwhile: a worker that
// reconnects, to a blip or a false alarm, carries their outcomes instead), or at once
// without one. Unless handBack (the server is draining) or this node does not lead:
// then the runs are handed back, not failed (a durable task keeps its record, and the
// next leader redelivers it; failing it here could end it, DEAD, and delete the record).
func (r *router[W]) remove(w W, handBack bool) {
	r.mu.Lock()
	inflight := r.table.drop(w)
	leading, epoch := r.leading, r.epoch
	if !handBack && leading && r.reconnectGrace > 0 {
		for runID, k := range inflight {
			runID := runID
			r.orphans[runID] = orphan{key: k, epoch: epoch,
				timer: time.AfterFunc(r.reconnectGrace, func() { r.expireOrphan(runID, epoch) })}
		}
		inflight = nil
	}
	r.mu.Unlock()
	if handBack || !leading {
		return
	}
	for runID := range inflight {
		r.failGone(runID)
	}
}

// failGone fails run runID because its worker went (errWorkerGone): redelivered.
func (r *router[W]) failGone(runID uint64) {
	if r.eng.Complete(runID, errWorkerGone) == nil {
		r.redelivered.Add(1)
	}
}

// expireOrphan fails the orphan runID of the term of epoch, if it is still one (no
// carried outcome took it) and that term still leads.
func (r *router[W]) expireOrphan(runID, epoch uint64) {
	r.mu.Lock()
	o, ok := r.orphans[runID]
	if ok && o.epoch == epoch {
		delete(r.orphans, runID)
	}
	fail := ok && o.epoch == epoch && r.leading && r.epoch == epoch
	r.mu.Unlock()
	if fail {
		r.failGone(runID)
	}
}

// evictAll sends every subscribed worker away (workerConn.evict): a worker of a node
// that does not lead would wait for FIREs that never come.
func (r *router[W]) evictAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.table.each(func(w W, _ *workerState) { w.evict() })
}

// setWaitingLimits replaces the bounds of the runs waiting for a worker (the runtime
// configuration's max_waiting_runs and max_waiting_runs_per_type): runs come due
// against the new bounds from now on; runs already waiting stay, however many.
func (r *router[W]) setWaitingLimits(total, perType int) {
	r.mu.Lock()
	r.maxWaiting, r.maxPerType = total, perType
	r.mu.Unlock()
}

// pause answers PAUSE (paused) and RESUME: a paused type's due runs wait, undispatched;
// a resumed type's waiting runs are fired.
func (r *router[W]) pause(typ string, paused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if paused {
		r.paused[typ] = true
		return
	}
	delete(r.paused, typ)
	r.drainLocked(typ)
}

// setLeading records a change of leadership (changed: it is one): FIREs carry the new
// epoch, and runs wait while this node does not lead. lease is the new term's lease,
// checked before every FIRE (nil: none, or not leading). Gaining it with expect set (a
// Store) starts the takeover's hold for carried outcomes, waiting for expect() workers
// (carry.go); losing it ends the hold and returns the outcomes pending, for refusal
// outside the lock.
func (r *router[W]) setLeading(leading bool, epoch uint64, lease leaseCheck, expect func() int) (changed bool, refused []*carried) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lease = lease
	if r.leading != leading {
		changed = true
		r.changes.Add(1)
		if leading && expect != nil {
			r.hold.begin(expect(), r.waiting, r.eng)
		} else if !leading {
			refused = r.hold.stop()
			// Handed back, as remove does when not leading: the next leader redelivers.
			r.orphans.dropAll()
			r.adoptedWaiting = nil // their queued runs are gone from the engine: drainLocked drops them
		}
	}
	r.leading, r.epoch = leading, epoch
	if leading {
		r.drainAllLocked()
	}
	return changed, refused
}

// leadership returns whether this node leads, and its epoch.
func (r *router[W]) leadership() (bool, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leading, r.epoch
}

// waitingLen is the number of due runs waiting for a worker.
func (r *router[W]) waitingLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nWaiting
}

// subscribed calls fn with each subscribed worker (one with a type) and its state, under
// r.mu, if this node leads; fn must not block or call the router.
func (r *router[W]) subscribed(fn func(W, *workerState)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leading {
		r.table.each(fn)
	}
}

// verify checks the invariants that the router's state alone can show (the doc comment
// on router); the unit tests call it after every step. Cost: O(workers × types + runs).
func (r *router[W]) verify() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	inflight, err := r.table.verify()
	if err != nil {
		return err
	}
	n := 0
	for typ, q := range r.waiting {
		if q.len() == 0 {
			return fmt.Errorf("waiting queue of %q is empty", typ)
		}
		n += q.len()
		for _, f := range q.items[q.head:] {
			if inflight[f.RunID] && !r.adoptedWaiting[f.RunID] {
				return fmt.Errorf("run %d is both waiting and in flight", f.RunID)
			}
		}
	}
	if n != r.nWaiting {
		return fmt.Errorf("nWaiting %d, queues hold %d", r.nWaiting, n)
	}
	if len(r.pushed) > 0 {
		return fmt.Errorf("%d workers pushed runs that were never flushed", len(r.pushed))
	}
	return nil
}

// runQueue is a FIFO of FIREs waiting for a worker.
type runQueue struct {
	items []*protocol.Fire
	head  int
}

func (q *runQueue) len() int              { return len(q.items) - q.head }
func (q *runQueue) front() *protocol.Fire { return q.items[q.head] }
func (q *runQueue) push(f *protocol.Fire) { q.items = append(q.items, f) }
func (q *runQueue) pop() {
	q.items[q.head] = nil
	q.head++
	if q.head >= 1024 && q.head*2 >= len(q.items) { // reclaim the consumed front
		q.items = append(q.items[:0:0], q.items[q.head:]...)
		q.head = 0
	}
}
