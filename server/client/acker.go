package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// maxAckFramesInFlight bounds the ACKS and NACK frames a Worker connection has sent and
// not yet had answered. While the bound is reached, finished runs accumulate, and the
// next ACKS carries all of them: under load the batches grow instead of the frames
// multiplying; with few runs each goes out at once. It is also the Worker's
// back-pressure: a run's credit is granted only with its report, so while the bound
// holds reports back (a server slow to answer, durable ACKs waiting for etcd), the
// server runs out of credits and stops sending FIREs, and at most Concurrency finished
// runs wait here.
const maxAckFramesInFlight = 16

// outcome is a finished run: result is the handler's (nil is ACKed). fire names the run
// as its report does; ran, if set, is the Fire its handler got, when a leader that took
// the run over (ADOPT: running.go) renamed it.
type outcome struct {
	fire   *Fire
	ran    *Fire
	result error
}

// acker reports a Worker connection's finished runs and grants their credits back: one
// goroutine (loop) sends the successes queued since it last looked as ACKS frames of up
// to protocol.MaxBatch runs, with the credits of every run it takes in the first, and
// each failure as a NACK; it waits for their answers on goroutines of its own, which
// call Options.OnAcked. A server that does not know ACKS (UNKNOWN_TYPE) gets one ACK per
// run and a CREDIT per round from then on.
type acker struct {
	w        *Worker
	cn       *conn
	kick     chan struct{} // capacity 1: outcomes are queued
	inflight chan struct{} // semaphore of maxAckFramesInFlight frames awaiting answers
	single   atomic.Bool   // the server answered ACKS with UNKNOWN_TYPE

	mu    sync.Mutex
	queue []outcome // guarded by mu; at most Concurrency (their credits are not yet granted)
}

// add queues o for loop; it never blocks.
func (a *acker) add(o outcome) {
	a.mu.Lock()
	a.queue = append(a.queue, o)
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default: // loop is already due to look
	}
}

// take returns the queued outcomes and clears the queue.
func (a *acker) take() []outcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	batch := a.queue
	a.queue = nil
	return batch
}

// grant sends credits in a CREDIT frame, not waiting for its answer.
func (a *acker) grant(credits uint64) {
	if credits > 0 {
		_ = a.cn.post(func(id uint64) protocol.Message { return &protocol.Credit{ID: id, Credits: credits} })
	}
}

// loop reports the queued outcomes until ctx ends, then reports those queued by then
// (the runs that finished before the Worker stopped), waiting for frame slots at most
// RequestTimeout, and returns. Each answer waiter is counted in waiters, with an Add
// made on this goroutine.
func (a *acker) loop(ctx context.Context, waiters *sync.WaitGroup) {
	var left []outcome
	for {
		select {
		case <-ctx.Done():
		case <-a.kick:
			if left = a.report(ctx, a.take(), waiters); left == nil {
				continue
			}
		}
		flush, cancel := context.WithTimeout(context.Background(), a.w.opts.RequestTimeout)
		a.report(flush, append(left, a.take()...), waiters)
		cancel()
		return
	}
}

// report sends batch, frame by frame (nextFrame), each once a slot is free, and grants
// the batch's credits: with the ACKS frames, or in a CREDIT after the last frame when no
// ACKS carried them (NACKs only, or a server without ACKS). It returns the outcomes not
// sent when ctx ended (their credits not granted), nil when all went out.
func (a *acker) report(ctx context.Context, batch []outcome, waiters *sync.WaitGroup) []outcome {
	var credits uint64 // of the outcomes sent and not yet granted
	for len(batch) > 0 {
		select {
		case a.inflight <- struct{}{}:
		case <-ctx.Done():
			a.grant(credits)
			return batch
		}
		single := a.single.Load()
		var frame []outcome
		frame, batch = nextFrame(batch, single)
		credits += uint64(len(frame))
		send := func() { a.sendOne(frame[0]) } // a NACK, or an ACK to a server without ACKS
		if frame[0].result == nil && !single {
			grant := credits // they ride on this ACKS
			credits = 0
			send = func() { a.sendAcks(frame, grant) }
		}
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			defer func() { <-a.inflight }()
			send()
		}()
	}
	a.grant(credits)
	return nil
}

// nextFrame splits off the outcomes the next frame carries: a NACK's one, or the
// leading run of successes of one epoch (at most protocol.MaxBatch; one with single).
// Order among frames does not matter: each run is answered on its own.
func nextFrame(batch []outcome, single bool) (frame, rest []outcome) {
	if batch[0].result != nil || single {
		return batch[:1], batch[1:]
	}
	n := 1
	for n < len(batch) && n < protocol.MaxBatch && batch[n].result == nil && batch[n].fire.Epoch == batch[0].fire.Epoch {
		n++
	}
	return batch[:n], batch[n:]
}

// sendOne sends o's ACK or NACK and reports its answer to OnAcked.
func (a *acker) sendOne(o outcome) {
	_, err := a.cn.roundTripWithin(a.w.opts.RequestTimeout, func(id uint64) protocol.Message { return reportOf(id, o) })
	a.acked(o, err)
}

// sendAcks sends frame's successes as one ACKS carrying credits, and reports each run's
// answer to OnAcked.
func (a *acker) sendAcks(frame []outcome, credits uint64) {
	runs := make([]uint64, len(frame))
	for i, o := range frame {
		runs[i] = o.fire.RunID
	}
	reply, err := a.cn.roundTripWithin(a.w.opts.RequestTimeout, func(id uint64) protocol.Message {
		return &protocol.Acks{ID: id, RunIDs: runs, Epoch: frame[0].fire.Epoch, Credits: credits}
	})
	var perr *protocol.Error
	if errors.As(err, &perr) && perr.Code == protocol.CodeUnknownType {
		// An older server: ACK each run alone, now and from now on; the credits the
		// ACKS carried were not granted.
		a.single.Store(true)
		a.grant(credits)
		for _, o := range frame {
			a.sendOne(o)
		}
		return
	}
	acked, err := expect[*protocol.Acked](reply, err)
	var failed map[uint64]error
	if err == nil && len(acked.Failed) > 0 {
		failed = make(map[uint64]error, len(acked.Failed))
		for _, f := range acked.Failed {
			failed[f.RunID] = &protocol.Error{ID: acked.ID, Code: f.Code, Message: f.Message, RunID: f.RunID}
		}
	}
	for _, o := range frame {
		ackErr := err
		if ackErr == nil {
			ackErr = failed[o.fire.RunID]
		}
		a.acked(o, ackErr)
	}
}

// reportOf is the ACK or NACK of one outcome, with request ID id.
func reportOf(id uint64, o outcome) protocol.Message {
	if o.result == nil {
		return &protocol.Ack{ID: id, RunID: o.fire.RunID, Epoch: o.fire.Epoch}
	}
	return &protocol.Nack{ID: id, RunID: o.fire.RunID, Epoch: o.fire.Epoch, Err: truncErr(o.result.Error()), Retryable: !task.IsNonRetryable(o.result)}
}

// acked deals with how o's report was answered: a report with no definite answer (no
// answer, STALE_EPOCH, NOT_LEADER: see unsettled) keeps o for the next connection
// (carry.go); any other answer is final and goes to OnAcked, if set. UNKNOWN_RUN (the
// TTR passed and the run was redelivered) leaves nothing else to do: the credit was
// spent by the FIRE either way.
func (a *acker) acked(o outcome, ackErr error) {
	if unsettled(ackErr) && a.w.carry.keep(o, ackErr) {
		return
	}
	o.settled(a.w.opts.OnAcked, ackErr)
}
