package tockd

import (
	"github.com/tock-sched/tock/core/task"
)

// A durable workflow parent's failed end and the ends of the children it cancels are
// deleted children first, the parent last, and in one fenced transaction when they fit
// one (store.Records.DeleteChainFenced): so no takeover finds a ParentCancel child's
// record with its failed parent's gone, which the load would count as a parent that
// succeeded (workflowLoad.enter) and run the child.
//
// cancelEdges counts, for each durable task held, its durable ParentCancel children not
// yet ended (kids), from the edges of the children the engine holds (parents). A parent
// that ends DEAD or CANCELLED while kids > 0 has its delete held (held): the engine
// tells its children of its end right after its own event (task.Engine's parentEnded),
// and each child it cancels ends in turn, its delete joining the parent's group ahead of
// it; once the last child has ended (kids = 0) the group, its children then the parent,
// is queued as one run of the deleter's queue, which the deleter deletes as one batch,
// in that order. A child that is itself such a parent joins its parent's group with its
// own group ahead of it, so a cascade's deletes go deepest first.
//
// Invariants (under durability.mu):
//
//	kids[p] = Σ over c with parents[c] ∋ p of the count of p in parents[c]   (no zero entry)
//	held[p] ⇒ d.queued[p].held and p ∉ d.queue; every key of held[p].items too
//
// A group holds its ends until its children's ends come; a child that never ends (it
// cannot while WAITING: a parent's failure cancels it, synchronously) would hold the
// parent's end unconfirmed. A step-down queues every group as it stands (dropDurable):
// the deletes of a term that ended are fenced anyway.
//
// Cost: O(parents) per durable child at its submit, load and end; nothing for a task
// without ParentCancel children. Memory: one map entry per child and per parent with
// children, while they are held.
type cancelEdges struct {
	kids    map[taskKey]int
	parents map[taskKey][]taskKey
	held    map[taskKey]*heldEnd
}

// heldEnd is a failed parent's held end: the deletes queued ahead of its own once its
// children have all ended.
type heldEnd struct{ items []taskKey }

// addEdges counts the durable task t's edges to its parents if a parent's failure
// cancels it (task.ParentCancel), before t enters the engine: a parent that fails from
// then on holds its delete for t's. Requires no lock.
func (d *durability) addEdges(t *task.Task) {
	if t.DependsOn == nil || t.DependsOn.OnParentFailure != task.ParentCancel || len(t.DependsOn.On) == 0 {
		return
	}
	k := taskKey{t.Namespace, t.ID}
	ps := make([]taskKey, len(t.DependsOn.On))
	for i, p := range t.DependsOn.On {
		ps[i] = taskKey{t.Namespace, p}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.edges.kids == nil {
		d.edges = cancelEdges{kids: map[taskKey]int{}, parents: map[taskKey][]taskKey{}, held: map[taskKey]*heldEnd{}}
	}
	if d.edges.parents[k] != nil { // counted once: a version that did not enter is forgotten
		d.settle(k, nil)
	}
	d.edges.parents[k] = ps
	for _, p := range ps {
		d.edges.kids[p]++
	}
}

// dropEdges undoes addEdges for tasks that did not enter the engine; a parent whose
// held end waited for them is queued. Requires no lock.
func (d *durability) dropEdges(ts []task.Task) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range ts {
		if k := (taskKey{ts[i].Namespace, ts[i].ID}); d.edges.parents[k] != nil {
			d.settle(k, nil)
		}
	}
	d.cond.Broadcast()
}

// endQueued queues the delete q of k, which has ended (failed: DEAD or CANCELLED), as
// onEvent does: at once, in a group that waits for its children's (k is a failed parent
// with kids), or in its parent's group (k was cancelled by a failed parent whose end is
// held). An older end of k still queued or held keeps its place, with q's version.
// Requires mu.
func (d *durability) endQueued(k taskKey, q queuedDelete, failed bool) {
	old, queued := d.queued[k]
	if queued {
		q.held, q.group = old.held, old.group
		d.queued[k] = q
		return
	}
	d.queued[k] = q
	if failed && d.edges.kids[k] > 0 {
		q.held = true
		d.queued[k] = q
		d.edges.held[k] = &heldEnd{} // a child as well: its parents count it until then (settle)
		return
	}
	d.settle(k, []taskKey{k})
}

// settle ends k's edges to its parents, its ends' deletes (items, k's own last) joining
// the group of the first parent whose end is held, or queued if none is; a held parent
// left with no child to wait for is settled in turn. Requires mu.
func (d *durability) settle(k taskKey, items []taskKey) {
	ps := d.edges.parents[k]
	delete(d.edges.parents, k)
	placed := false
	var ready []taskKey
	for _, p := range ps {
		h, isHeld := d.edges.held[p]
		if isHeld && !placed {
			h.items = append(h.items, items...)
			placed = true
			for _, it := range items {
				q := d.queued[it]
				q.held, q.group = true, 0
				d.queued[it] = q
			}
		}
		if d.edges.kids[p]--; d.edges.kids[p] <= 0 {
			delete(d.edges.kids, p)
			if isHeld {
				ready = append(ready, p)
			}
		}
	}
	if !placed {
		d.enqueue(items)
	}
	for _, p := range ready {
		h := d.edges.held[p]
		delete(d.edges.held, p)
		d.settle(p, append(h.items, p))
	}
}

// enqueue appends items to the deleter's queue, as one group (the deleter's batch, in
// order) if more than one. Requires mu.
func (d *durability) enqueue(items []taskKey) {
	for i, it := range items {
		q := d.queued[it]
		q.held, q.group = false, 0
		if i == 0 && len(items) > 1 {
			q.group = len(items)
		}
		d.queued[it] = q
		d.queue = append(d.queue, it)
	}
}

// dropAllEdges forgets every edge, and queues every held group as it stands (a step-down:
// the engine drops the tasks, and no child will end here). Requires mu.
func (d *durability) dropAllEdges() {
	for p, h := range d.edges.held {
		d.enqueue(append(h.items, p))
	}
	d.edges = cancelEdges{}
}
