package tockd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// remoteRuns is the server's half of the runs that workers execute: the engine's
// fallback handler, which builds each attempt's FIRE and hands it to the router, and the
// workers' requests that end runs (ACK, NACK, ACKS, CARRY: carry.go), take over runs a
// worker still runs (ADOPT: adopt.go) or change what
// they take (SUBSCRIBE). It talks to the engine directly and to the replica, when there
// is one, for a run's durable side: its class, its run lock, the wait for its record's
// deletion before an ACK is answered.
//
// Invariants:
//   - A run is FIREd at most once per attempt, on one connection, and ends once: by its
//     ACK or NACK (finish), a carried outcome (carry), its worker's departure or its
//     time to run (the engine).
//   - The handler does not wait, but for an exclusive durable task's run lock (a write
//     to etcd, bounded by storeOpTimeout: exclusive.go).
//   - An ACK or NACK that ends a durable task is answered once the task's record is
//     deleted (durability.afterDelete): only runs answered OK are never run again.
//
// Locking: remoteRuns has no lock of its own (acked, nacked and carried are atomic);
// it takes router.mu through the router and, in carry, holds it across Engine.Get (the
// lock order allows it: router.mu, then an engine shard's lock).
type remoteRuns struct {
	engine  *task.Engine
	opts    *Options
	log     *slog.Logger
	router  *router[*conn]
	replica *replica // nil without Options.Store
	spans   spans    // of traced tasks (spans.go)

	acked   atomic.Uint64 // ACKs the engine accepted
	nacked  atomic.Uint64 // NACKs the engine accepted
	carried atomic.Uint64 // carried outcomes accepted (CARRY; carry.go)
	adopted atomic.Uint64 // runs handed in still running and taken over (ADOPT; adopt.go)
}

// handler is the engine's fallback Handler (every type without an in-process handler of
// its own goes to remote workers): it builds the attempt's FIRE, ends it with an
// outcome carried from the previous leader if there is one (carry.go), records an
// exclusive durable task's run lock, and hands it to the router, which FIREs it at a
// worker or queues it until one has a credit (and the type is not paused, and this node
// leads); its outcome is deferred to that worker's ACK or NACK.
func (rr *remoteRuns) handler(_ context.Context, run *task.Run) error {
	t := run.Task
	ttr := t.Timeout
	if ttr <= 0 {
		ttr = rr.opts.DefaultTTR
	}
	due, _ := protocol.UnixNano(run.Due)
	fire := &protocol.Fire{Namespace: t.Namespace, TaskID: t.ID, TaskType: t.Type, Payload: t.Payload,
		RunID: run.RunID, Attempt: uint64(run.Attempt), Due: due, TTR: int64(ttr),
		Durability: protocol.Ephemeral, Version: t.Version}
	if i, n := run.Shard(); n > 1 {
		fire.Shard = protocol.ShardOf{Index: uint16(i), Of: uint16(n)}
	}
	// A traced task's FIRE carries its trace context, so that the worker's handler joins
	// the submitter's trace: the tock.fire span's, ended once the run is handed on.
	var span trace.Span
	fire.Traceparent, fire.Tracestate, span = rr.spans.fire(run)
	defer endSpan(span)
	var adopt *carried // a worker handed in this very run, still running (adopt.go)
	if rr.router.hold.nPending.Load() > 0 {
		co, handled, err := rr.takeCarried(fire, t.Schedule.Recurring())
		if handled {
			return err // a worker handed in this run's outcome: it is not run again
		}
		adopt = co
	}
	if rr.replica != nil && rr.replica.dur.isDurable(t.Namespace, t.ID, t.Version) {
		fire.Durability = protocol.Durable
		if t.Exclusive {
			// Recorded before the run can start anywhere, so that a leader taking
			// over after this one's death waits the run out (exclusive.go).
			if err := rr.replica.locks.lockRun(t.Namespace, t.ID, run.RunID); err != nil {
				return err
			}
		}
	}
	if adopt != nil && rr.adoptPending(fire, adopt) {
		return task.ErrDeferred // that worker's ACK or NACK ends it
	}

	if t.Broadcast {
		i, _ := run.Shard()
		return rr.router.broadcasts.route(fire, i)
	}
	return rr.router.route(fire, t.Schedule.Recurring())
}

// push queues the FIRE f on c without blocking: false when the reply queue is full (of
// replies, or of bytes: MaxQueuedReplyBytes) or the connection is closing. On a
// connection that asked for FIRES, f waits in c.fires for the router's flush, bounded by
// MaxQueuedReplyBytes alone (fires.go). Safe from any goroutine (workerConn).
func (c *conn) push(f *protocol.Fire) bool {
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
	cost := int64(replyCost(f))
	if !c.reserve(cost, false) {
		return false
	}
	if c.fires.perFrame.Load() > 0 {
		c.fires.runs = append(c.fires.runs, f)
		return true
	}
	select {
	case c.out <- f:
		return true
	default:
		c.release(cost)
		return false
	}
}

// setBackedUp marks c's reply queue as found full by a FIRE: its writer, having made
// room, offers the waiting runs again (workerConn).
func (c *conn) setBackedUp() { c.backedUp.Store(true) }

// evict makes c's reader answer ERROR NOT_LEADER and close (workerConn): as Shutdown
// does, the reader sees evicted before its next Read, or the deadline interrupts that
// Read.
func (c *conn) evict() {
	c.evicted.Store(true)
	_ = c.nc.SetReadDeadline(time.Now())
}

// subscribe answers SUBSCRIBE: it replaces c's types and credits, and fires waiting runs
// of those types.
func (rr *remoteRuns) subscribe(c *conn, m *protocol.Subscribe) (protocol.Message, bool) {
	for i, typ := range m.Types {
		if typ == "" || len(typ) > task.MaxTypeLen {
			return &protocol.Error{ID: m.ID, Code: protocol.CodeBadField, Field: fmt.Sprintf("types[%d]", i),
				Message: fmt.Sprintf("a task type must be 1 to %d bytes", task.MaxTypeLen)}, false
		}
	}
	c.setBatchFires(m.BatchFires)
	if rr.router.subscribe(c, c.name, m.Types, m.Credits) && rr.replica != nil {
		rr.replica.registry.subscribed()
	}
	return &protocol.OK{ID: m.ID}, false
}

// finish answers ACK (err nil) and NACK: the run must be in flight on c; it leaves the
// in-flight set whatever the engine says (a run the engine timed out is UNKNOWN_RUN
// once, and gone). Credits are not returned: the worker grants them (PROTOCOL.md).
func (rr *remoteRuns) finish(c *conn, id, runID, epoch uint64, err error) (protocol.Message, bool) {
	key, fired, stale := rr.router.take(c, id, epoch, runID)
	if stale != nil {
		stale.RunID = runID
		return stale, false
	}
	refusal, pending := rr.endRun(runID, key, fired, err, endFunc(func(deleteErr error) { c.pushReply(ackAnswer(id, runID, deleteErr)) }))
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
// recorded.ended is called with the deletion's outcome, on the deleter goroutine.
func (rr *remoteRuns) endRun(runID uint64, key taskKey, fired bool, err error, recorded endListener) (refusal *protocol.Error, pending bool) {
	if !fired {
		return unknownRun(0, runID, "run %d is not outstanding on this connection", runID), false
	}
	if cerr := rr.complete(runID, err); cerr != nil {
		if errors.Is(cerr, task.ErrUnknownRun) {
			return unknownRun(0, runID, "run %d is no longer running (timed out or cancelled)", runID), false
		}
		return mapEngineError(cerr, ""), false
	}
	if err == nil {
		rr.acked.Add(1)
	} else {
		rr.nacked.Add(1)
	}
	return nil, rr.replica != nil && rr.replica.dur.afterDelete(key, err == nil, recorded, runID)
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

// finishAcks answers ACKS: each run is acknowledged as an ACK of it alone would be (the
// same checks, the same engine call, the same wait for a durable task's record to go),
// and one ACKED lists the runs that were refused. A stale epoch refuses the whole frame
// with one STALE_EPOCH. The credits it carries are granted either way, after the runs. The reply waits for the slowest durable run; it is pushed from
// the deleter goroutine when that one's deletion is decided.
func (rr *remoteRuns) finishAcks(c *conn, m *protocol.Acks) (protocol.Message, bool) {
	if m.Credits > 0 {
		// Granted after the runs are dealt with, whatever their outcome.
		defer rr.router.credit(c, m.Credits)
	}
	keys, fired, stale := rr.router.takeAll(c, m.ID, m.Epoch, m.RunIDs)
	if stale != nil {
		return stale, false
	}

	b := &ackBatch{c: c, id: m.ID}
	b.outstanding.Store(1) // this goroutine's own share, dropped below
	for i, runID := range m.RunIDs {
		b.outstanding.Add(1) // before recorded can run
		refusal, pending := rr.endRun(runID, keys[i], fired[i], nil, b)
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

	mu      sync.Mutex
	failed  []protocol.AckFailure // guarded by mu
	adopted []protocol.Adoption   // guarded by mu: an ADOPT's runs taken over (adopt.go)
}

func (b *ackBatch) refuse(runID uint64, code protocol.Code, msg string) {
	b.mu.Lock()
	b.failed = append(b.failed, protocol.AckFailure{RunID: runID, Code: code, Message: msg})
	b.mu.Unlock()
}

// ended is a durable run's deletion outcome (endListener), on the deleter goroutine; the
// last one pushes the reply.
func (b *ackBatch) ended(runID uint64, deleteErr error) {
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
	return &protocol.Acked{ID: b.id, Failed: b.failed, Adopted: b.adopted}
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
func (rr *remoteRuns) complete(runID uint64, err error) error {
	return rr.engine.Complete(runID, err)
}
