package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fence makes a write conditional on leadership: it applies only while the election key
// Key still exists with create revision Rev (the writer's term, Leadership.Fence). A
// deposed leader's late write is refused (ErrFenced) instead of landing after the next
// leader has loaded the task set. The zero Fence writes unconditionally.
type Fence struct {
	Key string
	Rev int64
}

func (f Fence) txn(t clientv3.Txn) clientv3.Txn {
	if f.Key == "" {
		return t
	}
	return t.If(clientv3.Compare(clientv3.CreateRevision(f.Key), "=", f.Rev))
}

func (f Fence) held(resp *clientv3.TxnResponse) bool { return f.Key == "" || resp.Succeeded }

// txnRunner commits a batch's independent transactions side by side, at most limit
// (Options.TxnConcurrency) in flight at once: etcd writes far more keys a second from
// several transactions in flight than from one after another. It holds no mutable
// state; its methods are safe for concurrent use.
type txnRunner struct {
	cli   *clientv3.Client
	limit int
}

// each runs fn(0..n-1), at most limit at once, and returns the first error (every call
// runs regardless).
func (r txnRunner) each(n int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	sem := make(chan struct{}, r.limit)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}

// commitFenced commits txns, each one transaction conditional on f, limit at once; what
// names them in an error.
func (r txnRunner) commitFenced(ctx context.Context, f Fence, txns [][]clientv3.Op, what string) error {
	return r.each(len(txns), func(i int) error {
		resp, err := f.txn(r.cli.Txn(ctx)).Then(txns[i]...).Commit()
		if err != nil {
			return txnFailed(fmt.Sprintf("%s (%d ops)", what, len(txns[i])), err)
		}
		if !f.held(resp) {
			return ErrFenced
		}
		return nil
	})
}

// refusedUnproposed are etcd's refusals of a request before it is proposed to raft: a
// write that fails with one of them has not committed.
var refusedUnproposed = []error{rpctypes.ErrNoSpace, rpctypes.ErrTooManyRequests, rpctypes.ErrTooManyOps,
	rpctypes.ErrRequestTooLarge, rpctypes.ErrDuplicateKey, rpctypes.ErrNoLeader, rpctypes.ErrPermissionDenied}

// txnFailed is the error of a write transaction (what names it) whose Commit failed:
// wrapped in ErrUncertain unless etcd refused it unproposed. A timeout, a lost
// connection, a cancelled context and any error this does not know leave the outcome
// unknown: the request may have reached etcd and committed.
func txnFailed(what string, err error) error {
	for _, known := range refusedUnproposed {
		if errors.Is(err, known) {
			return fmt.Errorf("store: %s: %w", what, err)
		}
	}
	return fmt.Errorf("%w: %s: %w", ErrUncertain, what, err)
}
