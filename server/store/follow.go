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
	RecordPut      ChangeKind = iota + 1 // Record was written
	RecordDelete                         // the record of Key was deleted
	LockPut                              // Key's run lock was written
	LockDelete                           // Key's run lock was deleted
	NextPut                              // Key's progress was written: Next
	NextDelete                           // Key's progress was deleted
	OtherChange                          // anything else under the prefix (the election, the workers and nodes registries, the partition count and map, the configuration)
	PackPut                              // pack PackID was written: Pack holds its entries
	PackDelete                           // pack PackID was deleted (its done key goes in the same transaction)
	PackDonePut                          // the ended entries of pack PackID were written: Done
	PackDoneDelete                       // the done key of pack PackID was deleted
)

// Change is one write under the store's prefix, as Follow sees it.
type Change struct {
	Kind   ChangeKind
	Key    Key
	Record Record   // RecordPut only
	Next   NextDue  // NextPut only
	PackID string   // the Pack* kinds: the pack's ID
	Pack   []Record // PackPut only: its entries (Record.Pack set)
	Done   PackDone // PackDonePut only (Done.Len counts whole bytes: the pack's own count is in the pack)
	Rev    int64    // the write's revision
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
	for resp := range s.cli.Watch(wctx, s.keys.prefix, clientv3.WithPrefix(), clientv3.WithRev(fromRev)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrFollowLost, err)
		}
		for _, ev := range resp.Events {
			fn(s.keys.change(ev))
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return ErrFollowLost
}

// change is what the watch event ev, under the prefix, means.
func (k keyspace) change(ev *clientv3.Event) Change {
	key := string(ev.Kv.Key)
	c := Change{Kind: OtherChange, Rev: ev.Kv.ModRevision}
	put := ev.Type == clientv3.EventTypePut
	switch {
	case strings.HasPrefix(key, k.tasks):
		tk, ok := taskOf(k.tasks, key)
		if !ok {
			return c
		}
		c.Key = tk
		if !put {
			c.Kind = RecordDelete
			return c
		}
		r, err := k.decodeRecord(ev.Kv.Key, ev.Kv.Value)
		if err != nil {
			return c // not a record this store wrote: ignored, as Load would refuse it
		}
		c.Kind, c.Record = RecordPut, r
	case strings.HasPrefix(key, k.next):
		if !put {
			if tk, ok := taskOf(k.next, key); ok {
				c.Kind, c.Key = NextDelete, tk
			}
			return c
		}
		if nd, ok := k.decodeProgress(ev.Kv.Key, ev.Kv.Value); ok {
			c.Kind, c.Key, c.Next = NextPut, nd.Key, nd
		}
	case strings.HasPrefix(key, k.packs):
		c.PackID = strings.TrimPrefix(key, k.packs)
		if !put {
			c.Kind = PackDelete
			return c
		}
		if entries, err := decodePack(c.PackID, ev.Kv.Value); err == nil {
			c.Kind, c.Pack = PackPut, entries
		}
	case strings.HasPrefix(key, k.packDone):
		c.PackID = strings.TrimPrefix(key, k.packDone)
		if !put {
			c.Kind = PackDoneDelete
			return c
		}
		if d, ok := decodePackDone(c.PackID, ev.Kv.Value); ok {
			c.Kind, c.Done = PackDonePut, d
		}
	case strings.HasPrefix(key, k.locks):
		tk, ok := taskOf(k.locks, key)
		if !ok {
			return c
		}
		c.Key = tk
		c.Kind = LockDelete
		if put {
			c.Kind = LockPut
		}
	}
	return c
}

// Revision returns etcd's current revision (one linearizable read): every write
// committed before the call is at or below it.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.keys.tasks, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: read the revision: %w", err)
	}
	return resp.Header.Revision, nil
}
