package client

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// Carrying outcomes across a failover (PROTOCOL.md, CARRY). A run whose report (ACK or
// NACK) got no definite answer (the connection was lost, the answer did not come within
// RequestTimeout, or the leader answered STALE_EPOCH or NOT_LEADER: it stepped down
// before recording the end) finished all the same; its outcome is kept in the Worker's
// carry set and handed in on the next connection, right after the handshake and before
// SUBSCRIBE grants any credit, so that the next leader ends the run with it instead of
// running the task again. OnAcked is called for such a run once, when the carry is
// settled (accepted: ackErr nil; refused: the refusal), or when Run returns with it
// still held (the last error).

// runRef names a run across leaders: run IDs are unique within one leader's term only.
type runRef struct{ epoch, run uint64 }

// carrySet is a Worker's outcomes awaiting a definite answer (Worker.carry): kept as
// their reports go unanswered (keep), handed in on each new connection as CARRY frames
// (handIn), settled by the answers (settleAll), and given up when Run returns (drop).
//
// Invariants:
//   - len(runs) ≤ max; an outcome is kept under the run it reports, (epoch, run ID),
//     once: kept again (another connection's CARRY went unanswered) it replaces itself,
//     keeping the Fire detached the first time.
//   - An outcome leaves runs only by settleAll (a definite answer: accepted or refused)
//     or drop (Run returns), and OnAcked is told of it then, not before.
//
// Locking: runs is guarded by mu, never held across a send or a wait, or while
// OnAcked runs; the counters are atomic; the fields set by init are immutable after.
// Its methods are called by the Worker's connection goroutines and their answer waiters
// (wg), and by Run (drop), concurrently.
type carrySet struct {
	// Set by init, immutable after.
	max     int                                 // Options.MaxCarried
	timeout time.Duration                       // Options.RequestTimeout: how long a CARRY's answer is awaited
	onAcked func(f *Fire, result, ackErr error) // Options.OnAcked (nil: none)

	mu   sync.Mutex
	runs map[runRef]carriedRun // guarded by mu; at most max

	// What became of the outcomes (CarryStats), atomic: read without mu.
	kept, full, abandoned, sent, accepted, refused, dropped atomic.Uint64
}

// CarryStats counts what a Worker did with the outcomes of its runs whose reports got no
// definite answer (a failover, a lost connection): each is a run the next leader runs
// again unless it accepts the outcome. Counted since NewWorker.
type CarryStats struct {
	Kept uint64 // outcomes put in the carry set, for the next connection
	Full uint64 // outcomes given up because the set held Options.MaxCarried
	// Abandoned counts runs not reported: their handler returned while Run was stopping,
	// or after their connection was lost with Options.CancelOnDisconnect (or a batch
	// handler's).
	Abandoned uint64
	Sent      uint64 // outcomes sent in CARRY frames (one kept outcome may be sent on several connections)
	Accepted  uint64 // carried outcomes the leader accepted: their runs end with them
	Refused   uint64 // carried outcomes the leader refused (or settled by an encoding error)
	Dropped   uint64 // outcomes still kept when Run returned, given up
	// Runs still running when their connection went (ADOPT: running.go), unless
	// Options.CancelOnDisconnect: RunningSent counts those handed in (one run may be
	// handed in on several connections), RunningAdopted those a leader took over,
	// RunningRefused those refused (their handlers' contexts ended), and RunningDropped
	// the outcomes of refused runs dropped as their handlers returned.
	RunningSent, RunningAdopted, RunningRefused, RunningDropped uint64
}

// CarryStats returns the Worker's counts of carried outcomes so far.
func (w *Worker) CarryStats() CarryStats {
	cs := &w.carry
	ls := &w.live
	return CarryStats{Kept: cs.kept.Load(), Full: cs.full.Load(), Abandoned: cs.abandoned.Load(), Sent: cs.sent.Load(),
		Accepted: cs.accepted.Load(), Refused: cs.refused.Load(), Dropped: cs.dropped.Load(),
		RunningSent: ls.handedIn.Load(), RunningAdopted: ls.adopted.Load(), RunningRefused: ls.refused.Load(),
		RunningDropped: ls.dropped.Load()}
}

// init readies cs for a Worker with opts. Called once, by NewWorker.
func (cs *carrySet) init(opts *Options) {
	cs.max, cs.timeout, cs.onAcked = opts.MaxCarried, opts.RequestTimeout, opts.OnAcked
}

// carriedRun is a kept outcome and the last reason its report was not settled.
type carriedRun struct {
	o   outcome
	why error
}

// unsettled reports whether ackErr leaves a run's end unrecorded by any leader, so that
// its outcome is worth carrying to the next: no answer (a lost or closed connection, a
// timeout), or a node that stopped leading before it recorded the end. OK, UNKNOWN_RUN
// (the run is not the leader's any more) and INTERNAL from a node that still leads (it
// no longer holds the task) settle the run.
func unsettled(ackErr error) bool {
	if ackErr == nil {
		return false
	}
	var perr *protocol.Error
	if errors.As(ackErr, &perr) {
		switch perr.Code {
		case protocol.CodeStaleEpoch, protocol.CodeNotLeader, protocol.CodeShuttingDown:
			return true
		}
		return false
	}
	return errors.Is(ackErr, ErrConnectionLost) || errors.Is(ackErr, errNotSent) || errors.Is(ackErr, ErrClosed) ||
		errors.Is(ackErr, context.DeadlineExceeded)
}

// keep adds o to the set (why: its report's answer); false when the set is full
// (max), and o is then settled as it is: the task may run again.
func (cs *carrySet) keep(o outcome, why error) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	ref := runRef{o.fire.Epoch, o.fire.RunID}
	old, ok := cs.runs[ref]
	if !ok && len(cs.runs) >= cs.max {
		cs.full.Add(1)
		return false
	}
	if ok {
		o.fire = old.o.fire
	} else {
		o.fire = detach(o.fire)
	}
	cs.kept.Add(1)
	if cs.runs == nil {
		cs.runs = map[runRef]carriedRun{}
	}
	cs.runs[ref] = carriedRun{o: o, why: why}
	return true
}

// detach returns a copy of f that shares no memory with the frame it came in: the runs
// of a FIRES share their frame's buffer of IDs and payloads, which one kept outcome
// would keep whole (MaxCarried of them, a frame each), its trace context too. Namespace
// and type are interned strings of their own.
func detach(f *Fire) *Fire {
	d := *f
	d.TaskID, d.Payload = strings.Clone(f.TaskID), bytes.Clone(f.Payload)
	d.Traceparent, d.Tracestate = strings.Clone(f.Traceparent), strings.Clone(f.Tracestate)
	return &d
}

// frames is the set as CARRY frames: one per epoch (run IDs are unique within
// one), of at most protocol.MaxBatch outcomes; one empty frame when the set is empty,
// which still tells the leader this worker has handed in what it holds.
func (cs *carrySet) frames() [][]outcome {
	cs.mu.Lock()
	all := make([]outcome, 0, len(cs.runs))
	for _, c := range cs.runs {
		all = append(all, c.o)
	}
	cs.mu.Unlock()
	if len(all) == 0 {
		return [][]outcome{nil}
	}
	slices.SortFunc(all, func(a, b outcome) int {
		if a.fire.Epoch != b.fire.Epoch {
			return cmpUint(a.fire.Epoch, b.fire.Epoch)
		}
		return cmpUint(a.fire.RunID, b.fire.RunID)
	})
	var frames [][]outcome
	for start := 0; start < len(all); {
		end := start + 1
		for end < len(all) && end-start < protocol.MaxBatch && all[end].fire.Epoch == all[start].fire.Epoch {
			end++
		}
		frames = append(frames, all[start:end])
		start = end
	}
	return frames
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// carryMsg is frame's CARRY with request ID id.
func carryMsg(id uint64, frame []outcome) *protocol.Carry {
	m := &protocol.Carry{ID: id, Outcomes: make([]protocol.Outcome, len(frame))}
	for i, o := range frame {
		f := o.fire
		due, _ := protocol.UnixNano(f.Due)
		po := protocol.Outcome{RunID: f.RunID, Epoch: f.Epoch, Namespace: f.Namespace, TaskID: f.TaskID,
			Version: f.Version, Attempt: uint64(f.Attempt), Due: due}
		if o.result != nil {
			po.Failed, po.Err, po.Retryable = true, truncErr(o.result.Error()), !task.IsNonRetryable(o.result)
		}
		m.Outcomes[i] = po
	}
	return m
}

// handIn sends the carry set as CARRY frames on cn, before anything else is sent on it
// (the server reads frames in order, so they are dealt with before SUBSCRIBE grants
// credits), and waits for their answers on goroutines counted in wg, each up to
// RequestTimeout. It returns an error only when cn is dead (nothing more can be sent).
func (cs *carrySet) handIn(cn *conn, wg *sync.WaitGroup) error {
	for _, frame := range cs.frames() {
		if err := cs.send(cn, frame, wg); err != nil {
			return err
		}
	}
	return nil
}

// send sends frame as one CARRY, or, when it does not fit the server's max_frame,
// as two halves; an outcome that does not fit alone is given up (settled with the
// encoding error: its task may run again).
func (cs *carrySet) send(cn *conn, frame []outcome, wg *sync.WaitGroup) error {
	id, ch, err := cn.call(func(id uint64) protocol.Message { return carryMsg(id, frame) })
	var perr *protocol.Error
	switch {
	case errors.Is(err, errNotSent):
		return err
	case err == nil:
		cs.sent.Add(uint64(len(frame)))
	case errors.As(err, &perr) && len(frame) > 1: // too large for the server's max_frame
		if err := cs.send(cn, frame[:len(frame)/2], wg); err != nil {
			return err
		}
		return cs.send(cn, frame[len(frame)/2:], wg)
	case err != nil:
		cs.settleAll(frame, func(uint64) error { return err })
		return nil
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		reply, err := cn.await(id, ch, cs.timeout)
		cs.answered(frame, reply, err)
	}()
	return nil
}

// answered settles the outcomes of one CARRY frame from its answer: each one the
// ACKED does not list was accepted, each one it lists refused; a server that does not
// know CARRY (UNKNOWN_TYPE) refuses them all. Any other error (no answer, NOT_LEADER)
// settles nothing: the outcomes are carried to the next connection.
func (cs *carrySet) answered(frame []outcome, reply protocol.Message, err error) {
	var perr *protocol.Error
	if errors.As(err, &perr) && perr.Code == protocol.CodeUnknownType {
		cs.settleAll(frame, func(uint64) error { return err })
		return
	}
	acked, err := expect[*protocol.Acked](reply, err)
	if err != nil {
		return
	}
	failed := make(map[uint64]error, len(acked.Failed))
	for _, f := range acked.Failed {
		failed[f.RunID] = &protocol.Error{ID: acked.ID, Code: f.Code, Message: f.Message, RunID: f.RunID}
	}
	cs.settleAll(frame, func(run uint64) error { return failed[run] })
}

// settleAll removes frame's outcomes from the set and tells OnAcked of each, with the
// answer ackErr gives for its run ID (nil: accepted); one answered STALE_EPOCH (the
// leader stepped down before recording it) stays in the set, for the next connection.
func (cs *carrySet) settleAll(frame []outcome, ackErr func(run uint64) error) {
	for _, o := range frame {
		err := ackErr(o.fire.RunID)
		if unsettled(err) {
			continue
		}
		cs.mu.Lock()
		delete(cs.runs, runRef{o.fire.Epoch, o.fire.RunID})
		cs.mu.Unlock()
		if err == nil {
			cs.accepted.Add(1)
		} else {
			cs.refused.Add(1)
		}
		o.settled(cs.onAcked, err)
	}
}

// drop settles every outcome still held when Run returns, with the last reason
// its report was not settled: the server redelivers those runs.
func (cs *carrySet) drop() {
	cs.mu.Lock()
	left := cs.runs
	cs.runs = nil
	cs.mu.Unlock()
	cs.dropped.Add(uint64(len(left)))
	for _, c := range left {
		c.o.settled(cs.onAcked, c.why)
	}
}

// settled tells onAcked (Options.OnAcked), if set, how o's report was finally
// answered, of the Fire its handler got.
func (o outcome) settled(onAcked func(f *Fire, result, ackErr error), ackErr error) {
	if onAcked != nil {
		f := o.fire
		if o.ran != nil {
			f = o.ran
		}
		onAcked(f, o.result, ackErr)
	}
}
