package history

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// Options are the timing bounds of the checks that have one. Safety checks (no run
// after an ACK or a cancel, no overlap, unique run IDs, fencing, leftovers) have none.
type Options struct {
	// Lateness is how late a run may arrive and still count as on time: after its due
	// time, or after its leader began dispatching. It is slack for a loaded machine
	// (processes stall for hundreds of ms), not a product goal.
	Lateness time.Duration
	// MisfireThreshold is the engine's (core/task Options.MisfireThreshold in tockd):
	// an occurrence considered later than this is merged or skipped by its policy.
	MisfireThreshold time.Duration
	// Recovery is how long after a fault's End the cluster may still be catching up
	// (loading tasks, redelivering), during which occurrences may be merged or skipped.
	Recovery time.Duration
}

// Defaults of Options (a zero field takes its default).
const (
	DefaultLateness         = 2 * time.Second
	DefaultMisfireThreshold = time.Second // core/task's default, which tockd keeps
	DefaultRecovery         = 5 * time.Second
)

func (o Options) withDefaults() Options {
	if o.Lateness == 0 {
		o.Lateness = DefaultLateness
	}
	if o.MisfireThreshold == 0 {
		o.MisfireThreshold = DefaultMisfireThreshold
	}
	if o.Recovery == 0 {
		o.Recovery = DefaultRecovery
	}
	return o
}

// Check runs every check of the package doc over h and returns the violations, grouped
// by check, each with an excerpt of the history.
func Check(h *History, o Options) []Violation {
	c := newChecker(h, o.withDefaults())
	c.durableRuns()
	c.noRunAfterAck()
	c.noRunAfterCancel()
	c.cancelFindsLive()
	c.exclusiveOverlap()
	c.runIDUnique()
	c.neverEarly()
	c.recurring()
	c.deposedFire()
	c.staleFire()
	c.deposedLock()
	c.leftovers()
	return c.out
}

type version struct {
	id string
	v  uint64
}

type checker struct {
	h      *History
	o      Options
	ops    map[string][]*Op     // by task ID, in recorded order
	runs   map[string][]*Run    // by task ID, in recorded order
	spec   map[version]Spec     // from any submit of the version
	ids    []string             // every task ID, sorted (the checks' order)
	first  map[uint64]time.Time // each epoch's first run received
	lastOK map[uint64]time.Time // each epoch's last run received whose ACK was confirmed, before a fault hit it
	epochs []uint64             // every epoch with a run, in order
	t0     time.Time            // the first event: excerpts' and details' times count from it
	end    time.Time            // the last event
	out    []Violation
}

func newChecker(h *History, o Options) *checker {
	c := &checker{h: h, o: o, ops: map[string][]*Op{}, runs: map[string][]*Run{}, spec: map[version]Spec{},
		first: map[uint64]time.Time{}, lastOK: map[uint64]time.Time{}, t0: h.origin()}
	late := func(t time.Time) {
		if t.After(c.end) {
			c.end = t
		}
	}
	for i := range h.Ops {
		op := &h.Ops[i]
		c.ops[op.Task] = append(c.ops[op.Task], op)
		if op.Kind == Submit {
			c.spec[version{op.Task, op.Version}] = op.Spec
		}
		late(op.End)
	}
	for i := range h.Runs {
		r := &h.Runs[i]
		c.runs[r.Task] = append(c.runs[r.Task], r)
		if at, ok := c.first[r.Epoch]; !ok || r.Received.Before(at) {
			if !ok {
				c.epochs = append(c.epochs, r.Epoch)
			}
			c.first[r.Epoch] = r.Received
		}
		if r.AckOK && r.Received.After(c.lastOK[r.Epoch]) {
			c.lastOK[r.Epoch] = r.Received
		}
		late(r.Received)
		late(r.Returned)
	}
	for id := range c.ops {
		c.ids = append(c.ids, id)
	}
	for id := range c.runs {
		if _, ok := c.ops[id]; !ok {
			c.ids = append(c.ids, id)
		}
	}
	slices.Sort(c.ids)
	slices.Sort(c.epochs)
	// A faulted leader is not seen dispatching from the fault on, whatever it did after.
	for _, f := range h.Faults {
		if last, ok := c.lastOK[f.Epoch]; ok && f.Epoch != 0 && last.After(f.Start) {
			c.lastOK[f.Epoch] = f.Start
		}
	}
	return c
}

// fail records a violation; its excerpt shows what happened near the times at (the
// run judged, and the event it is judged against).
func (c *checker) fail(check, id string, at []time.Time, format string, args ...any) {
	var around []time.Time
	for _, t := range at {
		if !t.IsZero() {
			around = append(around, t)
		}
	}
	if len(around) == 0 {
		around = []time.Time{c.end}
	}
	c.out = append(c.out, Violation{Check: check, Task: id, Detail: fmt.Sprintf(format, args...), Excerpt: c.h.Excerpt(id, around...)})
}

func times(ts ...time.Time) []time.Time { return ts }

func (c *checker) rel(t time.Time) string { return rel(c.t0, t) }

// confirmed returns the earliest OK durable submit of id at version v, or nil.
func (c *checker) confirmed(id string, v uint64) *Op {
	var best *Op
	for _, op := range c.ops[id] {
		if op.Kind == Submit && op.Version == v && op.Outcome == OK && op.Durable && (best == nil || op.End.Before(best.End)) {
			best = op
		}
	}
	return best
}

// versions returns the versions of id submitted, in increasing order.
func (c *checker) versions(id string) []uint64 {
	var vs []uint64
	for _, op := range c.ops[id] {
		if op.Kind == Submit && !slices.Contains(vs, op.Version) {
			vs = append(vs, op.Version)
		}
	}
	slices.Sort(vs)
	return vs
}

// mayReplace returns the earliest start of a submit of id above version v that was not
// refused (from then on v may be gone), and the earliest end of one that was confirmed
// (from then on v is gone); zero times when there is none.
func (c *checker) mayReplace(id string, v uint64) (maybe, surely time.Time) {
	for _, op := range c.ops[id] {
		if op.Kind != Submit || op.Version <= v || op.Outcome == Refused {
			continue
		}
		maybe = earliest(maybe, op.Start)
		if op.Outcome == OK {
			surely = earliest(surely, op.End)
		}
	}
	return maybe, surely
}

// cancelled returns the earliest start of a cancel of id that was not refused (from
// then on the task may be gone), and the earliest end of one that was confirmed.
func (c *checker) cancelled(id string) (maybe, surely time.Time) {
	for _, op := range c.ops[id] {
		if op.Kind != Cancel || op.Outcome == Refused {
			continue
		}
		maybe = earliest(maybe, op.Start)
		if op.Outcome == OK {
			surely = earliest(surely, op.End)
		}
	}
	return maybe, surely
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// faultNear reports whether a fault's window, widened by the checker's bounds, holds any
// time in [from, to].
func (c *checker) faultNear(from, to time.Time) bool {
	for _, f := range c.h.Faults {
		if !f.Start.Add(-c.o.Lateness).After(to) && !f.End.Add(c.o.Recovery).Before(from) {
			return true
		}
	}
	return false
}

// durableRuns: every confirmed version, neither superseded nor cancelled, runs.
func (c *checker) durableRuns() {
	for _, id := range c.ids {
		for _, v := range c.versions(id) {
			sub := c.confirmed(id, v)
			if sub == nil {
				continue
			}
			if maybe, _ := c.mayReplace(id, v); !maybe.IsZero() {
				continue
			}
			maybeCancel, _ := c.cancelled(id)
			if !maybeCancel.IsZero() {
				if !c.spec[version{id, v}].Recurring() {
					continue
				}
				// A recurring task cancelled before its first run was due (or while a fault
				// delayed it) need not have run.
				if maybeCancel.Before(sub.NextRun.Add(c.o.Lateness)) || c.faultNear(sub.NextRun, maybeCancel) {
					continue
				}
			}
			ran := false
			for _, r := range c.runs[id] {
				ran = ran || r.Version == v
			}
			if !ran {
				c.fail("durable-runs", id, times(sub.End), "version %d confirmed at %s (next run %s) never ran", v, c.rel(sub.End), c.rel(sub.NextRun))
			}
		}
	}
}

// noRunAfterAck: no run of a one-shot version after one of its ACKs was confirmed.
func (c *checker) noRunAfterAck() {
	for _, id := range c.ids {
		acked := map[uint64]*Run{}
		for _, r := range c.runs[id] {
			if r.AckOK && !r.Failed && !c.spec[version{id, r.Version}].Recurring() {
				if a := acked[r.Version]; a == nil || r.AckAt.Before(a.AckAt) {
					acked[r.Version] = r
				}
			}
		}
		for _, r := range c.runs[id] {
			if a := acked[r.Version]; a != nil && r.Received.After(a.AckAt) {
				c.fail("no-run-after-ack", id, times(r.Received, a.Received), "run %d (epoch %d) received at %s, after run %d's ACK (epoch %d) was confirmed at %s",
					r.RunID, r.Epoch, c.rel(r.Received), a.RunID, a.Epoch, c.rel(a.AckAt))
			}
		}
	}
}

// noRunAfterCancel: no run after a confirmed cancel, nor of a version after a confirmed
// submit of a higher one.
func (c *checker) noRunAfterCancel() {
	for _, id := range c.ids {
		_, cancelled := c.cancelled(id)
		for _, r := range c.runs[id] {
			if c.sentAfter(r, cancelled) {
				c.fail("no-run-after-cancel", id, times(r.Received, cancelled), "run %d (v%d, epoch %d, due %s) received at %s, after a cancel was confirmed at %s",
					r.RunID, r.Version, r.Epoch, c.rel(r.Due), c.rel(r.Received), c.rel(cancelled))
				continue
			}
			if _, replaced := c.mayReplace(id, r.Version); c.sentAfter(r, replaced) {
				c.fail("no-run-after-cancel", id, times(r.Received, replaced), "run %d of v%d (epoch %d, due %s) received at %s, after a higher version was confirmed at %s",
					r.RunID, r.Version, r.Epoch, c.rel(r.Due), c.rel(r.Received), c.rel(replaced))
			}
		}
	}
}

// sentAfter reports whether r's FIRE was surely sent after t (zero t: never): it came
// due after t (a FIRE is never sent early), or arrived more than Lateness after t. A run
// due before t and received just after it may have been sent before the cancel took
// effect: the client's answer and the worker's FIRE race on two connections.
func (c *checker) sentAfter(r *Run, t time.Time) bool {
	return !t.IsZero() && (r.Due.After(t) || r.Received.After(t.Add(c.o.Lateness)))
}

// cancelFindsLive: a CANCEL answered NOT_FOUND names a task that had ended.
func (c *checker) cancelFindsLive() {
	for _, id := range c.ids {
		for _, op := range c.ops[id] {
			if op.Kind != Cancel || op.Outcome != Refused || op.Code != "NOT_FOUND" {
				continue
			}
			var v uint64 // the highest version confirmed before the cancel began
			found := false
			for _, sub := range c.ops[id] {
				if sub.Kind == Submit && sub.Outcome == OK && sub.Durable && sub.End.Before(op.Start) && sub.Version >= v {
					v, found = sub.Version, true
				}
			}
			if !found {
				continue
			}
			earlier := false // a cancel before this one may have removed it
			for _, o2 := range c.ops[id] {
				earlier = earlier || (o2.Kind == Cancel && o2 != op && o2.Outcome != Refused && o2.Start.Before(op.Start))
			}
			if earlier {
				continue
			}
			if c.spec[version{id, v}].Recurring() {
				c.fail("cancel-finds-live", id, times(op.Start), "cancel [%s, %s] answered NOT_FOUND for recurring v%d, confirmed before it and never cancelled",
					c.rel(op.Start), c.rel(op.End), v)
				continue
			}
			ran := false
			for _, r := range c.runs[id] {
				ran = ran || (r.Version >= v && r.Received.Before(op.End))
			}
			if !ran {
				c.fail("cancel-finds-live", id, times(op.Start), "cancel [%s, %s] answered NOT_FOUND for one-shot v%d, which had not run by then",
					c.rel(op.Start), c.rel(op.End), v)
			}
		}
	}
}

// exclusiveOverlap: the runs of an exclusive task never overlap.
func (c *checker) exclusiveOverlap() {
	never := time.Unix(0, math.MaxInt64)
	for _, id := range c.ids {
		var rs []*Run
		for _, r := range c.runs[id] {
			if c.spec[version{id, r.Version}].Exclusive {
				rs = append(rs, r)
			}
		}
		slices.SortStableFunc(rs, func(a, b *Run) int { return a.Received.Compare(b.Received) })
		var open *Run // the run ending last among those started so far
		var openEnd time.Time
		for _, r := range rs {
			end := r.Returned
			if end.IsZero() {
				end = never // never returned: still running when the log ended
			}
			if open != nil && r.Received.Before(openEnd) {
				c.fail("exclusive-overlap", id, times(r.Received, open.Received), "run %d (epoch %d) [%s, %s] overlaps run %d (epoch %d) [%s, %s]",
					r.RunID, r.Epoch, c.rel(r.Received), c.rel(r.Returned), open.RunID, open.Epoch, c.rel(open.Received), c.rel(open.Returned))
			}
			if open == nil || end.After(openEnd) {
				open, openEnd = r, end
			}
		}
	}
}

// runIDUnique: one run ID, one run.
func (c *checker) runIDUnique() {
	seen := map[uint64]*Run{}
	reported := map[[2]*Run]bool{}
	for i := range c.h.Runs {
		r := &c.h.Runs[i]
		f := seen[r.RunID]
		if f == nil {
			seen[r.RunID] = r
			continue
		}
		if f.Task == r.Task && f.Version == r.Version && f.Attempt == r.Attempt && f.Due.Equal(r.Due) && f.Epoch == r.Epoch {
			continue // the same FIRE delivered again
		}
		if reported[[2]*Run{f, r}] {
			continue
		}
		reported[[2]*Run{f, r}] = true
		c.fail("run-id-unique", r.Task, times(r.Received, f.Received), "run ID %d names %s v%d attempt %d due %s (epoch %d) and, earlier, %s v%d attempt %d due %s (epoch %d)",
			r.RunID, r.Task, r.Version, r.Attempt, c.rel(r.Due), r.Epoch, f.Task, f.Version, f.Attempt, c.rel(f.Due), f.Epoch)
	}
}

// neverEarly: no run arrives before it is due.
func (c *checker) neverEarly() {
	for _, id := range c.ids {
		for _, r := range c.runs[id] {
			if r.Received.Before(r.Due) {
				c.fail("never-early", id, times(r.Received), "run %d received at %s, %v before its due time %s",
					r.RunID, c.rel(r.Received), r.Due.Sub(r.Received), c.rel(r.Due))
			}
		}
	}
}

// deposedFire: no run at an epoch below one whose ACK was already confirmed.
func (c *checker) deposedFire() {
	confirmed := map[uint64]*Run{} // each epoch's earliest confirmed ACK
	for i := range c.h.Runs {
		r := &c.h.Runs[i]
		if r.AckOK {
			if a := confirmed[r.Epoch]; a == nil || r.AckAt.Before(a.AckAt) {
				confirmed[r.Epoch] = r
			}
		}
	}
	epochs := make([]uint64, 0, len(confirmed))
	for e := range confirmed {
		epochs = append(epochs, e)
	}
	slices.Sort(epochs)
	// above[i]: the earliest confirmed ACK at an epoch >= epochs[i].
	above := make([]*Run, len(epochs))
	for i := len(epochs) - 1; i >= 0; i-- {
		above[i] = confirmed[epochs[i]]
		if i+1 < len(epochs) && above[i+1].AckAt.Before(above[i].AckAt) {
			above[i] = above[i+1]
		}
	}
	for _, id := range c.ids {
		for _, r := range c.runs[id] {
			i, _ := slices.BinarySearch(epochs, r.Epoch+1)
			if i < len(epochs) && r.Received.After(above[i].AckAt) {
				a := above[i]
				c.fail("deposed-fire", id, times(r.Received, a.AckAt), "run %d at epoch %d received at %s, after run %d of %s at epoch %d had its ACK confirmed at %s",
					r.RunID, r.Epoch, c.rel(r.Received), a.RunID, a.Task, a.Epoch, c.rel(a.AckAt))
			}
		}
	}
}

// staleFire: a faulted leader dispatches nothing once the nemesis has seen its successor
// lead; after a stall, nothing that came due while it was stopped.
func (c *checker) staleFire() {
	for _, f := range c.h.Faults {
		if f.Epoch == 0 || f.NewEpoch == 0 {
			continue
		}
		for _, id := range c.ids {
			for _, r := range c.runs[id] {
				if r.Epoch != f.Epoch || !r.Received.After(f.LeaderSeen) || (f.Kind == Stall && !r.Due.After(f.Start)) {
					continue
				}
				c.fail("stale-fire", id, times(r.Received, f.Start), "run %d at epoch %d (due %s) received at %s, after the nemesis saw epoch %d lead at %s (%s of %s from %s)",
					r.RunID, r.Epoch, c.rel(r.Due), c.rel(r.Received), f.NewEpoch, c.rel(f.LeaderSeen), f.Kind, f.Target, c.rel(f.Start))
			}
		}
	}
}

// LockWrites counts the run-lock writes in h's etcd history that deposedLock could
// attribute to runs, and describes those it could not (key, revision, the epoch leading
// then): a lock for a run no worker received is written by a leader that died before
// its FIRE arrived, or by a deposed one; the history cannot tell which, so a reader
// judges them, not Check.
func LockWrites(h *History) (attributed int, unattributed []string) {
	_, attributed, unattributed = lockViolations(h)
	return attributed, unattributed
}

type lockViolation struct {
	task, detail string
	at           time.Time // when a run it names was received
}

// lockViolations replays h.Events: the leader at each revision is the live election key
// with the lowest create revision, and each put of a run lock must come from that
// leader's epoch when it matches runs of the task.
func lockViolations(h *History) (out []lockViolation, attributed int, unattributed []string) {
	leaderPrefix, lockPrefix := h.Prefix+"leader/", h.Prefix+"locks/"
	byRun := map[version][]*Run{} // (task, run ID) -> runs not yet matched to a lock write
	idEpochs := map[uint64]map[uint64]bool{}
	for i := range h.Runs {
		r := &h.Runs[i]
		byRun[version{r.Task, r.RunID}] = append(byRun[version{r.Task, r.RunID}], r)
		if idEpochs[r.RunID] == nil {
			idEpochs[r.RunID] = map[uint64]bool{}
		}
		idEpochs[r.RunID][r.Epoch] = true
	}
	// Run IDs repeat across leaders (issue 11), so a write is matched only to a run that
	// can be its own: one fired at an epoch no later than the write's revision (an
	// epoch is its election key's create revision), not matched to an earlier write;
	// the leader's then if it is one of them, else the latest. A run ID that FIREs at
	// several epochs carry cannot name the writer (the leader may have written a lock
	// for its own run of that ID that no worker received): such writes are listed, not
	// judged, until run IDs are unique (run-id-unique).
	evs := slices.Clone(h.Events)
	// Within one revision (one transaction), election keys first.
	slices.SortStableFunc(evs, func(a, b KeyEvent) int {
		if d := cmp.Compare(a.Rev, b.Rev); d != 0 {
			return d
		}
		return cmp.Compare(b2i(!strings.HasPrefix(a.Key, leaderPrefix)), b2i(!strings.HasPrefix(b.Key, leaderPrefix)))
	})
	live := map[string]int64{} // election key -> create revision
	for _, ev := range evs {
		switch {
		case strings.HasPrefix(ev.Key, leaderPrefix):
			if ev.Delete {
				delete(live, ev.Key)
			} else {
				live[ev.Key] = ev.CreateRev
			}
		case strings.HasPrefix(ev.Key, lockPrefix) && !ev.Delete && len(ev.Value) == 8:
			ns, id, _ := strings.Cut(strings.TrimPrefix(ev.Key, lockPrefix), "/")
			if ns != task.DefaultNamespace {
				continue
			}
			runID := binary.BigEndian.Uint64(ev.Value)
			var leader int64
			for _, rev := range live {
				if leader == 0 || rev < leader {
					leader = rev
				}
			}
			k := version{id, runID}
			var match *Run
			var epochs []uint64 // of every run the write could be
			for _, r := range byRun[k] {
				if int64(r.Epoch) <= ev.Rev {
					epochs = append(epochs, r.Epoch)
					if match == nil || int64(r.Epoch) == leader || (int64(match.Epoch) != leader && r.Epoch > match.Epoch) {
						match = r
					}
				}
			}
			if match == nil {
				unattributed = append(unattributed, fmt.Sprintf("%s run %d at revision %d (epoch %d leading)", ev.Key, runID, ev.Rev, leader))
				continue
			}
			if len(idEpochs[runID]) > 1 && !slices.Contains(epochs, uint64(leader)) {
				unattributed = append(unattributed, fmt.Sprintf("%s run %d at revision %d (epoch %d leading; the run ID was fired at epochs %v)",
					ev.Key, runID, ev.Rev, leader, slices.Sorted(maps.Keys(idEpochs[runID]))))
				continue
			}
			attributed++
			slices.Sort(epochs)
			// Every run of this fire's epoch is this write's (one write per run).
			byRun[k] = slices.DeleteFunc(byRun[k], func(r *Run) bool { return r.Epoch == match.Epoch })
			if !slices.Contains(epochs, uint64(leader)) {
				out = append(out, lockViolation{id, fmt.Sprintf("lock for run %d written at revision %d, when epoch %d led; the run was fired at epoch(s) %v",
					runID, ev.Rev, leader, epochs), match.Received})
			}
		}
	}
	return out, attributed, unattributed
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// deposedLock: every attributable run-lock write came from the epoch leading then.
func (c *checker) deposedLock() {
	vs, _, _ := lockViolations(c.h)
	for _, v := range vs {
		c.fail("deposed-lock", v.task, times(v.at), "%s", v.detail)
	}
}

// leftovers: nothing of tock's task state is left in etcd.
func (c *checker) leftovers() {
	for _, k := range c.h.Leftover {
		// <prefix><kind>/<namespace>/<id>: the excerpt is the task's.
		id := k
		if parts := strings.SplitN(strings.TrimPrefix(k, c.h.Prefix), "/", 3); len(parts) == 3 {
			id = parts[2]
		}
		c.fail("etcd-leftovers", id, times(c.end), "key %s left in etcd after the load drained", k)
	}
}
