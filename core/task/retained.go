package task

import (
	"fmt"
	"time"

	"github.com/tock-sched/tock/core/timer"
)

// Retained finished tasks (Options.Retention). A task that finishes plainly (see
// retainable: the common one-shot task, with no failed attempt, workflow, shards, key
// or trace) leaves its record at once: the record is recycled (reuse.go) and what Get
// shows of the task is appended to its shard's retained log, a time-ordered list of
// fixed-size entries with no pointers, their strings and payload copied into their
// chunk's byte buffer. So a retained task costs the collector nothing to scan, needs no
// timer of its own and no record, and records are reused under a retention as they are
// without one. The entry keeps the slot its record had: the shard's index (index.go)
// goes on naming the task by it, slots[slot] is nil and held[slot] names the entry, so
// that keeping a task touches no memory but what its end touched already (its slot)
// and the log's tail; the slot is freed, and the index entry removed, when the entry
// goes, as they were when a retained record went. The log is read only
// when a finished task is asked for: a lookup whose key names an entry (Get, Cancel,
// Drop, Requeue, a Submit of the same ID, a workflow's parent) revives the task as a
// retained record, with the deadline it was given when it finished; from then on it is
// the retained record it would have been all along.
// List reads the log's keys and Gets a page of them. What fails or is part of a
// workflow keeps its record for the retention, as before.
//
// Invariants (Requires sh.mu for all of them; checked by verify):
//   - Entries are numbered by seq in the order they were appended; head <= next, and
//     the entries in [head, next) are in chunks[0:], chunks[0] holding the retChunkLen
//     entries from first (a multiple of retChunkLen) on. Each is live, or gone (taken
//     by a revive, a replacing Submit or a lookup that found it expired: retGone).
//   - A live entry seq holds slot en.slot: held[en.slot] = seq + 1, slots[en.slot] is
//     nil and the slot is not free; the shard's index names it by its keyHash with
//     value en.slot + 1. Its key is in no record of the shard's table.
//   - shard.tasks counts the live entries beside the records, and Engine.payloads their
//     payload bytes: a retained task counts towards MaxTasks and MaxPayloadBytes until
//     it is forgotten, as its record did.
//   - A live entry is forgotten at its deadline (expNs) at the latest when looked up; the
//     sweep timer, armed while the log holds an entry, pops the entries from head on
//     whose deadline has passed. Deadlines grow with seq while the retention does not
//     shrink; after SetRetention shrinks it, an entry behind an older one with a later
//     deadline is forgotten by a lookup at its own deadline, and popped (its slot under
//     MaxTasks given back) by that older deadline at the latest.
//   - A chunk's memory goes when every entry in it has been popped (one such chunk is
//     kept as the next one, spare, so that a log appending as fast as it pops allocates
//     nothing).
//
// Memory: 96 B (TestRetEntrySize), 16 B for the slot it holds (slots, whose nil pointer
// the collector scans, and held), plus the task's namespace, ID, type and payload
// bytes, per retained task; a chunk is allocated every retChunkLen of them.

// retChunkLen is the number of entries per chunk: a chunk is then about 24 KB, allocated
// once per 256 finished tasks of a shard.
const retChunkLen = 256

// maxSpareData bounds the bytes a chunk is made with, and those a spare chunk keeps.
const maxSpareData = 64 << 10

// Flags of a retEntry.
const (
	retGone       = 1 << iota // taken out of the log (no longer in its index)
	retPayloadNil             // the task's Payload was nil (not empty)
	retAtLocal                // Schedule.At is in time.Local (else UTC)
	retExclusive              // Task.Exclusive
)

// retEntry is one retained task: what Info shows of it, with its strings at off in its
// chunk's data (namespace, ID, type, payload, in that order). No pointers: a chunk of
// them is never scanned by the collector.
type retEntry struct {
	hash     uint64 // keyHash of the namespace and ID
	expNs    int64  // clock reading at which it is forgotten
	version  uint64
	runs     uint64
	timeout  time.Duration
	delay    time.Duration // Schedule.Delay
	interval time.Duration // Schedule.Interval
	atSec    int64         // Schedule.At: Unix seconds and nanoseconds; 0, 0 for the zero time
	atNsec   int32
	attempts int32
	off      uint32
	payLen   uint32
	slot     uint32 // the slot its record had, which it holds
	retry    uint16 // Task.Retry: its index in retained.policies
	idLen    uint16
	nsLen    uint8
	typeLen  uint8
	kind     Kind
	anchor   Anchor
	misfire  MisfirePolicy
	state    State
	flags    uint8
}

// retChunk holds retChunkLen entries and their bytes. data is first, so that the
// collector scans one word of it.
type retChunk struct {
	data []byte
	ents [retChunkLen]retEntry
}

// retained is a shard's retained log; guarded by the shard's mu.
type retained struct {
	chunks []*retChunk
	first  uint64 // seq of chunks[0].ents[0]
	head   uint64 // seq of the oldest entry not popped
	next   uint64 // seq of the next entry appended
	live   int    // entries in [head, next) not gone
	sweep  timer.Timer
	spare  *retChunk // a popped chunk, for the next one
	// policies are the retry policies of the entries (retEntry.retry), each once, at
	// most maxRetPolicies: a task with another one keeps its record. Never shrinks.
	policies []RetryPolicy
	last     uint16 // the index policy returned last
}

// maxRetPolicies bounds a shard's distinct retry policies in its retained log.
const maxRetPolicies = 64

// policy returns p's index in l.policies, adding it if there is room; ok is false if
// there is none. Cost: one comparison when p is the last one asked for (the usual
// case), else O(maxRetPolicies).
func (l *retained) policy(p RetryPolicy) (i uint16, ok bool) {
	if int(l.last) < len(l.policies) && l.policies[l.last] == p {
		return l.last, true
	}
	for i, q := range l.policies {
		if q == p {
			l.last = uint16(i)
			return l.last, true
		}
	}
	if len(l.policies) == maxRetPolicies {
		return 0, false
	}
	l.policies = append(l.policies, p)
	l.last = uint16(len(l.policies) - 1)
	return l.last, true
}

// entry returns the entry of seq, in [head, next), and its chunk.
func (l *retained) entry(seq uint64) (*retChunk, *retEntry) {
	c := l.chunks[(seq-l.first)/retChunkLen]
	return c, &c.ents[seq%retChunkLen]
}

// str returns the n bytes at off of c's data.
func (c *retChunk) str(off uint32, n int) []byte { return c.data[off : off+uint32(n)] }

// is reports whether en, of c, keeps the task (ns, id). Cost: two byte comparisons.
func (c *retChunk) is(en *retEntry, ns, id string) bool {
	return string(c.str(en.off, int(en.nsLen))) == ns && string(c.str(en.off+uint32(en.nsLen), int(en.idLen))) == id
}

// retainable reports whether rec, which has finished, can be kept as a log entry:
// nothing Info shows of it is left out of one (no attempt history or last error, no
// workflow, shards, concurrency key or trace; a schedule whose At survives Unix time).
// Requires sh.mu.
func retainable(rec *record) bool {
	t := &rec.task
	s := &t.Schedule
	return rec.rare == nil && t.Concurrency == nil && t.DependsOn == nil && t.Trace == nil && t.shard == 0 && t.Shards == 0 &&
		!t.Broadcast && s.Cron == "" && s.Location == nil && len(t.Namespace) <= 255 && len(t.Type) <= 255 &&
		len(t.ID) <= 65535 && uint64(len(t.Payload)) < 1<<31 && rec.attempts < 1<<31 && atKeeps(s.At)
}

// atKeeps reports whether t is the time that retEntry's fields give back: no monotonic
// reading, in UTC or time.Local.
func atKeeps(t time.Time) bool {
	if t.IsZero() {
		return true
	}
	loc := t.Location()
	return (loc == time.UTC || loc == time.Local) && atOf(t.Unix(), int32(t.Nanosecond()), loc == time.Local) == t
}

// atOf is the time of Unix seconds sec and nanoseconds nsec, in time.Local or UTC.
func atOf(sec int64, nsec int32, local bool) time.Time {
	if sec == 0 && nsec == 0 {
		return time.Time{}
	}
	if t := time.Unix(sec, int64(nsec)); local {
		return t
	} else {
		return t.UTC()
	}
}

// retain appends rec's finished task to sh's log, to be forgotten at clock reading
// expNs, and hands rec's slot to the entry; the caller then recycles rec. It reports
// false, and does nothing, if the log has no room for the task's retry policy.
// Requires sh.mu; rec is retainable. Cost: O(1) amortized, a copy of the task's bytes;
// a chunk every retChunkLen calls unless a spare one is there, and the sweep timer when
// the log was empty.
func (e *Engine) retain(sh *shard, rec *record, expNs int64) bool {
	l := &sh.ret
	t := &rec.task
	retry, ok := l.policy(t.Retry)
	if !ok {
		return false
	}
	if int((l.next-l.first)/retChunkLen) == len(l.chunks) {
		c := l.spare
		if l.spare = nil; c == nil {
			// Room for retChunkLen tasks' bytes the size of this one's (up to
			// maxSpareData): one allocation a chunk when they are small and alike.
			n := len(t.Namespace) + len(t.ID) + len(t.Type) + len(t.Payload)
			c = &retChunk{data: make([]byte, 0, min(retChunkLen*n, maxSpareData))}
		}
		l.chunks = append(l.chunks, c)
	}
	c, en := l.entry(l.next)
	s := &t.Schedule
	*en = retEntry{hash: rec.hash, expNs: expNs, version: t.Version, runs: rec.runs, timeout: t.Timeout, retry: retry,
		delay: s.Delay, interval: s.Interval, attempts: int32(rec.attempts), off: uint32(len(c.data)), payLen: uint32(len(t.Payload)),
		slot: rec.slot, idLen: uint16(len(t.ID)), nsLen: uint8(len(t.Namespace)), typeLen: uint8(len(t.Type)),
		kind: s.Kind, anchor: s.Anchor, misfire: t.Misfire, state: rec.state}
	if !s.At.IsZero() {
		en.atSec, en.atNsec = s.At.Unix(), int32(s.At.Nanosecond())
		if s.At.Location() == time.Local {
			en.flags |= retAtLocal
		}
	}
	if t.Payload == nil {
		en.flags |= retPayloadNil
	}
	if t.Exclusive {
		en.flags |= retExclusive
	}
	c.data = append(append(append(append(c.data, t.Namespace...), t.ID...), t.Type...), t.Payload...)
	sh.slots[rec.slot], sh.held[rec.slot] = nil, l.next+1
	l.next++
	l.live++
	if l.sweep.IsZero() {
		l.sweep, _ = e.timers.At(expNs, e.hSweep, sh.idx) // only a closing scheduler refuses: lookups still expire it
	}
	return true
}

// task returns the Task that en, of chunk c, keeps, with strings and a payload of its
// own.
func (l *retained) task(c *retChunk, en *retEntry) Task {
	off := en.off
	ns := string(c.str(off, int(en.nsLen)))
	off += uint32(en.nsLen)
	id := string(c.str(off, int(en.idLen)))
	off += uint32(en.idLen)
	typ := string(c.str(off, int(en.typeLen)))
	off += uint32(en.typeLen)
	var payload []byte
	if en.flags&retPayloadNil == 0 {
		payload = append([]byte{}, c.str(off, int(en.payLen))...)
	}
	return Task{Namespace: ns, ID: id, Type: typ, Payload: payload, Version: en.version, Timeout: en.timeout, Retry: l.policies[en.retry],
		Misfire: en.misfire, Exclusive: en.flags&retExclusive != 0,
		Schedule: Schedule{Kind: en.kind, Anchor: en.anchor, At: atOf(en.atSec, en.atNsec, en.flags&retAtLocal != 0),
			Delay: en.delay, Interval: en.interval}}
}

// take marks sh's live entry en gone, no longer counted as live nor holding its slot.
// The caller frees the slot and gives back its place under MaxTasks and its payload
// bytes (forget), or hands them on to a record (revive). Requires sh.mu.
func (sh *shard) take(en *retEntry) {
	sh.held[en.slot] = 0
	en.flags |= retGone
	sh.ret.live--
}

// forget takes the live entry en out of sh's log for good. Requires sh.mu.
func (e *Engine) forget(sh *shard, en *retEntry) {
	sh.take(en)
	sh.index.remove(en.hash, en.slot)
	sh.free = append(sh.free, en.slot)
	sh.tasks--
	if en.payLen > 0 {
		e.payloads.Add(-int64(en.payLen))
	}
}

// revive makes sh's live entry en, of chunk c, the retained record it would have been
// (same task, state, counters and deadline), in the slot the entry held, and returns
// it; nil if its deadline has passed (then it forgets it). Requires sh.mu. Cost: a
// record, its strings and payload, and a timer.
func (e *Engine) revive(sh *shard, c *retChunk, en *retEntry) *record {
	nowNs := e.clock.Now()
	if en.expNs <= nowNs {
		e.forget(sh, en)
		return nil
	}
	t := sh.ret.task(c, en)
	rec := e.newRecord(&t, en.hash)
	rec.state, rec.attempts, rec.runs, rec.slot = en.state, int(en.attempts), en.runs, en.slot
	sh.take(en)
	sh.slots[rec.slot] = rec // the index names the slot already
	var err error
	if rec.timer, err = e.timers.At(en.expNs, e.hDrop, timerArg(sh, rec)); err != nil {
		e.remove(sh, rec) // only a closing scheduler refuses: nothing left to query anyway
		return nil
	}
	return rec
}

// onSweep runs in the timer pool at the deadline of the oldest entry of a shard's log:
// it pops the entries from head on that are gone or past their deadline, and arms
// itself for the next one, if any.
func (e *Engine) onSweep(ev timer.Event) {
	sh := &e.shards[ev.Arg&(numShards-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	l := &sh.ret
	if l.sweep != ev.Timer {
		return
	}
	l.sweep = timer.Timer{}
	for l.head < l.next {
		_, en := l.entry(l.head)
		if en.flags&retGone == 0 {
			if en.expNs > ev.Now {
				l.sweep, _ = e.timers.At(en.expNs, e.hSweep, sh.idx)
				return
			}
			e.forget(sh, en)
		}
		l.pop()
	}
}

// pop moves head past its entry, which is gone, dropping its chunk once every entry of
// it has been popped (kept as the spare one, if there is none).
func (l *retained) pop() {
	l.head++
	if l.head-l.first == retChunkLen {
		if c := l.chunks[0]; l.spare == nil {
			if c.data = c.data[:0]; cap(c.data) > maxSpareData {
				c.data = nil // a burst of large payloads is not kept for good
			}
			l.spare = c
		}
		l.chunks[0] = nil
		l.chunks = l.chunks[1:]
		l.first += retChunkLen
	}
}

// appendKeys appends the keys of sh's live entries whose state is s (0: any). Requires
// sh.mu. Cost: O(entries held).
func (l *retained) appendKeys(keys []key, s State, cursor string, after key) []key {
	for seq := l.head; seq < l.next; seq++ {
		c, en := l.entry(seq)
		if en.flags&retGone != 0 || s != 0 && en.state != s {
			continue
		}
		k := key{string(c.str(en.off, int(en.nsLen))), string(c.str(en.off+uint32(en.nsLen), int(en.idLen)))}
		if cursor == "" || keyLess(after, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// verify checks the log's invariants against its shard's records; it returns the live
// entries' payload bytes. Requires sh.mu.
func (l *retained) verify(sh *shard) (int64, error) {
	if l.head > l.next || l.first > l.head || l.first%retChunkLen != 0 || (l.next-l.first+retChunkLen-1)/retChunkLen > uint64(len(l.chunks)) {
		return 0, fmt.Errorf("retained: first %d, head %d, next %d in %d chunks", l.first, l.head, l.next, len(l.chunks))
	}
	vals, err := sh.index.verifyTable()
	if err != nil {
		return 0, err
	}
	holding := 0 // slots held by entries
	for _, seq1 := range sh.held {
		if seq1 != 0 {
			holding++
		}
	}
	live, payloads := 0, int64(0)
	for seq := l.head; seq < l.next; seq++ {
		c, en := l.entry(seq)
		if en.flags&retGone != 0 {
			continue
		}
		live++
		payloads += int64(en.payLen)
		if int(en.retry) >= len(l.policies) {
			return 0, fmt.Errorf("retained: entry %d names retry policy %d of %d", seq, en.retry, len(l.policies))
		}
		if int(en.slot) >= len(sh.slots) || sh.held[en.slot] != seq+1 || sh.slots[en.slot] != nil {
			return 0, fmt.Errorf("retained: entry %d holds slot %d, which is not its", seq, en.slot)
		}
		t := l.task(c, en)
		if h, indexed := vals[uint64(en.slot)+1]; !indexed || h != en.hash || keyHash(t.Namespace, t.ID) != en.hash {
			return 0, fmt.Errorf("retained: entry %d (%s/%s) indexed %v under %x, hash %x", seq, t.Namespace, t.ID, indexed, h, en.hash)
		}
		if sh.index.find(sh.slots, en.hash, t.Namespace, t.ID) != nil {
			return 0, fmt.Errorf("retained: %s/%s is both retained and a record", t.Namespace, t.ID)
		}
	}
	if live != l.live || live != holding {
		return 0, fmt.Errorf("retained: %d live entries, live says %d, %d slots held", live, l.live, holding)
	}
	if live > 0 && l.sweep.IsZero() {
		return 0, fmt.Errorf("retained: %d live entries and no sweep armed", live)
	}
	return payloads, nil
}
