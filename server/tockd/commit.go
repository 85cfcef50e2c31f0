package tockd

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/tock-sched/tock/server/store"
)

// committer groups the durable record writes of concurrent requests (SUBMITs from many
// connections) into shared etcd transactions, so that durable throughput is bounded by
// etcd rather than by one round trip per request: while one write is in flight, the
// requests that arrive queue, and the next write carries all of them (store.PutBatch
// splits it by MaxTxnOps and runs the parts concurrently). The first request to find no
// write in flight commits for everyone queued, then returns its own result; the others
// wait for theirs. A request that names a key already in the batch being formed waits for
// the next one, so that each key's write keeps its own version check. Each request
// carries the term its tasks were claimed in (leadership.fence when prepared): it is
// written only in that term, never in a later one of the same node (whose load may
// already be done).
//
// Locking: mu guards queue and busy, and is never held across the write; commits is
// atomic; st and lead are set by newReplica.
type committer struct {
	st      *store.Store
	lead    *leadership // the term that fences the writes
	mu      sync.Mutex
	queue   []*commitReq
	busy    bool          // a request's goroutine is committing
	commits atomic.Uint64 // shared writes made (STATS durable_commits)
	// afterPut, if set (by tests, before Serve), replaces each shared write's outcome
	// once the write is done: a write that landed can be made to look as if it timed out.
	afterPut func(recs []store.Record, errs []error) []error
}

type commitReq struct {
	fence *store.Fence // the term of the claims
	recs  []store.Record
	errs  []error
	done  chan struct{}
}

// groupBelow is the size under which a request's records are grouped with others': a
// larger one (a SUBMIT_BATCH) fills transactions by itself, and writing it at once keeps
// concurrent large requests in flight together rather than one after another.
const groupBelow = 64

// put writes recs, fenced by term (the fence when they were claimed; it must still be
// the current one), and returns one error per record.
func (c *committer) put(term *store.Fence, recs []store.Record) []error {
	if len(recs) >= groupBelow {
		r := &commitReq{fence: term, recs: recs, done: make(chan struct{})}
		c.commit([]*commitReq{r})
		return r.errs
	}
	req := &commitReq{fence: term, recs: recs, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, req)
	if c.busy {
		c.mu.Unlock()
		<-req.done
		return req.errs
	}
	c.busy = true
	c.mu.Unlock()
	for {
		c.mu.Lock()
		batch := c.take()
		if len(batch) == 0 {
			c.busy = false
			c.mu.Unlock()
			break
		}
		c.mu.Unlock()
		c.commit(batch)
	}
	<-req.done
	return req.errs
}

// take removes from the queue the requests of the next batch: every one whose keys are
// not already in it. Requires c.mu.
func (c *committer) take() []*commitReq {
	var batch, later []*commitReq
	keys := map[store.Key]bool{}
next:
	for _, r := range c.queue {
		for _, rec := range r.recs {
			if keys[store.Key{Namespace: rec.Namespace, ID: rec.ID}] {
				later = append(later, r)
				continue next
			}
		}
		for _, rec := range r.recs {
			keys[store.Key{Namespace: rec.Namespace, ID: rec.ID}] = true
		}
		batch = append(batch, r)
	}
	c.queue = later
	return batch
}

// commit writes a batch's records in one fenced PutBatch and hands each request its
// errors; a request claimed in another term than the server's now gets ErrFenced.
func (c *committer) commit(batch []*commitReq) {
	f := c.lead.fence.Load()
	var all []store.Record
	for _, r := range batch {
		if f != nil && r.fence == f {
			all = append(all, r.recs...)
		}
	}
	var errs []error
	if len(all) > 0 {
		c.commits.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
		var err error
		errs, err = c.st.Records().PutBatchFenced(ctx, *f, all) // a failed transaction is in errs too
		cancel()
		c.lead.fencedOut(*f, err)
		if c.afterPut != nil {
			errs = c.afterPut(all, errs)
		}
	}
	for _, r := range batch {
		if f != nil && r.fence == f {
			r.errs, errs = errs[:len(r.recs):len(r.recs)], errs[len(r.recs):]
		} else {
			r.errs = make([]error, len(r.recs))
			for i := range r.errs {
				r.errs[i] = store.ErrFenced
			}
		}
		close(r.done)
	}
}
