package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
)

// serverTarget is a tockd at c.addr: c.workers Workers run its tasks, and one Client per
// producer submits them; submits go round-robin over the clients by producer index.
type serverTarget struct {
	c       config
	rec     *Recorder
	d       protocol.Durability
	clients []*client.Client
	workers []*client.Worker
	sub     submitter // submitTo, wrapped by retrying with -submit-retry
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the Workers' Run goroutines
}

// newServerTarget starts the Workers and dials the Clients. Each ACK's answer is
// recorded in rec for the run's own tasks (runTag): a confirmed one means the task must
// never run again.
func newServerTarget(ctx context.Context, c config, runTag uint64, rec *Recorder, h hooks) (*serverTarget, error) {
	wctx, cancel := context.WithCancel(ctx)
	s := &serverTarget{c: c, rec: rec, d: protocol.Ephemeral, cancel: cancel}
	if c.durable {
		s.d = protocol.Durable
	}
	var backoff client.Option // client defaults
	if c.chaos != "" {
		backoff = client.WithReconnectBackoff(chaosReconnectInitial, chaosReconnectMax)
	}
	onAcked := client.WithOnAcked(func(f *client.Fire, result, ackErr error) {
		if result != nil {
			return
		}
		if run, i, _, ok := decodePayload(f.Payload); ok && run == runTag {
			rec.Acked(i, ackErr == nil)
		}
	})
	for range c.workers {
		w, err := client.NewWorker(c.addr, client.WithConcurrency(c.concurrency), client.WithClientName("loadgen-worker"), onAcked, backoff)
		if err == nil {
			err = w.Handle(taskType, func(_ context.Context, f *client.Fire) error {
				h.handle(f.Payload)
				h.ack(f.Payload) // the Worker sends the ACK as this returns
				return nil
			})
		}
		if err != nil {
			s.stop()
			return nil, err
		}
		s.workers = append(s.workers, w)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := w.Run(wctx); err != nil && !errors.Is(err, context.Canceled) {
				fmt.Fprintln(os.Stderr, "loadgen: worker:", err) // a permanent error: the runs will be lost
			}
		}()
	}
	for range c.producers {
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		cl, err := client.Dial(dctx, c.addr, client.WithClientName("loadgen"), backoff)
		dcancel()
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("dial %s: %w", c.addr, err)
		}
		s.clients = append(s.clients, cl)
	}
	s.sub = s.submitTo
	if c.submitRetry > 0 {
		s.sub = retrying(s.sub, rec, c.submitRetry)
	}
	return s, nil
}

func (s *serverTarget) submit(ctx context.Context, lo int, ts []task.Task) ([]error, error) {
	return s.sub(ctx, lo, ts)
}

// submitTo submits on the Client of the producer of task lo: one SUBMIT for a batch of
// one under -batch 1, a SUBMIT_BATCH otherwise.
func (s *serverTarget) submitTo(ctx context.Context, lo int, ts []task.Task) ([]error, error) {
	cl := s.clients[producerOf(s.c, lo)]
	if len(ts) == 1 && s.c.batch == 1 {
		_, err := cl.Submit(ctx, ts[0], s.d)
		return []error{err}, nil
	}
	items, err := cl.SubmitBatch(ctx, ts, s.d)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(items))
	for k, it := range items {
		errs[k] = it.Err
	}
	return errs, nil
}

// settle waits for the ACKs of a durable run to be confirmed (waitConfirmed) unless the
// wait for the runs gave up; it returns the tasks still unconfirmed.
func (s *serverTarget) settle(ctx context.Context, timedOut bool) int64 {
	if !s.c.durable || timedOut {
		return 0
	}
	return waitConfirmed(ctx, s.rec, s.c.grace)
}

// notes is a line per Worker that carried outcomes: what became of them (the split of a
// failover's re-runs between outcomes never carried and outcomes refused).
func (s *serverTarget) notes() []string {
	var notes []string
	for i, w := range s.workers {
		c := w.CarryStats()
		if c == (client.CarryStats{}) {
			continue
		}
		notes = append(notes, fmt.Sprintf("worker %d carry: kept %d (set full %d), abandoned %d, sent %d, accepted %d, refused %d",
			i, c.Kept, c.Full, c.Abandoned, c.Sent, c.Accepted, c.Refused))
	}
	return notes
}

// stop ends the Workers, waits for them and closes the Clients.
func (s *serverTarget) stop() {
	s.cancel()
	s.wg.Wait()
	for _, cl := range s.clients {
		_ = cl.Close()
	}
}

// waitConfirmed waits, after every task of a durable run has run, until every one has a
// confirmed ACK: a task whose ACK was unconfirmed when leadership moved may run again
// under the next leader, and the workers must still be there for it, or the cluster
// keeps its record (it still owes it a run) after loadgen is gone. A task whose end was
// recorded but whose answer was lost never gets a confirmation, so the wait gives up
// after a grace with no new confirmation (or when ctx ends) and returns the tasks still
// unconfirmed.
func waitConfirmed(ctx context.Context, rec *Recorder, grace time.Duration) int64 {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	last, _ := rec.Confirmed()
	quiet := time.Now()
	for {
		got, want := rec.Confirmed()
		if got >= want {
			return 0
		}
		if got != last {
			last, quiet = got, time.Now()
		} else if time.Since(quiet) > grace {
			return want - got
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return want - got
		}
	}
}
