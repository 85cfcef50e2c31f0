package task

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Dependencies (a DAG of tasks). A task that names parents (Task.DependsOn) waits,
// WAITING, with no timer armed, until every parent has ended; then it is released:
// PENDING, due per its own schedule (After counts from the release). A parent that
// ends SUCCEEDED counts as done; one that ends DEAD or CANCELLED applies the child's
// ParentPolicy: ParentCancel (the default) cancels the child, whose own children follow
// by theirs, and ParentRunAnyway counts it as done.
//
// Each task in a workflow has a dagNode, in its record's rareState (so a task without
// edges carries nothing for it): a child counts its parents not yet ended (waiting);
// a parent lists its children. When a parent ends (finishAttempt, Cancel, or a cascade
// of cancels), its children are told once, after its shard's lock is released
// (parentEnded): O(children). So a workflow costs O(tasks + edges) from submit to end,
// whatever its shape.
//
// Invariants (under Engine.dagMu, while no parent's end is in flight between its
// shard's lock and dagMu, and no release between dagMu and the child's shard lock):
//
//	a WAITING record r:  r.rare.dag = n, ¬n.ended, n.waiting ≥ 1,
//	                     n.waiting = |{live nodes p : n ∈ p.children}| + n.orphaned
//	a node n with ¬n.ended is held by a record (a node is never shared)
//
// where a live node is one not ended whose record is in the table (a node leaves the
// table with its record only once ended: retention drops a record after its end, Drop
// ends its node, and a member cannot be replaced before it ends). Engine.verify checks
// the first, and that no two records share a node (verifyDAG).
//
// Lock order: Engine.dagMu, then shard.mu (one at a time, or for a SubmitBatch every
// shard it touches, in index order: no other path holds two shard locks), then the
// limits' locks. Nothing takes dagMu while it holds a shard lock.

// Deps names the tasks a task depends on, and what their failure does to it.
type Deps struct {
	// On lists the parents' IDs, in the task's namespace: 1 to MaxParents of them, none
	// twice, not the task itself. Each must exist when the task is submitted (in the
	// engine, in any state, or in the same SubmitBatch) and be one-shot. A parent that
	// has already ended counts as it ended.
	On []string
	// OnParentFailure says what a parent that ends DEAD or CANCELLED does to the task.
	OnParentFailure ParentPolicy
}

// ParentPolicy says what a parent's failure (DEAD, or CANCELLED) does to a child.
type ParentPolicy uint8

const (
	// ParentCancel (the default) cancels the child: CANCELLED, never run; its own
	// children follow by their policies.
	ParentCancel ParentPolicy = iota
	// ParentRunAnyway counts the failed parent as done: the child runs once every
	// parent has ended, however.
	ParentRunAnyway
)

// MaxParents bounds Deps.On: a fan-in of 65,536 parents.
const MaxParents = 1 << 16

// validateDeps checks t.DependsOn's fields, naming the bad one. t is normalized but
// for its retry policy.
func (t *Task) validateDeps() error {
	d := t.DependsOn
	switch {
	case len(d.On) == 0 || len(d.On) > MaxParents:
		return fmt.Errorf("%w: DependsOn.On names %d parents, want 1 to %d", ErrInvalidTask, len(d.On), MaxParents)
	case d.OnParentFailure > ParentRunAnyway:
		return fmt.Errorf("%w: DependsOn.OnParentFailure %s is not a policy (want %s)", ErrInvalidTask, d.OnParentFailure,
			strings.Join(parentNames.valid(), ", "))
	case t.Schedule.Recurring():
		return fmt.Errorf("%w: DependsOn: a recurring task cannot have parents (only one-shot tasks take part in a workflow)", ErrInvalidTask)
	}
	var seen map[string]struct{} // for a long list; a short one is scanned
	if len(d.On) > 16 {
		seen = make(map[string]struct{}, len(d.On))
	}
	for i, p := range d.On {
		dup := false
		if seen != nil {
			_, dup = seen[p]
			seen[p] = struct{}{}
		} else {
			dup = slices.Contains(d.On[:i], p)
		}
		switch {
		case p == "" || len(p) > MaxIDLen || !utf8.ValidString(p):
			return fmt.Errorf("%w: DependsOn.On[%d] must be an ID: valid UTF-8 of 1 to %d bytes", ErrInvalidTask, i, MaxIDLen)
		case p == t.ID:
			return fmt.Errorf("%w: DependsOn.On[%d]: dependency cycle: %s -> %s", ErrInvalidTask, i, p, p)
		case dup:
			return fmt.Errorf("%w: DependsOn.On[%d]: parent %q named twice", ErrInvalidTask, i, p)
		}
	}
	return nil
}

// dagNode is one task's place in a workflow. Guarded by Engine.dagMu, except ns, id
// and hash, read-only, which find its record.
type dagNode struct {
	ns, id string
	hash   uint64 // keyHash(ns, id)
	policy ParentPolicy
	// ended: the task ended (or was dropped) and its children have been told; its
	// children list is spent. doomed: a parent had ended badly when the task was
	// submitted, and its policy cancels it (SubmitBatch does, once it is in the table).
	ended, doomed bool
	// waiting counts the parents not yet ended, as the policy counts them; orphaned
	// those of them that were dropped (Drop), which never will.
	waiting, orphaned int
	children          []*dagNode
}

// attachNode gives rec a workflow node and returns it; a record without a rareState
// gets both in one allocation. Requires sh.mu (or rec in no table yet).
func (rec *record) attachNode() *dagNode {
	var n *dagNode
	if rec.rare != nil {
		n = &dagNode{}
	} else {
		both := &struct {
			r rareState
			n dagNode
		}{}
		rec.rare, n = &both.r, &both.n
	}
	t := &rec.task
	*n = dagNode{ns: t.Namespace, id: t.ID, hash: rec.hash}
	if t.DependsOn != nil {
		n.policy = t.DependsOn.OnParentFailure
	}
	rec.rare.dag = n
	return n
}

// node returns rec's workflow node, nil when it has none. Requires sh.mu.
func (rec *record) node() *dagNode {
	if rec.rare == nil {
		return nil
	}
	return rec.rare.dag
}

// inWorkflow reports whether rec takes part in a workflow that it has not yet left: it
// has a node and has not ended. Such a record can be cancelled, not replaced. Requires
// sh.mu.
func (rec *record) inWorkflow() bool { return rec.node() != nil && !rec.state.Terminal() }

// end notes, on a record that has just ended in a terminal state, that its children
// are to be told once the lock is released (emitAll). Requires sh.mu.
func (es *events) end(rec *record) {
	if n := rec.node(); n != nil {
		es.ended, es.outcome = n, rec.state
	}
}

// parentEnded tells n's children that n's task ended in state outcome (SUCCEEDED, DEAD
// or CANCELLED), and, for each child that this cancels, that child's children in turn;
// it emits the cancels' events. A node already ended is told nothing more. Requires no
// lock. Cost: O(edges out of the tasks it ends), one shard lock per child moved.
func (e *Engine) parentEnded(n *dagNode, outcome State) {
	e.dagMu.Lock()
	var t told
	e.endLocked([]nodeEnd{{n, outcome}}, &t)
	e.dagMu.Unlock()
	e.releaseAll(&t)
}

// told is what telling children of their parents' ends leads to: the cancels' events,
// and the children released, whose records are moved once dagMu is released (so that a
// parent of a wide fan-out does not hold it through all of them: the other ends wait
// for it).
type told struct {
	events   []Event
	released []*dagNode
}

// releaseAll releases t's nodes, then emits t's events. Requires no lock.
func (e *Engine) releaseAll(t *told) {
	for _, n := range t.released {
		e.release(n)
	}
	for i := range t.events {
		e.emit(t.events[i])
	}
}

// nodeEnd is a node whose task ended, and how.
type nodeEnd struct {
	n       *dagNode
	outcome State
}

// endLocked tells the children of each node in work of its end: those left with no
// parent to wait for are added to t.released, and those that a failed parent cancels
// are cancelled, their events added to t.events, and their ends told in turn.
// Requires e.dagMu, and no shard lock.
func (e *Engine) endLocked(work []nodeEnd, t *told) {
	for len(work) > 0 {
		w := work[len(work)-1]
		work = work[:len(work)-1]
		if w.n.ended {
			continue
		}
		w.n.ended = true
		kids := w.n.children
		w.n.children = nil
		for _, c := range kids {
			if c.ended {
				continue // cancelled or dropped meanwhile
			}
			if w.outcome == Succeeded || c.policy == ParentRunAnyway {
				if c.waiting--; c.waiting == 0 {
					t.released = append(t.released, c)
				}
				continue
			}
			why := fmt.Sprintf("parent %q ended %s", w.n.id, w.outcome)
			if ev, ok := e.cancelWaiting(c, why); ok {
				t.events = append(t.events, ev)
				work = append(work, nodeEnd{c, Cancelled})
			}
		}
	}
}

// nodeRecord returns n's record with its shard's lock held; rec is nil when the table
// no longer holds it (dropped, or replaced after it ended). Requires no shard lock.
func (e *Engine) nodeRecord(n *dagNode) (*shard, *record) {
	sh := e.shardOf(n.hash)
	sh.mu.Lock()
	rec := sh.index.find(sh.slots, n.hash, n.ns, n.id)
	if rec == nil || rec.node() != n {
		return sh, nil
	}
	return sh, rec
}

// release makes n's WAITING task PENDING, due per its schedule from now (After counts
// from its release), as Submit does for a task without parents. Its parents have all
// ended (under dagMu, which release no longer needs): a cancel that came meanwhile has
// the last word. Requires no lock.
func (e *Engine) release(n *dagNode) {
	sh, rec := e.nodeRecord(n)
	defer sh.mu.Unlock()
	if rec == nil || rec.state != Waiting {
		return // cancelled meanwhile: its own end is on its way
	}
	nowNs, wall := e.now()
	first, err := rec.task.Schedule.First(wall)
	if err != nil {
		first = wall // an At past MaxHorizon at submit would have been refused; it is only nearer now
	}
	if setState(rec, Pending) != nil {
		return
	}
	rec.due = first
	_ = e.start(sh, rec, time.Time{}, nowNs, wall) // only a closing engine refuses, which drops it anyway
}

// cancelWaiting cancels n's WAITING task because a parent failed (why says which, as its
// last error), and returns the event to emit; ok is false if the task is not WAITING
// (the user cancelled it: its own end is on its way). Requires e.dagMu.
func (e *Engine) cancelWaiting(n *dagNode, why string) (ev Event, ok bool) {
	sh, rec := e.nodeRecord(n)
	defer sh.mu.Unlock()
	if rec == nil || rec.state != Waiting || setState(rec, Cancelled) != nil {
		return Event{}, false
	}
	t := &rec.task
	ev = Event{Kind: EventCancelled, Namespace: t.Namespace, ID: t.ID, Version: t.Version, Type: t.Type,
		Err: fmt.Errorf("%w: %s", ErrParentFailed, why)}
	rec.rare.lastErr = ev.Err.Error()
	e.retire(sh, rec)
	sh.cancelled++
	e.finished(sh, rec, e.clock.Now())
	return ev, true
}

// dropped ends the node of a record that Drop removed before it ended: its children are
// not told (the engine taking the workflow over carries on), and count it as orphaned.
// Requires no lock.
func (e *Engine) dropped(n *dagNode) {
	e.dagMu.Lock()
	defer e.dagMu.Unlock()
	if n.ended {
		return
	}
	n.ended = true
	for _, c := range n.children {
		c.orphaned++
	}
	n.children = nil
}

// cycle returns the first dependency cycle among a batch's tasks, as the IDs along it
// (a -> b -> c -> a: a depends on b, which depends on c, which depends on a), or nil.
// The batch indices of task i's parents in the batch are parents[from[i]:from[i+1]].
// O(tasks + edges).
func cycle(ids []string, from, parents []int) []string {
	const (
		unseen = iota
		onPath
		done
	)
	mark := make([]uint8, len(ids))
	var path []int
	var visit func(i int) []string
	visit = func(i int) []string {
		mark[i] = onPath
		path = append(path, i)
		for _, j := range parents[from[i]:from[i+1]] {
			switch mark[j] {
			case onPath:
				from := slices.Index(path, j)
				out := make([]string, 0, len(path)-from+1)
				for _, k := range path[from:] {
					out = append(out, ids[k])
				}
				return append(out, ids[j])
			case unseen:
				if c := visit(j); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		return nil
	}
	for i := range ids {
		if mark[i] == unseen {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}

// verifyDAG checks the workflow invariants above over every record. Exact only while
// no submit, end or cancel is in progress (a parent's end on its way to its children
// is counted as not yet ended, which it is not).
func (e *Engine) verifyDAG() error {
	e.dagMu.Lock()
	defer e.dagMu.Unlock()
	held := map[*dagNode]State{}
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		var err error
		for _, rec := range sh.slots {
			if rec == nil {
				continue
			}
			n := rec.node()
			switch _, shared := held[n]; {
			case n == nil && rec.state == Waiting:
				err = fmt.Errorf("WAITING without a workflow node")
			case n == nil:
				continue
			case shared:
				err = fmt.Errorf("its workflow node is another record's too")
			case n.ns != rec.task.Namespace || n.id != rec.task.ID || n.hash != rec.hash:
				err = fmt.Errorf("its workflow node names %s/%s", n.ns, n.id)
			}
			if err != nil {
				err = fmt.Errorf("%s/%s: %w", rec.task.Namespace, rec.task.ID, err)
				break
			}
			held[n] = rec.state
		}
		sh.mu.Unlock()
		if err != nil {
			return err
		}
	}
	listed := map[*dagNode]int{}
	for n := range held {
		if !n.ended {
			for _, c := range n.children {
				listed[c]++
			}
		}
	}
	for n, st := range held {
		if st != Waiting {
			continue
		}
		if n.ended || n.waiting < 1 || n.waiting != listed[n]+n.orphaned {
			return fmt.Errorf("%s/%s: WAITING with its node ended %v, waiting for %d parents, listed by %d live ones, %d dropped",
				n.ns, n.id, n.ended, n.waiting, listed[n], n.orphaned)
		}
	}
	return nil
}
