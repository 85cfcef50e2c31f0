package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestLeaseDeadlineFromSendTime: a keep-alive whose answer comes back long after it was
// sent (past LeaseGuard: a stalled process, a response sitting in a socket buffer)
// extends the valid-until no further than its send time + TTL - guard, since etcd
// extended the lease when it got the request. Pure logic: a fake keep-alive and clock.
func TestLeaseDeadlineFromSendTime(t *testing.T) {
	const (
		ttl   = 2 * time.Second
		guard = 500 * time.Millisecond
		delay = 3 * time.Second // the answer's delay: past the guard, past the TTL even
	)
	clock := time.Now()
	now := func() time.Time { return clock }
	var d leaseDeadline
	d.extend(clock, ttl, guard)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent []time.Time
	once := func(context.Context) (int64, error) {
		sent = append(sent, clock)
		clock = clock.Add(delay) // the answer arrives delay after the request left
		if len(sent) == 2 {
			cancel()
		}
		return int64(ttl / time.Second), nil
	}
	// every is short: the ticker is the real one, and only paces the loop.
	if err := renew(ctx, once, now, time.Millisecond, guard, &d); !errors.Is(err, context.Canceled) {
		t.Fatalf("renew: %v, want context.Canceled", err)
	}
	want := sent[1].Add(ttl - guard)
	if got := d.until(); !got.Equal(want) {
		t.Fatalf("valid until %v after the second keep-alive's send; want send+TTL-guard = %v (the answer came %v after the send)",
			got.Sub(sent[1]), want.Sub(sent[1]), delay)
	}
	if d.valid(clock) {
		t.Fatalf("valid at the late answer's arrival (%v after its send), though etcd may expire the lease %v after it", delay, ttl)
	}
	if !d.valid(want.Add(-time.Nanosecond)) || d.valid(want) {
		t.Fatal("valid is not exactly now < valid-until")
	}
	// tockd checks it on every FIRE.
	if n := testing.AllocsPerRun(100, func() { d.valid(time.Now()) }); n != 0 {
		t.Fatalf("valid allocates %v times per call", n)
	}
}

// TestLeaseDeadlineOnlyGrowsAndStops: an older send extends nothing; a failed try
// extends nothing and the loop goes on; a lease etcd no longer has ends renew.
func TestLeaseDeadlineOnlyGrowsAndStops(t *testing.T) {
	const ttl, guard = 2 * time.Second, 500 * time.Millisecond
	base := time.Now()
	var d leaseDeadline
	d.extend(base.Add(time.Second), ttl, guard)
	d.extend(base, ttl, guard)
	if want := base.Add(time.Second + ttl - guard); !d.until().Equal(want) {
		t.Fatalf("an older send moved the deadline back: %v, want %v", d.until().Sub(base), want.Sub(base))
	}
	calls := 0
	once := func(context.Context) (int64, error) {
		calls++
		switch calls {
		case 1:
			return 0, context.DeadlineExceeded // no answer in time
		case 2:
			return 0, rpctypes.ErrLeaseNotFound
		}
		t.Fatal("renew went on after the lease was gone")
		return 0, nil
	}
	before := d.until()
	now := func() time.Time { return base.Add(time.Hour) }
	if err := renew(context.Background(), once, now, time.Millisecond, guard, &d); !errors.Is(err, errLeaseGone) {
		t.Fatalf("renew: %v, want errLeaseGone", err)
	}
	if !d.until().Equal(before) {
		t.Fatal("a failed keep-alive extended the deadline")
	}
}
