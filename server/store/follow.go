package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ChangeKind says what a Change is.
type ChangeKind uint8

const (
	RecordPut    ChangeKind = iota + 1 // Record was written
	RecordDelete                       // the record of Key was deleted
	LockPut                            // Key's run lock was written
	LockDelete                         // Key's run lock was deleted
	NextPut                            // Key's progress was written: Next
	NextDelete                         // Key's progress was deleted
	OtherChange                        // anything else under the prefix (the election's keys)
)

// Change is one write under the store's prefix, as Follow sees it.
type Change struct {
	Kind   ChangeKind
	Key    Key
	Record Record  // RecordPut only
	Next   NextDue // NextPut only
	Rev    int64   // the write's revision
}

// ErrFollowLost means Follow's watch ended and cannot resume from where it was (the
// revision was compacted, or etcd cancelled it): read everything again.
var ErrFollowLost = errors.New("store: follow lost: read again")

// Follow calls fn for every write under the prefix (records, run locks, the election's
// keys) from revision fromRev on, in revision order, until ctx ends (nil) or the watch is
// lost (ErrFollowLost, or the cause). Following the whole prefix lets a caller tell that
// it has seen every write before a revision it knows, such as its own election key's.
func (s *Store) Follow(ctx context.Context, fromRev int64, fn func(Change)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, s.opts.Prefix, clientv3.WithPrefix(), clientv3.WithRev(fromRev)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrFollowLost, err)
		}
		for _, ev := range resp.Events {
			fn(s.change(ev))
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return ErrFollowLost
}

func (s *Store) change(ev *clientv3.Event) Change {
	key := string(ev.Kv.Key)
	c := Change{Kind: OtherChange, Rev: ev.Kv.ModRevision}
	put := ev.Type == clientv3.EventTypePut
	switch {
	case strings.HasPrefix(key, s.tasks):
		ns, id, ok := strings.Cut(key[len(s.tasks):], "/")
		if !ok {
			return c
		}
		c.Key = Key{ns, id}
		if !put {
			c.Kind = RecordDelete
			return c
		}
		r, err := s.decode(ev.Kv.Key, ev.Kv.Value)
		if err != nil {
			return c // not a record this store wrote: ignored, as Load would refuse it
		}
		c.Kind, c.Record = RecordPut, r
	case strings.HasPrefix(key, s.next):
		if !put {
			ns, id, ok := strings.Cut(key[len(s.next):], "/")
			if ok {
				c.Kind, c.Key = NextDelete, Key{ns, id}
			}
			return c
		}
		if nd, ok := s.decodeNext(ev.Kv.Key, ev.Kv.Value); ok {
			c.Kind, c.Key, c.Next = NextPut, nd.Key, nd
		}
	case strings.HasPrefix(key, s.locks):
		ns, id, ok := strings.Cut(key[len(s.locks):], "/")
		if !ok {
			return c
		}
		c.Key = Key{ns, id}
		c.Kind = LockDelete
		if put {
			c.Kind = LockPut
		}
	}
	return c
}

// LocksAt returns the tasks with a run lock at revision rev (Load's, for a consistent
// snapshot of records and locks; 0: now).
func (s *Store) LocksAt(ctx context.Context, rev int64) (map[Key]bool, error) {
	resp, err := s.cli.Get(ctx, s.locks, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("store: read run locks at %d: %w", rev, err)
	}
	locked := make(map[Key]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if ns, id, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), s.locks), "/"); ok {
			locked[Key{ns, id}] = true
		}
	}
	return locked, nil
}
