package tockd

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// Workflows. A SUBMIT_BATCH in which any task names parents ("depends_on") is a
// workflow: its tasks go to the engine as one (task.Engine.SubmitBatch), so that every
// one is accepted or none is, and a parent may come before or after its children in
// the batch. A refused workflow answers every item with the refusal (refuseWorkflow).
// A batch without edges keeps its per-task results (requests.submitBatch), and a SUBMIT
// with parents is the engine's batch of one.
//
// Durable: a durable task with parents is recorded with them (its record is its wire
// task, depends_on included), so a takeover re-creates the edges: it loads the records
// of tasks with parents after every other one, in one SubmitBatch (workflowLoad.enter), and a
// parent with no record left counts as done (its end was confirmed: a durable task's
// record is deleted, fenced, when it ends; an ephemeral parent went with its leader). A parent that ends DEAD or CANCELLED
// cancels its ParentCancel children, and its record's delete waits for theirs: the
// children's records (a cascade's, deepest first) and then the parent's go as one batch
// of the deleter, in order (wfends.go, store.Records.DeleteChainFenced): one fenced
// transaction while they fit one (Options.MaxTxnOps: 124 records at the default 128),
// else transactions one after another, the parent's in the last. So no takeover finds a
// cancelled child's record with its failed parent's gone. A takeover between the
// transactions of a larger group finds the parent's record and some children's: it runs
// the parent again (its end was not confirmed) and the children left, and the ones
// deleted stay cancelled. A ParentRunAnyway child needs no such order (a parent without
// a record counts as done, which is what its policy asks). A workflow's tasks share one durability: a durable SUBMIT_BATCH
// workflow writes every record before any task enters the engine, and is refused, its
// records deleted, if any write or the engine refuses (durability.submitWorkflow).

// isWorkflow reports whether any task of ws names parents. O(len(ws)).
func isWorkflow(ws []protocol.Task) bool {
	for i := range ws {
		if len(ws[i].Parents()) > 0 {
			return true
		}
	}
	return false
}

// submitWorkflow answers a SUBMIT_BATCH that is a workflow: one result per task, in
// order, every one a success or every one the refusal. Cost: that of the engine's
// SubmitBatch, O(tasks + edges).
func (q *requests) submitWorkflow(id uint64, ws []protocol.Task) (protocol.Message, bool) {
	res := make([]protocol.ItemResult, len(ws))
	for i := range ws {
		res[i].Namespace, res[i].ID, res[i].Durability = ws[i].Namespace, ws[i].ID, ws[i].Durability
	}
	ts := make([]task.Task, len(ws))
	ps := make([]prepared, len(ws))
	durable := ws[0].Durability == protocol.Durable
	held := 0
	for i := range ws {
		if (ws[i].Durability == protocol.Durable) != durable {
			q.unclaim(ps[:i])
			return refuseWorkflow(id, res, i, &protocol.Error{Code: protocol.CodeInvalidTask, Field: "durability",
				Message: fmt.Sprintf("a workflow's tasks share one durability (tasks[0] is %v)", ws[0].Durability)}), false
		}
		q.prepare(&ps[i], &ws[i])
		if err := ps[i].err; err != nil {
			q.unclaim(ps[:i])
			return refuseWorkflow(id, res, i, asProtocolError(err)), false
		}
		if ps[i].held != nil {
			held++
		}
		ts[i] = ps[i].t
	}
	var infos []task.Info
	var err error
	switch {
	case held == len(ps): // a retry of a durable workflow accepted before: as it is held
		infos = make([]task.Info, len(ps))
		for i := range ps {
			infos[i] = *ps[i].held
		}
	case held > 0:
		i := slices.IndexFunc(ps, func(p prepared) bool { return p.held != nil })
		q.unclaim(ps)
		return refuseWorkflow(id, res, i, &protocol.Error{Code: protocol.CodeExists,
			Message: fmt.Sprintf("task %s/%s is held already, as part of another workflow", ps[i].key.ns, ps[i].key.id)}), false
	case durable:
		infos, err = q.replica.dur.submitWorkflow(ps, ts) // prepare refused durable tasks without a replica
	default:
		infos, err = q.engine.SubmitBatch(ts)
	}
	for i := range ps {
		q.spans.submitted(&ps[i].t, ps[i].start, err)
	}
	if err != nil {
		if errors.Is(err, task.ErrClosed) {
			return engineError(id, err, "")
		}
		var at workflowAt
		if errors.As(err, &at) {
			return refuseWorkflow(id, res, at.i, asProtocolError(at.err)), false
		}
		return refuseWorkflow(id, res, -1, asProtocolError(err)), false
	}
	for i, in := range infos {
		r := &res[i]
		r.Namespace, r.State, r.NextRun, r.Version = in.Task.Namespace, in.State, nextRun(in), in.Task.Version
	}
	return &protocol.BatchResult{ID: id, Results: res}, false
}

// asProtocolError is err as a *protocol.Error: itself, or the engine's mapped.
func asProtocolError(err error) *protocol.Error {
	var perr *protocol.Error
	if errors.As(err, &perr) {
		return perr
	}
	return mapEngineError(err, "")
}

// workflowAt is the refusal of a workflow at its task i (its record's write failed).
type workflowAt struct {
	i   int
	err error
}

func (w workflowAt) Error() string { return fmt.Sprintf("tasks[%d]: %v", w.i, w.err) }

// unclaim releases the claims of ps's durable tasks (prepared, and then not submitted).
func (q *requests) unclaim(ps []prepared) {
	for i := range ps {
		if p := &ps[i]; p.err == nil && p.held == nil && p.w.Durability == protocol.Durable {
			q.replica.dur.releaseClaim(p)
		}
	}
}

// submitWorkflow is submitWorkflow's durable path: every record is written (one shared
// transaction per store.Options.MaxTxnOps, commit.go) before the tasks enter the engine
// as one, under the term that claimed them. A failed write refuses the workflow
// (workflowAt names the task) and a refusal of the engine does too, and either deletes
// the records written, fenced by their term (a delete that fails is UNCERTAIN: the next
// leader may run them). A term that ended after the writes leaves the workflow to the
// next leader, which loads it (workflowLoad.enter): it is answered as accepted.
func (d *durability) submitWorkflow(ps []prepared, ts []task.Task) ([]task.Info, error) {
	d.writeRecords(ps, false) // records of their own, which undoWorkflow deletes
	for i := range ps {
		if err := ps[i].err; err != nil {
			return nil, d.undoWorkflow(ps, workflowAt{i, err})
		}
	}
	term := ps[0].term // writeRecords fenced every other term
	d.term.RLock()     // dropDurable waits: the workflow enters the engine before it drops it
	if d.lead.fence.Load() != term {
		d.term.RUnlock()
		infos := make([]task.Info, len(ts))
		for i, t := range ts {
			infos[i] = task.Info{Task: t, State: task.Pending}
			if t.DependsOn != nil {
				infos[i].State = task.Waiting
			}
		}
		return infos, nil
	}
	for i := range ts {
		d.addEdges(&ts[i])
	}
	infos, err := d.engine.SubmitBatch(ts)
	d.term.RUnlock()
	if err != nil {
		d.dropEdges(ts)
		return nil, d.undoWorkflow(ps, err)
	}
	for _, in := range infos {
		d.progress.noteArmed(in)
	}
	return infos, nil
}

// undoWorkflow deletes the records of ps that were written and releases their claims,
// and returns why (or UNCERTAIN, if the delete failed).
func (d *durability) undoWorkflow(ps []prepared, why error) error {
	var written []store.Versioned
	var term *store.Fence
	for i := range ps {
		p := &ps[i]
		if p.err != nil { // writeRecords released its claim
			continue
		}
		written = append(written, store.Versioned{Key: store.Key{Namespace: p.key.ns, ID: p.key.id}, Version: p.t.Version})
		term = p.term
		d.releaseClaim(p)
	}
	if len(written) == 0 {
		return why
	}
	derr := store.ErrFenced
	if d.lead.fence.Load() == term {
		ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
		derr = d.st.Records().DeleteBatchFenced(ctx, *term, written)
		cancel()
		d.lead.fencedOut(*term, derr)
	}
	if derr == nil {
		return why
	}
	d.log.Error("tockd: records of a refused durable workflow NOT deleted", "tasks", len(written), "err", derr)
	return &protocol.Error{Code: protocol.CodeUncertain, Message: fmt.Sprintf(
		"workflow refused (%v), but its records could not be deleted (%v): the next leader may run them; resubmitting the same workflow is safe", why, derr)}
}

// refuseWorkflow answers a refused workflow: the task at index at gets perr as it is,
// every other one perr's code and a message naming that task; with at -1 (the engine
// refused the workflow, and its message names the task and why) every task gets perr.
func refuseWorkflow(id uint64, res []protocol.ItemResult, at int, perr *protocol.Error) *protocol.BatchResult {
	other := perr.Message
	if at >= 0 {
		other = fmt.Sprintf("workflow refused: tasks[%d] (tid %q): %s", at, res[at].ID, perr.Message)
	}
	for i := range res {
		r := &res[i]
		r.Code, r.Message, r.Field = perr.Code, other, ""
		if at < 0 || i == at {
			r.Message, r.Field = perr.Message, perr.Field
		}
	}
	return &protocol.BatchResult{ID: id, Results: res}
}

// workflowLoad is a takeover's durable workflow members (records of tasks with parents),
// claimed, on their way into d's engine as one batch (enter) once every other record is
// in, so that the order records load in does not matter. Used by the load's goroutine
// alone.
type workflowLoad struct {
	d       *durability
	tasks   []task.Task
	keys    []taskKey
	entries []durEntry
}

func (wf *workflowLoad) add(t task.Task, k taskKey, e durEntry) {
	wf.tasks = append(wf.tasks, t)
	wf.keys = append(wf.keys, k)
	wf.entries = append(wf.entries, e)
}

// enter submits wf's tasks to the engine in one SubmitBatch and returns how many
// were not loaded (logged; their records stay in etcd). A parent that is neither in wf
// nor in the engine has no record left: its end was confirmed (a durable task's record
// is deleted, fenced, once it ends), so it counts as done and leaves the child's list;
// a parent the engine holds, loaded from its record or finished here, counts as the
// engine has it. The engine dispatches nothing of the term yet (a takeover's load comes
// first), so no parent ends in between. Cost: one engine Get per parent named outside
// wf, and the engine's O(tasks + edges).
func (wf *workflowLoad) enter() int {
	d := wf.d
	if len(wf.tasks) == 0 {
		return 0
	}
	in := make(map[taskKey]bool, len(wf.keys))
	for _, k := range wf.keys {
		in[k] = true
	}
	gone := 0
	for i := range wf.tasks {
		t := &wf.tasks[i]
		on := make([]string, 0, len(t.DependsOn.On))
		for _, p := range t.DependsOn.On {
			if _, err := d.engine.Get(t.Namespace, p); err == nil || in[taskKey{t.Namespace, p}] {
				on = append(on, p)
			}
		}
		gone += len(t.DependsOn.On) - len(on)
		if len(on) == 0 {
			t.DependsOn = nil
		} else if len(on) < len(t.DependsOn.On) {
			t.DependsOn = &task.Deps{On: on, OnParentFailure: t.DependsOn.OnParentFailure}
		}
	}
	for i := range wf.tasks {
		d.addEdges(&wf.tasks[i])
	}
	infos, err := d.engine.SubmitBatch(wf.tasks)
	if err != nil {
		d.dropEdges(wf.tasks)
		d.log.Error("tockd: durable workflow not loaded", "tasks", len(wf.tasks), "err", err)
		n := len(wf.tasks)
		wf.release()
		return n
	}
	for _, info := range infos {
		d.progress.noteArmed(info)
	}
	d.log.Info("tockd: durable workflow members loaded", "tasks", len(wf.tasks), "parents_ended", gone)
	return 0
}

// release undoes wf's claims (its tasks did not enter the engine) and empties it.
func (wf *workflowLoad) release() {
	for i, k := range wf.keys {
		wf.d.release(k, wf.entries[i])
	}
	*wf = workflowLoad{d: wf.d}
}
