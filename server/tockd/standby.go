package tockd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tock-sched/tock/server/store"
)

// Hot standby: while a node does not lead, it mirrors the durable task set: one paged
// read of the records (and, at the same revision, the run locks), then a watch from the
// next revision that applies every write under the store's prefix. Elected, the node
// reads etcd's revision (one read: every write of the last leader is at or below it,
// since its fenced writes end with its election key's deletion, which Campaign waited
// for), waits until the mirror has applied every write up to it, and loads the tasks
// from memory; if the mirror lags (or was lost), it reads etcd as before. The mirror
// follows the store's prefix only: on an etcd shared with other users, whose writes
// raise the revision too, it may not reach it, and the node reads etcd after
// standbyCatchUp.

// standbyCatchUp bounds how long a new leader waits for its mirror to reach etcd's
// revision at its election before it reads etcd instead.
const standbyCatchUp = time.Second

// standbyRetry is the pause before a lost mirror is read again.
const standbyRetry = 500 * time.Millisecond

// standby is a follower's mirror of the durable records (of their own, and packs), run
// locks and progress.
// Invariant: rev > 0 ⇒ records, packs, locks and next are etcd's state under the prefix
// at revision rev (every write up to rev applied, none after); rev = 0 while (re)reading.
// Locking: mu guards every field; changed waits on it. One goroutine (run) writes.
type standby struct {
	mu      sync.Mutex
	changed *sync.Cond // rev advanced or the mirror stopped
	records map[taskKey]store.Record
	packs   *store.PackSet
	locks   map[store.Key]bool
	next    map[store.Key]store.NextDue // recurring tasks' progress (progress.go)
	rev     int64                       // every write up to rev is applied; 0 while (re)reading
	stopped bool
}

func newStandby() *standby {
	sb := &standby{}
	sb.changed = sync.NewCond(&sb.mu)
	return sb
}

// run mirrors st until ctx ends; a lost watch is read again after standbyRetry. hook,
// if not nil, runs before each change is applied (leadership.standbyHook).
func (sb *standby) run(ctx context.Context, st *store.Store, log interface{ Warn(string, ...any) },
	hook func(context.Context, store.Change)) {
	defer func() {
		sb.mu.Lock()
		sb.stopped = true
		sb.changed.Broadcast()
		sb.mu.Unlock()
	}()
	for ctx.Err() == nil {
		records := map[taskKey]store.Record{}
		own, packs, rev, err := st.Records().LoadSet(ctx)
		for _, r := range own {
			records[taskKey{r.Namespace, r.ID}] = r
		}
		var locks map[store.Key]bool
		var next map[store.Key]store.NextDue
		if err == nil {
			locks, err = st.Locks().HeldAt(ctx, rev)
		}
		if err == nil {
			next, err = st.Progress().At(ctx, rev)
		}
		if err == nil {
			sb.mu.Lock()
			sb.records, sb.packs, sb.locks, sb.next, sb.rev = records, packs, locks, next, rev
			sb.changed.Broadcast()
			sb.mu.Unlock()
			apply := sb.apply
			if hook != nil {
				apply = func(c store.Change) { hook(ctx, c); sb.apply(c) }
			}
			err = st.Follow(ctx, rev+1, apply)
		}
		sb.mu.Lock()
		sb.rev = 0
		sb.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("watch ended")
		}
		log.Warn("tockd: standby mirror lost; reading the durable tasks again", "err", err, "pause", standbyRetry)
		select {
		case <-time.After(standbyRetry):
		case <-ctx.Done():
			return
		}
	}
}

// apply is Follow's callback.
func (sb *standby) apply(c store.Change) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	k := taskKey{c.Key.Namespace, c.Key.ID}
	sb.packs.Apply(c)
	switch c.Kind {
	case store.RecordPut:
		sb.records[k] = c.Record
	case store.RecordDelete:
		delete(sb.records, k)
	case store.LockPut:
		sb.locks[c.Key] = true
	case store.LockDelete:
		delete(sb.locks, c.Key)
	case store.NextPut:
		sb.next[c.Key] = c.Next
	case store.NextDelete:
		delete(sb.next, c.Key)
	}
	sb.rev = c.Rev
	sb.changed.Broadcast()
}

// current is snapshotAt etcd's revision now (read once, bounded by storeOpTimeout),
// waiting up to standbyCatchUp; false if the read failed or the mirror did not get
// there. A new leader calls it once Campaign has returned: its election key's revision
// is when it began campaigning, and the last leader's writes, up to its key's deletion,
// came after that.
func (sb *standby) current(ctx context.Context, st *store.Store) ([]store.Record, *store.PackSet, map[store.Key]bool, map[store.Key]store.NextDue, bool) {
	rctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	rev, err := st.Revision(rctx)
	cancel()
	if err != nil {
		return nil, nil, nil, nil, false
	}
	return sb.snapshotAt(rev, standbyCatchUp)
}

// snapshotAt waits (up to wait) until the mirror has applied every write up to rev and
// returns its records of their own, packs, locks and progress; false if it did not get
// there.
func (sb *standby) snapshotAt(rev int64, wait time.Duration) ([]store.Record, *store.PackSet, map[store.Key]bool, map[store.Key]store.NextDue, bool) {
	deadline := time.Now().Add(wait)
	timer := time.AfterFunc(wait, func() {
		sb.mu.Lock()
		sb.changed.Broadcast()
		sb.mu.Unlock()
	})
	defer timer.Stop()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for sb.rev < rev && !sb.stopped && time.Now().Before(deadline) {
		sb.changed.Wait()
	}
	if sb.rev < rev {
		return nil, nil, nil, nil, false
	}
	records := make([]store.Record, 0, len(sb.records))
	for _, r := range sb.records {
		records = append(records, r)
	}
	locks := make(map[store.Key]bool, len(sb.locks))
	for k := range sb.locks {
		locks[k] = true
	}
	next := make(map[store.Key]store.NextDue, len(sb.next))
	for k, due := range sb.next {
		next[k] = due
	}
	return records, sb.packs.Clone(), locks, next, true
}
