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

// Carried outcomes (CARRY, PROTOCOL.md "Carrying outcomes across a failover"). A worker
// whose ACK or NACK a leader never confirmed hands the run's outcome to the next leader,
// which ends the run with it instead of running the task again, when it holds the task
// unchanged (namespace, ID, version) and the run it is about to start is the same
// attempt, due at the same time.
//
// The race: the new leader loads the durable tasks, and their due runs reach the handler
// (and would be FIREd) at once, before the worker holding an outcome has reconnected.
// So, for Options.CarryGrace after a takeover, the router holds back every run the
// handler gets (hold.on: they wait in the waiting queues), until as many workers as the
// previous leader had registered (registry.go) have subscribed, each after its CARRY
// frames, or the grace ends. Each CARRY frame that arrives meanwhile keeps the hold on
// for another CarryGrace (a worker is still handing in: the runs its later frames carry
// must not go to a worker already subscribed), up to Options.CarryHoldMax after the
// takeover.
// For carryMaxWait after a takeover (hold.indexing), hold or none, every run queued is
// indexed by task in hold.held: a run still waiting unFIREd (no worker has subscribed
// yet, or none has a credit) can take an outcome whenever it comes. An outcome then
// finds its run in one of two places:
//   - held: the handler queued it; the outcome is applied with Engine.Complete (the
//     queued FIRE is dropped when its turn comes: StartTimeout finds the run gone);
//   - pending: the engine has not handed the run to the handler yet; the outcome waits
//     in hold.pending, and the handler returns it as the attempt's result instead of
//     FIREing the run. An outcome left pending for carryMaxWait is refused. An
//     outcome of the run an exclusive task parked at the takeover waits out (its lock
//     named that run: exclusive.go, parkLocked) ends the park, so that its run comes
//     due at once and meets the outcome here; its lock goes with it.
//
// A worker whose connection to this same leader closed (a blip, a heartbeat false alarm)
// carries the outcomes of its runs in flight on reconnecting: those runs were kept as
// orphans (router.remove) for Options.ReconnectGrace, and an outcome of one, FIREd in
// this term, ends it with Engine.Complete as a late ACK or NACK would.
//
// The answer (ACKED) lists the refused outcomes; for an accepted outcome that ends a
// durable task it waits, as an ACK's OK does, for the record's deletion.
//
// Costs: the handler pays one atomic load while nothing is pending; CARRY is O(1) per
// outcome (map lookups and one Engine.Get). Everything here is guarded by router.mu,
// but for the atomic counters (nPending, refused).

// CarryRefusal is why a leader refused a carried outcome (Stats.CarryRefused, STATS
// carry_refused_<name>). A refused outcome's run is run again if the task still owes it.
type CarryRefusal uint8

// The reasons for refusing a carried outcome.
const (
	CarryNotHeld        CarryRefusal = iota // the task is not held here: ended, cancelled, or never loaded
	CarryChanged                            // the task is at another version, attempt or occurrence
	CarryStarted                            // the run was already FIREd in this term
	CarryExpired                            // the run did not reach the handler within carryMaxWait
	CarryStoppedLeading                     // this node stopped leading before the run came due
	CarryEnded                              // the held run ended meanwhile (cancelled, timed out)
	CarryTwice                              // the run, or another outcome of its task, was named twice
	NumCarryRefusals                        // the number of reasons
)

var carryRefusalNames = [NumCarryRefusals]string{"not_held", "changed", "started", "expired", "stopped_leading", "ended", "twice"}

// String is the reason's name in STATS and /metrics.
func (r CarryRefusal) String() string {
	if r < NumCarryRefusals {
		return carryRefusalNames[r]
	}
	return fmt.Sprintf("CarryRefusal(%d)", r)
}

// carryMaxWait bounds how long an outcome waits in hold.pending for its run to reach
// the handler (a run due at once does so within milliseconds; one that does not is
// parked, cancelled, or not due after all) before it is refused (UNKNOWN_RUN).
const carryMaxWait = 10 * time.Second

// holdState is the router's part in carrying outcomes: a takeover's hold on the runs
// due (begin, its grace timer armGrace, carryArrived, handIn, end), the index of the
// runs queued meanwhile (note, forget) and the outcomes waiting for their runs
// (pending), until the term ends (stop).
//
// Invariants:
//   - on ⇒ grace ≠ nil and held ≠ nil: the grace timer ends the hold at until, which
//     only grows while on, a CARRY frame moving it to capAt at most.
//   - nPending = len(pending). stop empties held and pending and counts the term: a
//     timer armed in an earlier term (its term ≠ h.term) ends nothing.
//
// Locking: every field is guarded by router.mu (h.mu) but for those set by init,
// immutable after, and the atomic nPending and refused. Every method requires
// router.mu but for init (before the router is shared) and refuseCarried and
// refuseOutcome, which touch only the atomics; the timers take it themselves.
type holdState struct {
	// Set by init, immutable after.
	mu     *sync.Mutex   // router.mu, taken by the grace and window timers
	extend time.Duration // CarryGrace: the hold's length, and how long each CARRY frame keeps it on
	max    time.Duration // CarryHoldMax: the longest a hold lasts while CARRY frames keep arriving
	log    *slog.Logger
	// release FIREs the runs held back once the hold ends, if the router leads
	// (router.drainAllLocked). Requires router.mu.
	release func()

	on       bool                 // due runs are held back (not FIREd): a takeover's grace
	indexing bool                 // runs queued go into held: for carryMaxWait after a takeover
	term     uint64               // counts holds, so that a stale grace timer ends nothing
	expect   int                  // workers registered at the previous leader (registry.go)
	handedIn int                  // worker connections that sent CARRY since the takeover
	held     map[taskKey]heldRun  // runs queued while on, by task, until FIREd or dropped
	pending  map[taskKey]*carried // outcomes whose run has not reached the handler yet
	nPending atomic.Int32         // len(pending), read by the handler without the lock
	grace    *time.Timer          // ends the hold at until; stopped when the term ends
	until    time.Time            // when the hold ends: CarryGrace after the takeover or its last CARRY frame
	since    time.Time            // the takeover
	capAt    time.Time            // until never passes it: CarryHoldMax after the takeover
	window   *time.Timer          // ends indexing; stopped when the term ends
	// refused counts the outcomes refused, by reason (atomic: Stats reads it).
	refused [NumCarryRefusals]atomic.Uint64
}

// carried is one outcome of a CARRY, or one run of an ADOPT (running: adopt.go), and
// the answer it is part of.
type carried struct {
	o       protocol.Outcome
	b       *ackBatch
	running bool // a run handed in still running (ADOPT): taken over, not ended
	// parkedUntil, for a running entry, is when the park it ended (adopt.go,
	// awaitPending) would have ended; zero if it ended none. Guarded by router.mu.
	parkedUntil time.Time
}

// matches reports whether f is the run the outcome was reported for: the same task
// version and attempt, and, for a recurring task, the same occurrence (due time). A
// one-shot task has one occurrence, whose due time a new leader may compute anew (an
// "after" task is recorded as the "at" time the submit stood for, a little off the
// first leader's own reading).
func (co *carried) matches(f *protocol.Fire, recurring bool) bool {
	return f.Version == co.o.Version && f.Attempt == co.o.Attempt && (!recurring || f.Due == co.o.Due)
}

// heldRun is a run held back at a takeover (holdState.held). known is false for the
// runs found waiting when the hold began (recurring is then read from the engine).
type heldRun struct {
	f                *protocol.Fire
	recurring, known bool
}

// result is the outcome as the attempt's result: nil (ACK) or the worker's error (NACK).
func (co *carried) result() error {
	if !co.o.Failed {
		return nil
	}
	msg := co.o.Err
	if msg == "" {
		msg = "the worker reported a failure (carried NACK)"
	}
	err := errors.New(msg)
	if !co.o.Retryable {
		err = task.NonRetryable(err)
	}
	return err
}

// init readies h for the router whose lock is mu, with opts' CarryGrace and
// CarryHoldMax; release is called (with mu held) when a hold ends. Called once,
// before the router is shared.
func (h *holdState) init(mu *sync.Mutex, opts *Options, release func()) {
	h.mu, h.extend, h.max, h.log, h.release = mu, opts.CarryGrace, opts.CarryHoldMax, opts.Logger, release
}

// begin starts a takeover's carrying: the runs queued are indexed for carryMaxWait,
// and the runs due are held back until every worker the previous leader had registered
// (expect) has sent CARRY, or for Options.CarryGrace. waiting is the router's queues
// (the runs due already) and eng its engine. With none registered (or a negative
// grace) there is nothing to hold back for. Requires router.mu.
func (h *holdState) begin(expect int, waiting map[string]*runQueue, eng runEngine) {
	h.term++
	h.expect, h.handedIn = expect, 0
	h.held = map[taskKey]heldRun{}
	// The runs the load brought due before leadership was set wait already: they are
	// indexed too (oldest first, so that a task's latest run wins). A run the engine no
	// longer holds is left out: one of this node's earlier term, whose durable task was
	// dropped at the step-down and is loaded anew with a new run, must not take that
	// run's outcome. HoldTimeout of a waiting run is its check: its timeout is held
	// already. Cost: O(runs waiting), once a takeover.
	for _, q := range waiting {
		for _, f := range q.items[q.head:] {
			if eng.HoldTimeout(f.RunID) == nil {
				h.held[taskKey{f.Namespace, f.TaskID}] = heldRun{f: f}
			}
		}
	}
	term := h.term
	h.indexing = true
	h.window = time.AfterFunc(carryMaxWait, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.term == term {
			h.indexing = false
		}
	})
	if expect <= 0 || h.extend <= 0 {
		return
	}
	h.on = true
	now := time.Now()
	h.since, h.until, h.capAt = now, now.Add(h.extend), now.Add(h.max)
	h.armGrace(term, now)
	h.log.Info("tockd: holding the loaded runs for the workers' carried outcomes", "workers", expect, "grace", h.extend,
		"max", h.max)
}

// armGrace sets the grace timer of the hold of term for h.until: when it fires with
// the hold extended meanwhile (carryArrived), it is set again for the new end.
// Requires router.mu.
func (h *holdState) armGrace(term uint64, now time.Time) {
	h.grace = time.AfterFunc(h.until.Sub(now), func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.term != term || !h.on {
			return
		}
		if now := time.Now(); now.Before(h.until) {
			h.armGrace(term, now)
			return
		}
		h.log.Info("tockd: takeover grace over; dispatching", "handed_in", h.handedIn, "expected", h.expect,
			"held", time.Since(h.since))
		h.end()
	})
}

// end ends the hold and FIREs the runs held back (release). Requires router.mu.
func (h *holdState) end() {
	h.on = false
	h.release()
}

// handIn counts the worker whose state is ws toward ending the hold (once: at its first
// SUBSCRIBE, which a worker sends after all its CARRY frames, so that they have all
// found their runs), and reports whether the hold is on and every worker expected has
// now handed in. Requires router.mu.
func (h *holdState) handIn(ws *workerState) (endHold bool) {
	if ws.carried {
		return false
	}
	ws.carried = true
	h.handedIn++
	return h.on && h.handedIn >= h.expect
}

// carryArrived keeps the hold on for another CarryGrace from now, a CARRY frame having
// arrived at now while it is on: a worker is handing in, and the runs its later frames
// carry must not be FIREd meanwhile at a worker already subscribed; never past
// Options.CarryHoldMax after the takeover (h.capAt). The grace timer reads h.until when
// it fires. Requires router.mu.
func (h *holdState) carryArrived(now time.Time) {
	if !h.on {
		return
	}
	until := now.Add(h.extend)
	if until.After(h.capAt) {
		until = h.capAt
	}
	if until.After(h.until) {
		h.until = until
	}
}

// stop ends a term's carrying (the node stops leading): the hold, the index of held
// runs and the pending outcomes, which it returns for refusal outside the lock.
// Requires router.mu.
func (h *holdState) stop() []*carried {
	h.term++
	h.on, h.indexing, h.held = false, false, nil
	for _, t := range []**time.Timer{&h.grace, &h.window} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
	var refused []*carried
	for k, co := range h.pending {
		refused = append(refused, co)
		delete(h.pending, k)
	}
	h.nPending.Store(0)
	return refused
}

// note indexes f (a run of a recurring task or not), just queued, while indexing.
// Requires router.mu.
func (h *holdState) note(f *protocol.Fire, recurring bool) {
	if h.indexing {
		h.held[taskKey{f.Namespace, f.TaskID}] = heldRun{f: f, recurring: recurring, known: true}
	}
}

// forget drops f, leaving its waiting queue, from the index. Requires router.mu.
func (h *holdState) forget(f *protocol.Fire) {
	if len(h.held) > 0 {
		k := taskKey{f.Namespace, f.TaskID}
		if h.held[k].f == f {
			delete(h.held, k)
		}
	}
}

// refuseCarried answers outcomes that were pending when the term or their wait ended,
// or that met a run other than theirs, refused for reason. It touches only the atomic
// counters of h: router.mu is not needed.
func (h *holdState) refuseCarried(cos []*carried, reason CarryRefusal, why string) {
	for _, co := range cos {
		h.refuseOutcome(co.b, co.o.RunID, reason, why)
		co.b.settle()
	}
}

// refuseOutcome lists run runID's carried outcome in b's ACKED as refused (UNKNOWN_RUN,
// why) and counts it under reason; router.mu is not needed.
func (h *holdState) refuseOutcome(b *ackBatch, runID uint64, reason CarryRefusal, why string) {
	h.refused[reason].Add(1)
	b.refuse(runID, protocol.CodeUnknownRun, why)
}

// refusalCounts is the reasons counted in refused, by name, for a log line.
func refusalCounts(refused [NumCarryRefusals]int) map[string]int {
	m := map[string]int{}
	for r, n := range refused {
		if n > 0 {
			m[CarryRefusal(r).String()] = n
		}
	}
	return m
}

// takeCarried is the handler's check for an outcome carried for the run whose FIRE is f
// (of a recurring task or not): handled is true when one matched, and err is then the
// attempt's result. An outcome of the task that does not match this run is refused. A
// run handed in still running (ADOPT) that matches is returned as adopt, for the
// handler to take over (adoptPending), handled false.
func (rr *remoteRuns) takeCarried(f *protocol.Fire, recurring bool) (adopt *carried, handled bool, err error) {
	d := rr.router
	k := taskKey{f.Namespace, f.TaskID}
	d.mu.Lock()
	co := d.hold.pending[k]
	// A run handed in whose park it ended is the run the park held back, at the same
	// version, whatever occurrence the park left it at.
	parkedFor := false
	if co != nil {
		delete(d.hold.pending, k)
		d.hold.nPending.Add(-1)
		parkedFor = co.running && !co.parkedUntil.IsZero() && f.Version == co.o.Version
	}
	d.mu.Unlock()
	if co == nil {
		return nil, false, nil
	}
	if !co.matches(f, recurring) && !parkedFor {
		rr.router.hold.refuseCarried([]*carried{co}, CarryChanged, fmt.Sprintf("run %d: task %s/%s is at version %d attempt %d due %d, not the carried run's",
			co.o.RunID, k.ns, k.id, f.Version, f.Attempt, f.Due))
		return nil, false, nil
	}
	if co.running {
		return co, false, nil
	}
	err = co.result()
	rr.settleCarried(co, k, err)
	return nil, true, err
}

// settleCarried counts an accepted outcome and answers it: at once, or, when it ends a
// durable task, once the task's record is deleted.
func (rr *remoteRuns) settleCarried(co *carried, k taskKey, result error) {
	rr.carried.Add(1)
	runID := co.o.RunID
	if rr.replica == nil || !rr.replica.dur.afterDelete(k, result == nil, co.b, runID) {
		co.b.settle()
	}
}

// carry answers CARRY: each outcome is accepted (its run ended with it) or refused
// (listed in the ACKED with UNKNOWN_RUN); the reply waits for the outcomes pending and
// for the records of the durable tasks they end. The worker's SUBSCRIBE, after its
// CARRY frames, counts toward ending the takeover's hold (router.subscribe).
func (rr *remoteRuns) carry(c *conn, m *protocol.Carry) (protocol.Message, bool) {
	d := rr.router
	b := &ackBatch{c: c, id: m.ID}
	b.outstanding.Store(1) // this goroutine's share, dropped below
	type found struct {
		co *carried
		k  taskKey
		f  *protocol.Fire
	}
	var complete []found
	var waiting []*carried
	var refused [NumCarryRefusals]int // in this frame, by reason, for the log
	nRefused := 0
	if refusal := rr.lockHandIn(c, m.ID); refusal != nil {
		return refusal, false
	}
	seen := make(map[uint64]bool, len(m.Outcomes))
	for _, o := range m.Outcomes {
		co := &carried{o: o, b: b}
		b.outstanding.Add(1)
		k := taskKey{nsOrDefault(o.Namespace), o.TaskID}
		why, reason := "", CarryTwice
		if seen[o.RunID] {
			why = fmt.Sprintf("run %d is named twice in this CARRY", o.RunID)
		} else if d.orphans.take(o.RunID, k, o.Epoch, d.epoch) {
			// A run of this term whose worker's connection closed: the worker is back.
			seen[o.RunID] = true
			complete = append(complete, found{co, k, &protocol.Fire{RunID: o.RunID}})
			continue
		} else if hr, ok := d.hold.held[k]; ok {
			seen[o.RunID] = true
			f := hr.f
			if !hr.known {
				in, err := rr.engine.Get(k.ns, k.id)
				hr.recurring = err == nil && in.Task.Schedule.Recurring()
			}
			if co.matches(f, hr.recurring) {
				delete(d.hold.held, k)
				complete = append(complete, found{co, k, f})
				continue
			}
			why, reason = fmt.Sprintf("task %s/%s waits at version %d attempt %d due %d, not the carried run's", k.ns, k.id, f.Version, f.Attempt, f.Due), CarryChanged
		} else {
			seen[o.RunID] = true
			if reason, why = rr.pendingLocked(co, k); why == "" {
				waiting = append(waiting, co)
				continue
			}
		}
		d.hold.refuseOutcome(b, o.RunID, reason, "carried outcome refused: "+why)
		b.settle()
		refused[reason]++
		nRefused++
	}
	holding := d.hold.on
	epoch := d.epoch
	d.mu.Unlock()
	// Every frame is logged (a takeover gets a few per worker): how its outcomes split is
	// what tells a failover's re-runs apart.
	rr.log.Info("tockd: carried outcomes", "outcomes", len(m.Outcomes), "matched", len(complete), "pending", len(waiting),
		"refused", nRefused, "holding", holding, "by_reason", refusalCounts(refused))
	// An outcome of the very run a task parked at the takeover waits out (its lock named
	// it, and the task is at the same version) ends the park: its held-back run comes due
	// now and meets the outcome filed pending.
	rr.awaitPending(waiting, epoch)
	ended := 0
	for _, x := range complete {
		result := x.co.result()
		if err := rr.engine.Complete(x.f.RunID, result); err != nil {
			why := fmt.Sprintf("the held run of %s/%s ended meanwhile: %v", x.k.ns, x.k.id, err)
			if ended++; ended == 1 {
				rr.log.Info("tockd: a carried outcome's held run ended meanwhile", "why", why)
			}
			d.hold.refuseCarried([]*carried{x.co}, CarryEnded, why)
			continue
		}
		rr.settleCarried(x.co, x.k, result)
	}
	if b.outstanding.Add(-1) > 0 {
		return nil, false // the last outcome settled sends the reply
	}
	return b.reply(), false
}

// lockHandIn takes router.mu for a CARRY or ADOPT (request id) on c and keeps a
// takeover's hold on for another grace, returning nil; or, if this node does not lead,
// returns the NOT_LEADER refusal with the lock not held (and c's SUBSCRIBE is refused
// too: requests.bouncedSubscribe).
func (rr *remoteRuns) lockHandIn(c *conn, id uint64) *protocol.Error {
	d := rr.router
	d.mu.Lock()
	if !d.leading { // only with a replica: without one this node always leads
		d.mu.Unlock()
		c.carryBounced = true
		return rr.replica.lead.notLeader(id)
	}
	d.hold.carryArrived(time.Now())
	return nil
}

// pendingLocked files co (for task k) to wait for its run to reach the handler, if the
// engine holds the task unchanged with that run still to start; otherwise it returns why
// not, and the reason. Requires router.mu (and takes an engine shard's lock: the lock order allows it).
func (rr *remoteRuns) pendingLocked(co *carried, k taskKey) (CarryRefusal, string) {
	h := &rr.router.hold
	in, err := rr.engine.Get(k.ns, k.id)
	switch {
	case err != nil:
		return CarryNotHeld, fmt.Sprintf("task %s/%s is not held here", k.ns, k.id)
	case in.Task.Version != co.o.Version:
		return CarryChanged, fmt.Sprintf("task %s/%s is at version %d, not %d", k.ns, k.id, in.Task.Version, co.o.Version)
	case in.State == task.Pending && in.Task.Schedule.Recurring() && in.NextRun.UnixNano() != co.o.Due:
		return CarryChanged, fmt.Sprintf("task %s/%s is next due at %d, not %d", k.ns, k.id, in.NextRun.UnixNano(), co.o.Due)
	case in.State != task.Pending && in.State != task.Due && !(in.State == task.Running && h.on):
		return CarryStarted, fmt.Sprintf("task %s/%s is %v: its run was already started", k.ns, k.id, in.State)
	case h.pending[k] != nil:
		return CarryTwice, fmt.Sprintf("another outcome of task %s/%s is pending", k.ns, k.id)
	}
	if h.pending == nil {
		h.pending = map[taskKey]*carried{}
	}
	h.pending[k] = co
	h.nPending.Add(1)
	return 0, ""
}

// settle drops one outcome still outstanding; the last one sends the reply.
func (b *ackBatch) settle() {
	if b.outstanding.Add(-1) == 0 {
		b.c.pushReply(b.reply())
	}
}
