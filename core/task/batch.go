package task

import (
	"fmt"
	"strings"
	"time"
)

// SubmitBatch submits tasks as one: every one is accepted, or none is, and the error
// names the first bad task and why. It is how a workflow is submitted: a task's parents
// (Task.DependsOn) may be earlier or later in the batch, or in the engine already. A
// task whose parents have not all ended starts WAITING; one whose parent had already
// failed, under ParentCancel, is cancelled at once (after its EventSubmitted). Info[i]
// describes tasks[i] as accepted (PENDING or WAITING). Submit of a task with
// dependencies is a batch of one.
//
// Errors: those of Submit (ErrExists, ErrOverloaded, ErrInvalidTask naming the field),
// and ErrInvalidTask for an ID twice in the batch, a parent that does not exist or is
// recurring, or a dependency cycle, named by its path (a -> b -> a: a depends on b,
// which depends on a). Only an engine closing meanwhile can leave a batch half
// accepted (ErrClosed; what was accepted is dropped with the rest).
//
// Cost: O(tasks + edges), under the lock of every shard the batch touches (all of them,
// for a batch of a few hundred tasks or more), so that it holds up other submits and
// runs meanwhile; and one allocation a task more than Submit for tasks with edges.
func (e *Engine) SubmitBatch(tasks []Task) ([]Info, error) { return e.submitBatch(tasks, time.Time{}) }

// batchEntry is one task of a batch on its way in.
type batchEntry struct {
	t        Task
	h        uint64
	sh       *shard
	first    time.Time
	rec, old *record  // its record, and the one it replaces
	node     *dagNode // its workflow node, if it has parents or children
	doomedBy string   // why it is cancelled at once: a parent had failed (ParentCancel)
}

func (e *Engine) submitBatch(tasks []Task, notBefore time.Time) ([]Info, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if len(tasks) == 0 {
		return nil, nil
	}
	nowNs, wall := e.now()
	b := make([]batchEntry, len(tasks))
	at := make(map[key]int, len(tasks))
	for i := range tasks {
		x := &b[i]
		x.t = tasks[i]
		first, err := e.prepare(&x.t, wall, false)
		if err != nil {
			return nil, err
		}
		x.first = first
		k := key{x.t.Namespace, x.t.ID}
		if _, dup := at[k]; dup {
			return nil, fmt.Errorf("%w: task %s/%s is in the batch twice", ErrInvalidTask, k.ns, k.id)
		}
		at[k] = i
		x.h = keyHash(k.ns, k.id)
		x.sh = e.shardOf(x.h)
	}
	// Edges inside the batch, and the shards to lock: the batch's and its outside parents'.
	ids := make([]string, len(b))
	from := make([]int, len(b)+1) // task i's parents in the batch: parents[from[i]:from[i+1]]
	var parents []int
	isParent := make([]bool, len(b))
	var lock [numShards]bool
	for i := range b {
		ids[i] = b[i].t.ID
		lock[b[i].sh.idx] = true
		from[i] = len(parents)
		d := b[i].t.DependsOn
		if d == nil {
			continue
		}
		for _, p := range d.On {
			k := key{b[i].t.Namespace, p}
			j, in := at[k]
			if !in {
				lock[keyHash(k.ns, k.id)&(numShards-1)] = true
				continue
			}
			if b[j].t.Schedule.Recurring() {
				return nil, recurringParent(b[i].t.ID, p)
			}
			parents = append(parents, j)
			isParent[j] = true
		}
	}
	from[len(b)] = len(parents)
	if c := cycle(ids, from, parents); c != nil {
		return nil, fmt.Errorf("%w: DependsOn: dependency cycle: %s", ErrInvalidTask, strings.Join(c, " -> "))
	}

	e.dagMu.Lock()
	e.lockShards(&lock)
	unlock := func() { e.unlockShards(&lock); e.dagMu.Unlock() }
	outside, err := e.outsideParents(b, at)
	if err == nil {
		err = e.admitBatch(b)
	}
	if err != nil {
		unlock()
		return nil, err
	}

	// Nothing fails from here (but for a closing engine's timers).
	for i := range b {
		x := &b[i]
		x.rec = e.newRecord(&x.t, x.h)
		e.place(x.sh, x.rec, x.old)
		if x.t.DependsOn != nil || isParent[i] {
			x.node = x.rec.attachNode()
		}
	}
	for i := range b {
		if b[i].t.DependsOn != nil {
			e.link(&b[i], b, at, outside)
		}
	}
	infos := make([]Info, len(b))
	var doomed []int
	for i := range b {
		x := &b[i]
		x.sh.submitted++
		if n := x.node; n != nil && (n.waiting > 0 || n.doomed) {
			x.rec.state = Waiting // its first state
			infos[i] = x.rec.info()
			if n.doomed {
				doomed = append(doomed, i)
			}
			continue
		}
		x.rec.due = x.first
		infos[i] = x.rec.info() // as accepted: PENDING, due at first
		if err = e.start(x.sh, x.rec, notBefore, nowNs, wall); err != nil {
			e.remove(x.sh, x.rec)
			break
		}
	}
	e.unlockShards(&lock)
	var tl told
	var work []nodeEnd
	for _, i := range doomed {
		if ev, ok := e.cancelWaiting(b[i].node, b[i].doomedBy); ok {
			tl.events = append(tl.events, ev)
			work = append(work, nodeEnd{b[i].node, Cancelled})
		}
	}
	e.endLocked(work, &tl)
	e.dagMu.Unlock()
	if err != nil {
		return nil, err
	}
	for i := range b {
		t := &b[i].t
		e.emit(Event{Kind: EventSubmitted, Namespace: t.Namespace, ID: t.ID, Version: t.Version, Type: t.Type})
	}
	e.releaseAll(&tl)
	return infos, nil
}

func recurringParent(child, parent string) error {
	return fmt.Errorf("%w: DependsOn.On: task %q depends on %q, which is recurring (only one-shot tasks can be parents)", ErrInvalidTask, child, parent)
}

// outsideParents finds the records of the parents that the batch's tasks name outside
// it, in the batch's order, so that the first missing one is the one reported. Requires
// e.dagMu and the shard locks of the batch.
func (e *Engine) outsideParents(b []batchEntry, at map[key]int) (map[key]*record, error) {
	outside := map[key]*record{}
	for i := range b {
		d := b[i].t.DependsOn
		if d == nil {
			continue
		}
		for _, p := range d.On {
			k := key{b[i].t.Namespace, p}
			if _, in := at[k]; in || outside[k] != nil {
				continue
			}
			h := keyHash(k.ns, k.id)
			sh := e.shardOf(h)
			rec := e.findLocked(sh, h, k.ns, k.id)
			switch {
			case rec == nil:
				return nil, fmt.Errorf("%w: DependsOn.On: task %q depends on %q, which does not exist", ErrInvalidTask, b[i].t.ID, p)
			case rec.task.Schedule.Recurring():
				return nil, recurringParent(b[i].t.ID, p)
			}
			outside[k] = rec
		}
	}
	return outside, nil
}

// admitBatch checks every task of b as Submit does (admit, payload bytes, concurrency
// keys), setting each one's old record, and counts its payload and keys: all or none.
// Requires e.dagMu and the shard locks of the batch.
func (e *Engine) admitBatch(b []batchEntry) error {
	var adding [numShards]int
	var bytes, freed int64
	for i := range b {
		x := &b[i]
		old, err := e.admit(x.sh, &x.t, x.h, adding[x.sh.idx])
		if err != nil {
			return err
		}
		if x.old = old; old == nil {
			adding[x.sh.idx]++
		} else {
			freed += int64(len(old.task.Payload))
		}
		bytes += int64(len(x.t.Payload))
	}
	if err := e.chargePayload(bytes, freed); err != nil {
		return err
	}
	for i := range b {
		c := b[i].t.Concurrency
		if c == nil {
			continue
		}
		lim, err := e.resolveKey(b[i].t.Namespace, c)
		if err != nil {
			for j := range b[:i] {
				if c := b[j].t.Concurrency; c != nil {
					e.unrefKey(c)
				}
			}
			e.payloads.Add(-bytes)
			return err
		}
		b[i].t.Concurrency = lim
	}
	return nil
}

// link adds the edges from x's parents to x: each parent in the batch or outside it
// that has not ended lists x among its children, and x counts it; one that has ended
// counts as it ended (a failure dooms x, under ParentCancel). An outside parent gets a
// node if it has none. Requires e.dagMu and the shard locks of the batch.
func (e *Engine) link(x *batchEntry, b []batchEntry, at map[key]int, outside map[key]*record) {
	for _, p := range x.t.DependsOn.On {
		k := key{x.t.Namespace, p}
		var pn *dagNode
		if j, in := at[k]; in {
			pn = b[j].node
		} else {
			prec := outside[k]
			pn = prec.node()
			if pn == nil && !prec.state.Terminal() {
				pn = prec.attachNode()
			}
			if pn == nil || pn.ended {
				if prec.state != Succeeded && x.node.policy == ParentCancel && !x.node.doomed {
					x.node.doomed, x.doomedBy = true, fmt.Sprintf("parent %q had ended %s", p, prec.state)
				}
				continue
			}
		}
		pn.children = append(pn.children, x.node)
		x.node.waiting++
	}
}

// lockShards locks the shards marked, in index order; unlockShards unlocks them.
func (e *Engine) lockShards(mark *[numShards]bool) {
	for i := range e.shards {
		if mark[i] {
			e.shards[i].mu.Lock()
		}
	}
}

func (e *Engine) unlockShards(mark *[numShards]bool) {
	for i := range e.shards {
		if mark[i] {
			e.shards[i].mu.Unlock()
		}
	}
}
