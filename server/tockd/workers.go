package tockd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// errNoWorker fails an attempt (retryably) when no subscribed worker for its type has a
// credit and room in its reply queue; the task's retry policy decides what follows.
var errNoWorker = errors.New("tockd: no worker available")

// errWorkerGone fails (retryably) every run in flight on a worker connection that closed,
// so that the engine redelivers it, to another worker, per the task's retry policy.
var errWorkerGone = errors.New("tockd: worker disconnected")

// dispatcher routes due tasks to subscribed worker connections. Its mutex guards every
// connection's workerState and the maps below; it is taken by engine handlers (FIRE) and
// by worker connections' readers (SUBSCRIBE, CREDIT, ACK, NACK, close), never held
// across an engine call or a blocking operation. Lock order: dispatcher.mu, then
// conn.outMu.
type dispatcher struct {
	mu         sync.Mutex
	byType     map[string]map[*conn]struct{} // subscribed, open worker connections per type
	registered map[string]bool               // types whose engine handler is ours
}

// waitingLen is the number of due runs waiting for a worker.
func (d *dispatcher) waitingLen() int { return 0 }

// workerState is a worker connection's dispatch state; guarded by dispatcher.mu.
type workerState struct {
	types    []string
	credits  uint64
	inflight map[uint64]struct{} // run IDs FIREd on this connection and not yet ACKed/NACKed
}

// handler is the engine Handler registered for every subscribed type: it FIREs the
// attempt at a worker and defers its outcome to that worker's ACK or NACK.
func (s *Server) handler(_ context.Context, run *task.Run) error {
	t := run.Task
	ttr := t.Timeout
	if ttr <= 0 {
		ttr = s.opts.DefaultTTR
	}
	due, _ := protocol.UnixNano(run.Due)
	fire := &protocol.Fire{Namespace: t.Namespace, TaskID: t.ID, TaskType: t.Type, Payload: t.Payload,
		RunID: run.RunID, Attempt: uint64(run.Attempt), Due: due, Epoch: 0, TTR: int64(ttr),
		Durability: protocol.Ephemeral}

	d := &s.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	subs := d.byType[t.Type]
	tried := map[*conn]bool{}
	for {
		// Least loaded: the most free credits; ties go to any.
		var best *conn
		for c := range subs {
			if c.w.credits > 0 && !tried[c] && (best == nil || c.w.credits > best.w.credits) {
				best = c
			}
		}
		if best == nil {
			return fmt.Errorf("%w for type %q", errNoWorker, t.Type)
		}
		if !best.push(fire) {
			tried[best] = true // its queue is full (not reading) or it is closing
			continue
		}
		best.w.credits--
		best.w.inflight[run.RunID] = struct{}{}
		s.fired.Add(1)
		return task.ErrDeferred
	}
}

// push queues a server push (FIRE) on c without blocking: false when the reply queue is
// full or the connection is closing. Safe from any goroutine.
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
	select {
	case c.out <- m:
		return true
	default:
		return false
	}
}

// subscribe answers SUBSCRIBE: it replaces c's types and credits, and registers the
// server's handler for every type not yet served.
func (s *Server) subscribe(c *conn, m *protocol.Subscribe) (protocol.Message, bool) {
	d := &s.disp
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, typ := range m.Types {
		if d.registered[typ] {
			continue
		}
		if err := s.engine.Register(typ, s.handler); err != nil {
			if errors.Is(err, task.ErrInvalidTask) {
				return &protocol.Error{ID: m.ID, Code: protocol.CodeBadField, Field: fmt.Sprintf("types[%d]", i), Message: err.Error()}, false
			}
			return engineError(m.ID, err, "")
		}
		d.registered[typ] = true
	}
	for _, typ := range c.w.types {
		delete(d.byType[typ], c)
	}
	c.w.types, c.w.credits = append([]string(nil), m.Types...), m.Credits
	for _, typ := range c.w.types {
		if d.byType[typ] == nil {
			d.byType[typ] = map[*conn]struct{}{}
		}
		d.byType[typ][c] = struct{}{}
	}
	return &protocol.OK{ID: m.ID}, false
}

// credit answers CREDIT: it adds credits (saturating).
func (s *Server) credit(c *conn, m *protocol.Credit) protocol.Message {
	s.disp.mu.Lock()
	c.w.credits += min(m.Credits, ^uint64(0)-c.w.credits)
	s.disp.mu.Unlock()
	return &protocol.OK{ID: m.ID}
}

// finish answers ACK (err nil) and NACK: the run must be in flight on c; it leaves the
// in-flight set whatever the engine says (a run the engine timed out is UNKNOWN_RUN
// once, and gone). Credits are not returned: the worker grants them (PROTOCOL.md).
func (s *Server) finish(c *conn, id, runID, epoch uint64, err error) (protocol.Message, bool) {
	if epoch != 0 {
		return &protocol.Error{ID: id, Code: protocol.CodeStaleEpoch, RunID: runID,
			Message: fmt.Sprintf("epoch %d is not the leader's (0)", epoch)}, false
	}
	s.disp.mu.Lock()
	_, fired := c.w.inflight[runID]
	delete(c.w.inflight, runID)
	s.disp.mu.Unlock()
	if !fired {
		return unknownRun(id, runID, "run %d is not outstanding on this connection", runID), false
	}
	if cerr := s.complete(runID, err); cerr != nil {
		if errors.Is(cerr, task.ErrUnknownRun) {
			return unknownRun(id, runID, "run %d is no longer running (timed out or cancelled)", runID), false
		}
		return engineError(id, cerr, "")
	}
	if err == nil {
		s.acked.Add(1)
	} else {
		s.nacked.Add(1)
	}
	return &protocol.OK{ID: id}, false
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
	d.mu.Unlock()
	for runID := range inflight {
		if s.complete(runID, errWorkerGone) == nil {
			s.redelivered.Add(1)
		}
	}
}
