package tockd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// errNoWorker fails an attempt (retryably) when it cannot wait for a worker: the
// server already holds Options.MaxWaitingRuns runs waiting, or
// Options.MaxWaitingRunsPerType of the attempt's type. The task's retry policy decides
// what follows.
var errNoWorker = errors.New("tockd: no worker available")

// errWorkerGone fails (retryably) every run in flight on a worker connection that closed,
// so that the engine redelivers it, to another worker, per the task's retry policy.
var errWorkerGone = errors.New("tockd: worker disconnected")

// dispatcher routes due tasks to subscribed worker connections. Its mutex guards every
// connection's workerState and the fields below; it is taken by engine handlers (FIRE),
// by worker connections' readers (SUBSCRIBE, CREDIT, ACK, NACK, close), by PAUSE and
// RESUME, and by leadership changes. It is never held across a blocking operation; the
// only engine calls made under it are HoldTimeout and StartTimeout (O(1), shard lock).
// Lock order: dispatcher.mu, then conn.outMu or an engine shard's lock.
type dispatcher struct {
	mu       sync.Mutex
	byType   map[string]map[*conn]struct{} // subscribed, open worker connections per type
	waiting  map[string]*runQueue          // due runs per type that no worker has taken yet; each at most MaxWaitingRunsPerType
	nWaiting int                           // runs in all waiting queues (some may be stale); at most MaxWaitingRuns
	paused   map[string]bool               // types not dispatched until RESUME
	leading  bool                          // this node dispatches; FIREs carry epoch
	epoch    uint64
	nextSeq  uint64            // numbers worker connections in subscription order
	lastRR   map[string]uint64 // per type: seq of the worker the last round-robin FIRE went to
	hold     holdState         // a takeover's hold and the carried outcomes (carry.go)
}

// waitingLen is the number of due runs waiting for a worker.
func (d *dispatcher) waitingLen() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nWaiting
}

// workerState is a worker connection's dispatch state; guarded by dispatcher.mu.
type workerState struct {
	types    []string
	credits  uint64
	seq      uint64             // subscription order, from 1 (round robin; tie-break; registry entry)
	weight   uint64             // xxhash of the worker's HELLO name (key hashing)
	since    time.Time          // first SUBSCRIBE (the registry)
	inflight map[uint64]taskKey // runs FIREd on this connection and not yet ACKed/NACKed
	carried  bool               // it sent a CARRY (carry.go)
}

// handler is the engine's fallback Handler (every type without an in-process handler of
// its own goes to remote workers): it FIREs the
// attempt at a worker, or queues it until one has a credit (and the type is not paused,
// and this node leads), and defers its outcome to that worker's ACK or NACK.
func (s *Server) handler(_ context.Context, run *task.Run) error {
	t := run.Task
	ttr := t.Timeout
	if ttr <= 0 {
		ttr = s.opts.DefaultTTR
	}
	due, _ := protocol.UnixNano(run.Due)
	fire := &protocol.Fire{Namespace: t.Namespace, TaskID: t.ID, TaskType: t.Type, Payload: t.Payload,
		RunID: run.RunID, Attempt: uint64(run.Attempt), Due: due, TTR: int64(ttr),
		Durability: protocol.Ephemeral, Version: t.Version}
	if s.disp.hold.nPending.Load() > 0 {
		if handled, err := s.takeCarried(fire, t.Schedule.Recurring()); handled {
			return err // a worker handed in this run's outcome: it is not run again
		}
	}
	if s.dur.isDurable(t.Namespace, t.ID, t.Version) {
		fire.Durability = protocol.Durable
		if t.Exclusive {
			// Recorded before the run can start anywhere, so that a leader taking
			// over after this one's death waits the run out (exclusive.go).
			if err := s.lockRun(t.Namespace, t.ID, run.RunID); err != nil {
				return err
			}
		}
	}

	d := &s.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.waiting[t.Type]
	if d.leading && !d.hold.on && !d.paused[t.Type] && (q == nil || q.len() == 0) && s.fireLocked(fire) {
		return task.ErrDeferred
	}
	// Wait for a credit: the attempt's timeout (its time to run) starts when it is fired.
	if d.nWaiting >= s.opts.MaxWaitingRuns {
		return fmt.Errorf("%w for type %q: %d runs are already waiting (MaxWaitingRuns)", errNoWorker, t.Type, d.nWaiting)
	}
	if q != nil && q.len() >= s.opts.MaxWaitingRunsPerType {
		return fmt.Errorf("%w for type %q: %d runs of the type are already waiting (MaxWaitingRunsPerType)", errNoWorker, t.Type, q.len())
	}
	if err := s.engine.HoldTimeout(run.RunID); err != nil {
		return err
	}
	if q == nil {
		q = &runQueue{}
		d.waiting[t.Type] = q
	}
	q.push(fire)
	d.nWaiting++
	s.heldLocked(fire, t.Schedule.Recurring())
	return task.ErrDeferred
}

// fireLocked FIREs f at the subscribed worker of its type with the most free credits
// (ties: any), skipping those whose reply queue is full (not reading) or that are
// closing; false when none took it. Requires d.mu.
func (s *Server) fireLocked(f *protocol.Fire) bool {
	d := &s.disp
	f.Epoch = d.epoch
	var key uint64
	if s.opts.Dispatch == DispatchKeyHash {
		key = xxhash.Sum64String(f.Namespace) ^ xxhash.Sum64String(f.TaskID)*0x9E3779B97F4A7C15
	}
	var tried map[*conn]bool
	for {
		var best *conn
		var bestScore uint64
		for c := range d.byType[f.TaskType] {
			if c.w.credits == 0 || tried[c] {
				continue
			}
			var score uint64
			switch s.opts.Dispatch {
			case DispatchRoundRobin:
				// The next worker after the last one served, in subscription order,
				// wrapping around: seqs just after the last score highest.
				score = ^(c.w.seq - d.lastRR[f.TaskType] - 1)
			case DispatchKeyHash:
				// Rendezvous hashing: the key goes to the worker with the highest
				// hash of (key, worker); a worker joining or leaving moves only the
				// keys it wins or won.
				score = mix64(key ^ c.w.weight)
			default: // DispatchLeastLoaded
				score = c.w.credits
			}
			if best == nil || score > bestScore || (score == bestScore && c.w.seq < best.w.seq) {
				best, bestScore = c, score
			}
		}
		if best == nil {
			return false
		}
		if !best.push(f) {
			// Its writer offers the waiting runs again once it has made room. The flag
			// is set before a second try: a writer that made room before seeing it
			// leaves room for that try, so that a run never waits with no one due to
			// offer it again.
			best.backedUp.Store(true)
			if !best.push(f) {
				if tried == nil {
					tried = map[*conn]bool{}
				}
				tried[best] = true
				continue
			}
		}
		best.w.credits--
		best.w.inflight[f.RunID] = taskKey{f.Namespace, f.TaskID}
		if s.opts.Dispatch == DispatchRoundRobin {
			d.lastRR[f.TaskType] = best.w.seq
		}
		s.fired.Add(1)
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
// Requires d.mu.
func (s *Server) drainLocked(typ string) {
	d := &s.disp
	q := d.waiting[typ]
	for q != nil && q.len() > 0 && d.leading && !d.hold.on && !d.paused[typ] {
		f := q.front()
		if err := s.engine.StartTimeout(f.RunID); err != nil {
			q.pop()
			d.nWaiting--
			s.unheldLocked(f)
			continue // gone from the engine (or ended by a carried outcome): nothing to fire
		}
		if !s.fireLocked(f) {
			// No credit (or every worker is backed up): wait again, with no time limit.
			_ = s.engine.HoldTimeout(f.RunID)
			break
		}
		q.pop()
		d.nWaiting--
		s.unheldLocked(f)
	}
	if q != nil && q.len() == 0 {
		delete(d.waiting, typ)
	}
}

// offerWaiting fires waiting runs of c's types: c's writer calls it when it has made
// room in a reply queue that was full when a FIRE was due (so runs may wait for want of
// room, not of credit).
func (s *Server) offerWaiting(c *conn) {
	s.disp.mu.Lock()
	defer s.disp.mu.Unlock()
	for _, typ := range c.w.types {
		if c.w.credits == 0 {
			return
		}
		s.drainLocked(typ)
	}
}

// drainAllLocked drains every type with waiting runs. Requires d.mu.
func (s *Server) drainAllLocked() {
	for typ := range s.disp.waiting {
		s.drainLocked(typ)
	}
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

// pause answers PAUSE and RESUME: a paused type's due runs wait, undispatched.
func (s *Server) pause(typ string, paused bool) {
	d := &s.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	if paused {
		d.paused[typ] = true
		return
	}
	delete(d.paused, typ)
	s.drainLocked(typ)
}

// setLeading records a change of leadership: FIREs carry the new epoch, and runs wait
// while this node does not lead. Gaining it with a Store starts the takeover's hold for
// carried outcomes (carry.go); losing it ends the hold and refuses the outcomes pending.
func (s *Server) setLeading(leading bool, epoch uint64) {
	d := &s.disp
	d.mu.Lock()
	var refused []*carried
	if d.leading != leading {
		s.leaderChanges.Add(1)
		if leading && s.opts.Store != nil {
			s.startHoldLocked(s.registeredBefore())
		} else if !leading {
			refused = s.stopCarryLocked()
		}
	}
	d.leading, d.epoch = leading, epoch
	if leading {
		s.drainAllLocked()
	}
	d.mu.Unlock()
	refuseCarried(refused, "this node stopped leading before the run came due")
}

// leadership returns whether this node leads, and its epoch.
func (s *Server) leadership() (bool, uint64) {
	s.disp.mu.Lock()
	defer s.disp.mu.Unlock()
	return s.disp.leading, s.disp.epoch
}

// push queues a server push (FIRE) on c without blocking: false when the reply queue is
// full (of replies, or of bytes: MaxQueuedReplyBytes) or the connection is closing. Safe
// from any goroutine.
func (c *conn) push(m protocol.Message) bool {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.outClosed {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
	}
	cost := int64(replyCost(m))
	if !c.reserve(cost, false) {
		return false
	}
	select {
	case c.out <- m:
		return true
	default:
		c.release(cost)
		return false
	}
}

// subscribe answers SUBSCRIBE: it replaces c's types and credits, and fires waiting runs
// of those types.
func (s *Server) subscribe(c *conn, m *protocol.Subscribe) (protocol.Message, bool) {
	d := &s.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, typ := range m.Types {
		if typ == "" || len(typ) > task.MaxTypeLen {
			return &protocol.Error{ID: m.ID, Code: protocol.CodeBadField, Field: fmt.Sprintf("types[%d]", i),
				Message: fmt.Sprintf("a task type must be 1 to %d bytes", task.MaxTypeLen)}, false
		}
	}
	for _, typ := range c.w.types {
		delete(d.byType[typ], c)
	}
	c.w.types, c.w.credits = append([]string(nil), m.Types...), m.Credits
	if c.w.seq == 0 {
		d.nextSeq++
		c.w.seq, c.w.weight, c.w.since = d.nextSeq, xxhash.Sum64String(c.name), time.Now()
		select {
		case s.registryKick <- struct{}{}: // registered at once, so that a takeover soon after waits for it
		default:
		}
	}
	for _, typ := range c.w.types {
		if d.byType[typ] == nil {
			d.byType[typ] = map[*conn]struct{}{}
		}
		d.byType[typ][c] = struct{}{}
	}
	for _, typ := range c.w.types {
		s.drainLocked(typ)
	}
	return &protocol.OK{ID: m.ID}, false
}

// credit answers CREDIT: it adds credits (saturating).
func (s *Server) credit(c *conn, m *protocol.Credit) protocol.Message {
	s.disp.mu.Lock()
	c.w.credits += min(m.Credits, ^uint64(0)-c.w.credits)
	for _, typ := range c.w.types {
		if c.w.credits == 0 {
			break
		}
		s.drainLocked(typ)
	}
	s.disp.mu.Unlock()
	return &protocol.OK{ID: m.ID}
}

// finish answers ACK (err nil) and NACK: the run must be in flight on c; it leaves the
// in-flight set whatever the engine says (a run the engine timed out is UNKNOWN_RUN
// once, and gone). Credits are not returned: the worker grants them (PROTOCOL.md).
func (s *Server) finish(c *conn, id, runID, epoch uint64, err error) (protocol.Message, bool) {
	s.disp.mu.Lock()
	if stale := s.staleEpochLocked(id, epoch); stale != nil {
		s.disp.mu.Unlock()
		stale.RunID = runID
		return stale, false
	}
	key, fired := c.w.inflight[runID]
	delete(c.w.inflight, runID)
	s.disp.mu.Unlock()
	refusal, pending := s.endRun(runID, key, fired, err, func(deleteErr error) { c.pushReply(ackAnswer(id, runID, deleteErr)) })
	switch {
	case refusal != nil:
		refusal.ID = id
		return refusal, refusal.Code.Closes()
	case pending:
		return nil, false // the record's deletion sends the answer
	}
	return &protocol.OK{ID: id}, false
}

// endRun ends runID, just taken off its connection's in-flight set (fired: it was there,
// for the task key), with the worker's result err (nil: ACK). It returns the refusal an
// ACK or NACK of this run alone gets (its ID unset), or nil. When the run ended a durable
// task, the answer must wait until the task's record is deleted, so that an acknowledged
// run is never run again by a node reloading the record: pending is then true, and
// recorded is called with the deletion's outcome, on the deleter goroutine.
func (s *Server) endRun(runID uint64, key taskKey, fired bool, err error, recorded func(deleteErr error)) (refusal *protocol.Error, pending bool) {
	if !fired {
		return unknownRun(0, runID, "run %d is not outstanding on this connection", runID), false
	}
	if cerr := s.complete(runID, err); cerr != nil {
		if errors.Is(cerr, task.ErrUnknownRun) {
			return unknownRun(0, runID, "run %d is no longer running (timed out or cancelled)", runID), false
		}
		return mapEngineError(cerr, ""), false
	}
	if err == nil {
		s.acked.Add(1)
	} else {
		s.nacked.Add(1)
	}
	return nil, s.dur.afterDelete(key, err == nil, recorded)
}

// ackAnswer answers an ACK or NACK that ended a durable task, once its record's deletion
// is decided: OK, or, if the record could not be deleted (this node stopped leading, or
// etcd failed), the error that tells the worker the run may be delivered again.
func ackAnswer(id, runID uint64, deleteErr error) protocol.Message {
	if deleteErr == nil {
		return &protocol.OK{ID: id}
	}
	code, msg := unrecordedEnd(deleteErr)
	return &protocol.Error{ID: id, Code: code, RunID: runID, Message: msg}
}

// unrecordedEnd is the error code and message for a run whose end could not be recorded
// in etcd (deleteErr is not nil): STALE_EPOCH if this node stopped leading first,
// INTERNAL otherwise. Either way the run may be delivered again.
func unrecordedEnd(deleteErr error) (protocol.Code, string) {
	if errors.Is(deleteErr, store.ErrFenced) {
		return protocol.CodeStaleEpoch, "this node stopped leading before the run's end was recorded: the task may run again"
	}
	return protocol.CodeInternal, "the run's end was not recorded (" + deleteErr.Error() + "): the task may run again"
}

// staleEpochLocked returns the STALE_EPOCH error for an ACK, NACK or ACKS (request id)
// naming epoch, or nil when epoch is this leader's. Requires s.disp.mu.
func (s *Server) staleEpochLocked(id, epoch uint64) *protocol.Error {
	if s.disp.leading && epoch == s.disp.epoch {
		return nil
	}
	msg := fmt.Sprintf("epoch %d is not the leader's (%d)", epoch, s.disp.epoch)
	if !s.disp.leading {
		msg = fmt.Sprintf("epoch %d: this node no longer leads", epoch)
	}
	return &protocol.Error{ID: id, Code: protocol.CodeStaleEpoch, Message: msg}
}

// finishAcks answers ACKS: each run is acknowledged as an ACK of it alone would be (the
// same checks, the same engine call, the same wait for a durable task's record to go),
// and one ACKED lists the runs that were refused. A stale epoch refuses the whole frame
// with one STALE_EPOCH. The credits it carries are granted either way, after the runs. The reply waits for the slowest durable run; it is pushed from
// the deleter goroutine when that one's deletion is decided.
func (s *Server) finishAcks(c *conn, m *protocol.Acks) (protocol.Message, bool) {
	keys := make([]taskKey, len(m.RunIDs))
	fired := make([]bool, len(m.RunIDs))
	if m.Credits > 0 {
		// Granted after the runs are dealt with, whatever their outcome.
		defer s.credit(c, &protocol.Credit{Credits: m.Credits})
	}
	s.disp.mu.Lock()
	if stale := s.staleEpochLocked(m.ID, m.Epoch); stale != nil {
		s.disp.mu.Unlock()
		return stale, false
	}
	for i, runID := range m.RunIDs {
		keys[i], fired[i] = c.w.inflight[runID]
		delete(c.w.inflight, runID)
	}
	s.disp.mu.Unlock()

	b := &ackBatch{c: c, id: m.ID}
	b.outstanding.Store(1) // this goroutine's own share, dropped below
	for i, runID := range m.RunIDs {
		b.outstanding.Add(1) // before recorded can run
		refusal, pending := s.endRun(runID, keys[i], fired[i], nil, func(deleteErr error) { b.recorded(runID, deleteErr) })
		if refusal != nil {
			b.refuse(runID, refusal.Code, refusal.Message)
		}
		if !pending {
			b.outstanding.Add(-1)
		}
	}
	if b.outstanding.Add(-1) > 0 {
		return nil, false // the last durable run's deletion sends the reply
	}
	return b.reply(), false
}

// ackBatch gathers the outcome of one ACKS whose runs may end asynchronously (durable
// tasks wait for their records' deletion).
type ackBatch struct {
	c           *conn
	id          uint64
	outstanding atomic.Int64 // runs whose outcome is not yet known, plus one while finishAcks runs

	mu     sync.Mutex
	failed []protocol.AckFailure // guarded by mu
}

func (b *ackBatch) refuse(runID uint64, code protocol.Code, msg string) {
	b.mu.Lock()
	b.failed = append(b.failed, protocol.AckFailure{RunID: runID, Code: code, Message: msg})
	b.mu.Unlock()
}

// recorded is a durable run's deletion outcome, on the deleter goroutine; the last one
// pushes the reply.
func (b *ackBatch) recorded(runID uint64, deleteErr error) {
	if deleteErr != nil {
		code, msg := unrecordedEnd(deleteErr)
		b.refuse(runID, code, msg)
	}
	if b.outstanding.Add(-1) == 0 {
		b.c.pushReply(b.reply())
	}
}

func (b *ackBatch) reply() *protocol.Acked {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &protocol.Acked{ID: b.id, Failed: b.failed}
}

// maxLateReplies bounds the replies a connection holds beyond its reply queue (ACK
// answers that waited for etcd, each a few bytes): more means the peer stopped reading
// while acknowledging this much, and it is closed.
const maxLateReplies = 1 << 16

// pushReply queues a reply from outside c's reader (an answer that waited for etcd)
// without blocking: on the reply queue if it has room, else on c.late for the writer.
func (c *conn) pushReply(m protocol.Message) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.outClosed {
		return
	}
	// Counted but never refused: it answers a request already taken from the peer.
	cost := int64(replyCost(m))
	c.notePeak(c.queued.Add(cost))
	select {
	case c.out <- m:
		return
	default:
	}
	if len(c.late) >= maxLateReplies {
		c.release(cost)
		c.s.log.Warn("tockd: closing connection: it does not read the answers to its ACKs",
			"remote", c.nc.RemoteAddr(), "name", c.name, "late", len(c.late))
		c.nc.Close()
		return
	}
	c.late = append(c.late, m)
	select {
	case c.lateReady <- struct{}{}:
	default: // the writer is already signalled
	}
}

func unknownRun(id, runID uint64, format string, args ...any) *protocol.Error {
	return &protocol.Error{ID: id, Code: protocol.CodeUnknownRun, RunID: runID, Message: fmt.Sprintf(format, args...)}
}

// complete reports a fired run's outcome to the engine. The FIRE goes out before its
// handler has returned ErrDeferred, so a fast worker's ACK can arrive first: the engine
// accepts such an early Complete and applies it when the handler returns.
func (s *Server) complete(runID uint64, err error) error {
	return s.engine.Complete(runID, err)
}

// workerClosed runs on c's reader as it exits: c gets no more FIREs, and every run in
// flight on it fails retryably, so the engine redelivers it per its retry policy.
func (s *Server) workerClosed(c *conn) {
	d := &s.disp
	d.mu.Lock()
	for _, typ := range c.w.types {
		delete(d.byType[typ], c)
	}
	c.w.types, c.w.credits = nil, 0
	inflight := c.w.inflight
	c.w.inflight = nil
	leading := d.leading
	d.mu.Unlock()
	if s.draining.Load() || !leading {
		// Draining or deposed: the runs are handed back, not failed. A durable task
		// keeps its record, and the next leader redelivers it; failing it here could
		// end it (DEAD) and delete the record.
		return
	}
	for runID := range inflight {
		if s.complete(runID, errWorkerGone) == nil {
			s.redelivered.Add(1)
		}
	}
}
