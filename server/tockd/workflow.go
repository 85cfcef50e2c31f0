package tockd

import (
	"errors"
	"fmt"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// Workflows. A SUBMIT_BATCH in which any task names parents ("depends_on") is a
// workflow: its tasks go to the engine as one (task.Engine.SubmitBatch), so that every
// one is accepted or none is, and a parent may come before or after its children in
// the batch. A refused workflow answers every item with the refusal (refuseWorkflow).
// A batch without edges keeps its per-task results (requests.submitBatch), and a SUBMIT
// with parents is the engine's batch of one.
//
// Durable workflows are not supported yet: a durable task with parents, or a workflow
// with a durable task, is INVALID_TASK (field "depends_on", "durability"), since its
// record carries no edges a next leader could load.

// isWorkflow reports whether any task of ws names parents. O(len(ws)).
func isWorkflow(ws []protocol.Task) bool {
	for i := range ws {
		if len(ws[i].DependsOn) > 0 {
			return true
		}
	}
	return false
}

// errDurableWorkflow refuses a durable task in a workflow (see above).
func errDurableWorkflow(field string) *protocol.Error {
	return &protocol.Error{Code: protocol.CodeInvalidTask, Field: field,
		Message: "durable workflows are not supported yet: submit a workflow's tasks as ephemeral"}
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
	for i := range ws {
		if ws[i].Durability == protocol.Durable {
			return refuseWorkflow(id, res, i, errDurableWorkflow("durability")), false
		}
		ps[i] = q.prepare(&ws[i])
		if err := ps[i].err; err != nil {
			var perr *protocol.Error
			if !errors.As(err, &perr) {
				perr = mapEngineError(err, "")
			}
			return refuseWorkflow(id, res, i, perr), false
		}
		ts[i] = ps[i].t
	}
	infos, err := q.engine.SubmitBatch(ts)
	for i := range ps {
		q.spans.submitted(&ps[i].t, ps[i].start, err)
	}
	if err != nil {
		if errors.Is(err, task.ErrClosed) {
			return engineError(id, err, "")
		}
		return refuseWorkflow(id, res, -1, mapEngineError(err, "")), false
	}
	for i, in := range infos {
		r := &res[i]
		r.Namespace, r.State, r.NextRun, r.Version = in.Task.Namespace, in.State, nextRun(in), in.Task.Version
	}
	return &protocol.BatchResult{ID: id, Results: res}, false
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
