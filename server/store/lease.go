package store

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// renewDivide sets how often a session's own keep-alive loop renews its lease: every
// SessionTTL/renewDivide, each try bounded by the same interval. Four tries fit in one
// TTL, so that one or two slow answers leave the deadline ahead of now.
const renewDivide = 4

// monoBase is the origin of every leaseDeadline: a time.Time read once, so that
// now.Sub(monoBase) is a monotonic reading that wall-clock steps cannot move.
var monoBase = time.Now()

// leaseDeadline is a session's "valid until": the latest moment at which this node is
// certain its lease is still alive, minus LeaseGuard. It only grows. Stored as monotonic
// nanoseconds since monoBase, so that checking it (valid) is one atomic load and a
// compare, with no allocation: tockd checks it on every FIRE.
type leaseDeadline struct {
	nanos atomic.Int64
}

// extend moves the deadline to sent+ttl-guard if that is later. sent must be read
// before the keep-alive request was sent: etcd extends the lease when it processes the
// request, which is after sent, so the lease lives at least until sent+ttl. An answer
// received late (a stalled or starved process, a response sitting in a socket buffer)
// extends the deadline no further than its request's send time allows.
func (d *leaseDeadline) extend(sent time.Time, ttl, guard time.Duration) {
	until := int64(sent.Sub(monoBase) + ttl - guard)
	for {
		cur := d.nanos.Load()
		if until <= cur || d.nanos.CompareAndSwap(cur, until) {
			return
		}
	}
}

// valid reports whether now is before the deadline.
func (d *leaseDeadline) valid(now time.Time) bool {
	return int64(now.Sub(monoBase)) < d.nanos.Load()
}

// until is the deadline as a time.Time (with a monotonic reading).
func (d *leaseDeadline) until() time.Time {
	return monoBase.Add(time.Duration(d.nanos.Load()))
}

// keepAliveOnce is one lease keep-alive: the TTL etcd granted (seconds; 0 or less: the
// lease is gone). (*clientv3.Client).KeepAliveOnce in production; a fake in the unit
// test of renew.
type keepAliveOnce func(ctx context.Context) (ttl int64, err error)

// errLeaseGone is what renew returns when etcd says the lease no longer exists.
var errLeaseGone = errors.New("store: the session's lease is gone")

// renew keeps d current until ctx ends or the lease is gone (errLeaseGone): every
// every, one keep-alive bounded by every, its send time read (by now) before it is
// sent; an answered keep-alive with TTL > 0 extends d to sent+TTL-guard. A failed try
// extends nothing: d then runs out by itself, and the session watch steps down.
func renew(ctx context.Context, once keepAliveOnce, now func() time.Time, every, guard time.Duration, d *leaseDeadline) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		sent := now()
		rctx, cancel := context.WithTimeout(ctx, every)
		ttl, err := once(rctx)
		cancel()
		switch {
		case err == nil && ttl > 0:
			d.extend(sent, time.Duration(ttl)*time.Second, guard)
		case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
			return errLeaseGone
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// clientKeepAliveOnce is keepAliveOnce for lease id on cli.
func clientKeepAliveOnce(cli *clientv3.Client, id clientv3.LeaseID) keepAliveOnce {
	return func(ctx context.Context) (int64, error) {
		r, err := cli.KeepAliveOnce(ctx, id)
		if err != nil {
			return 0, err
		}
		return r.TTL, nil
	}
}
