package tockd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/settings"
	"github.com/tock-sched/tock/server/store"
)

// requests answers the requests of every connection after its handshake: clients'
// (SUBMIT, CANCEL, GET, LIST, the DLQ, PAUSE/RESUME, STATS, PING) itself, workers'
// (SUBSCRIBE, CREDIT, ACK, NACK, ACKS, CARRY, ADOPT) through runs. Each request is answered on
// its connection's reader goroutine, synchronously against the engine, and its reply is
// checked against the replies table (checkReply).
//
// Invariants:
//   - Every request but LIST and DLQ_LIST is O(1) engine work; those two read one page,
//     which fits MaxFrame (pages.go).
//   - A request waits only for etcd, and only where a reply states durability or the
//     cluster's configuration: a durable submit's record write (shared transactions,
//     commit.go); a durable task's CANCEL and ACK are answered later, from the deleter,
//     once its record is gone; PAUSE and RESUME (and the CONFIG requests) write the
//     configuration and wait for this node's watch to apply it (liveconfig.go).
//   - With a replica (a Store), a node that does not lead answers task requests and
//     SUBSCRIBE with NOT_LEADER (followerRefuses); without one it always leads.
//   - The protocol decoder has already refused what the connection's role may not send
//     (protocol.Decoder.SetPeer): a worker message from a client never reaches serve.
//
// Locking: requests holds no lock of its own; unlistedReplies is atomic, every other
// field is set by New and immutable after.
type requests struct {
	engine  *task.Engine
	opts    *Options
	log     *slog.Logger
	router  *router[*conn]
	runs    *remoteRuns
	replica *replica // nil without Options.Store
	config  *liveConfig
	spans   spans // of traced tasks (spans.go)
	// snapshot is Server.Stats, which STATS answers with: it gathers every part's figures.
	snapshot func() Stats
	// partitions is Server.Partitions, which PARTITIONS answers with.
	partitions func() PartitionMap
	// unlistedReplies counts replies the replies table does not list for their request
	// (replies.go): a bug, logged at Error.
	unlistedReplies atomic.Uint64
}

// serve answers one request of c after the handshake. It returns the reply (nil for a
// frame that gets none yet: an ERROR from the peer, or an answer that waits for etcd)
// and whether the connection must close after it (SHUTTING_DOWN when the engine has
// been closed). It runs on c's reader goroutine.
func (q *requests) serve(c *conn, m protocol.Message) (reply protocol.Message, closes bool) {
	id := m.RequestID()
	if q.replica != nil && followerRefuses(m) {
		if leading, _ := q.router.leadership(); !leading {
			return q.replica.lead.notLeader(id), false
		}
	}
	switch m := m.(type) {
	case *protocol.Ping:
		return &protocol.Pong{ID: id}, false
	case *protocol.Submit:
		return q.submit(id, &m.Task)
	case *protocol.SubmitBatch:
		return q.submitBatch(id, m.Tasks)
	case *protocol.Cancel:
		return q.cancel(c, m)
	case *protocol.Get:
		in, err := q.engine.Get(m.Namespace, m.TaskID)
		if err != nil {
			return engineError(id, err, "")
		}
		return q.getReply(id, in, m.OmitPayload), false
	case *protocol.List:
		return q.listReply(m)
	case *protocol.DLQList:
		return q.dlqReply(m)
	case *protocol.DLQRequeue:
		in, err := q.engine.Requeue(m.Namespace, m.TaskID)
		if err != nil {
			return engineError(id, err, "")
		}
		return q.status(id, in), false
	case *protocol.DLQPurge:
		// Purging a dead letter that is not there removes nothing: PURGED count 0, not
		// NOT_FOUND, so that a purge can be repeated safely.
		if m.All {
			return &protocol.Purged{ID: id, Count: uint64(q.engine.PurgeDeadLetters())}, false
		}
		var n uint64
		if q.engine.PurgeDeadLetter(m.Namespace, m.TaskID) {
			n = 1
		}
		return &protocol.Purged{ID: id, Count: n}, false
	case *protocol.Stats:
		return q.stats(id), false
	case *protocol.Partitions:
		return partitionMapReply(id, q.partitions()), false
	case *protocol.Error:
		return nil, false // the server never answers ERROR frames
	// Worker messages: the decoder refuses them (UNEXPECTED) on a client's connection.
	case *protocol.Subscribe:
		if c.carryBounced {
			return q.bouncedSubscribe(c, id), false
		}
		return q.runs.subscribe(c, m)
	case *protocol.Credit:
		q.router.credit(c, m.Credits)
		return &protocol.OK{ID: id}, false
	case *protocol.Ack:
		return q.runs.finish(c, id, m.RunID, m.Epoch, nil)
	case *protocol.Acks:
		return q.runs.finishAcks(c, m)
	case *protocol.Carry:
		return q.runs.carry(c, m)
	case *protocol.Adopt:
		return q.runs.adopt(c, m)
	case *protocol.Nack:
		msg := m.Err
		if msg == "" {
			msg = "the worker reported a failure (NACK)"
		}
		err := errors.New(msg)
		if !m.Retryable {
			err = task.NonRetryable(err)
		}
		return q.runs.finish(c, id, m.RunID, m.Epoch, err)
	case *protocol.ConfigGet, *protocol.ConfigList, *protocol.ConfigSet:
		return q.configReply(id, m), false
	case *protocol.Pause:
		return q.pauseOrResume(id, m.TaskType, true), false
	case *protocol.Resume:
		return q.pauseOrResume(id, m.TaskType, false), false
	}
	// A second HELLO, and the server-to-client messages (WELCOME, OK, ..., FIRE), are
	// refused by the decoder (SetPeer) before they get here; this answer is its twin.
	return unexpected(id, fmt.Sprintf("%v is sent by the server, never to it", m.Type())), false
}

// bouncedSubscribe refuses the SUBSCRIBE (request id) of a connection whose CARRY this
// node answered NOT_LEADER before it was elected: the worker still holds those outcomes,
// and subscribing now would get it the FIREs of the very runs they end, run again. The
// NOT_LEADER names this node, so that the worker connects again at once and hands them
// in first.
func (q *requests) bouncedSubscribe(c *conn, id uint64) *protocol.Error {
	self := q.opts.AdvertiseAddr
	if self == "" {
		self = c.nc.LocalAddr().String()
	}
	return &protocol.Error{ID: id, Code: protocol.CodeNotLeader, Leader: self,
		Message: "this connection's CARRY was answered before this node led: connect again and hand it in before subscribing"}
}

// cancel answers CANCEL: the task's state once cancelled (or its final state, if it
// had finished), for a durable task once its record is deleted (nil: the answer is
// pushed then).
func (q *requests) cancel(c *conn, m *protocol.Cancel) (protocol.Message, bool) {
	id := m.ID
	dur := protocol.Ephemeral // looked up first: cancelling ends a durable task's entry
	if before, err := q.engine.Get(m.Namespace, m.TaskID); err == nil {
		dur = q.durabilityOf(before)
	}
	if err := q.engine.Cancel(m.Namespace, m.TaskID); err != nil {
		if errors.Is(err, task.ErrIllegalTransition) {
			// It has finished (SUCCEEDED or DEAD): nothing to cancel. The answer is its
			// final state, as for a task cancelled before; no ERROR, since the request
			// is no misuse of the protocol.
			if in, gerr := q.engine.Get(m.Namespace, m.TaskID); gerr == nil {
				st := q.status(id, in)
				st.Durability = dur
				return st, false
			}
		}
		return engineError(id, err, "")
	}
	var st *protocol.TaskStatus
	if in, err := q.engine.Get(m.Namespace, m.TaskID); err == nil {
		st = q.status(id, in)
		st.Durability = dur
	} else { // dropped at once (Retention < 0): it was cancelled all the same
		st = &protocol.TaskStatus{ID: id, Namespace: nsOrDefault(m.Namespace), TaskID: m.TaskID,
			Durability: dur, State: task.Cancelled}
	}
	// A durable task's cancel is answered once its record is deleted.
	if q.replica != nil && q.replica.dur.afterDelete(taskKey{nsOrDefault(m.Namespace), m.TaskID}, false, endFunc(func(deleteErr error) {
		if deleteErr == nil {
			c.pushReply(st)
			return
		}
		// Cancelled here, not in etcd: the next leader would run it again.
		e := storeError(deleteErr)
		e.ID = id
		e.Message = "cancelled on this node, but the cancel was not recorded: " + e.Message
		q.checkReply(m, e) // a reply sent later, outside conn.handle's check
		c.pushReply(e)
	}), 0) {
		return nil, false
	}
	return st, false
}

// submit answers SUBMIT: TASK_STATUS, or an ERROR whose field is relative to the message
// ("task.schedule.cron").
func (q *requests) submit(id uint64, w *protocol.Task) (protocol.Message, bool) {
	in, err := q.submitOne(w)
	if err != nil {
		var perr *protocol.Error
		if errors.As(err, &perr) { // from ToTask, or durable refused
			field := perr.Field
			if field != "" || perr.Code == protocol.CodeBadField || perr.Code == protocol.CodeInvalidTask {
				field = prefix("task", field) // a field error names its path in the message
			}
			return &protocol.Error{ID: id, Code: perr.Code, Message: perr.Message, Field: field}, false
		}
		return engineError(id, err, "task")
	}
	st := q.status(id, in)
	st.Durability = w.Durability // as accepted: a durable task that already finished is no longer in the set
	return st, false
}

// submitBatch answers SUBMIT_BATCH with one result per task, in order. A closed engine
// fails the whole frame (SHUTTING_DOWN closes the connection anyway).
func (q *requests) submitBatch(id uint64, ws []protocol.Task) (protocol.Message, bool) {
	if isWorkflow(ws) {
		return q.submitWorkflow(id, ws) // accepted or refused as a whole (workflow.go)
	}
	res := make([]protocol.ItemResult, len(ws))
	// Every durable record is written (one PutBatch) before any task reaches the engine.
	scratch := getPrepared(len(ws))
	defer putPrepared(scratch)
	ps := *scratch
	for i := range ws {
		q.prepare(&ps[i], &ws[i])
	}
	q.writeRecords(ps)
	for i := range ws {
		w := &ws[i]
		r := &res[i]
		r.Namespace, r.ID, r.Durability = w.Namespace, w.ID, w.Durability
		in, err := q.submitPrepared(&ps[i])
		if err == nil {
			r.Namespace, r.State, r.NextRun, r.Version = in.Task.Namespace, in.State, nextRun(in), in.Task.Version
			continue
		}
		var perr *protocol.Error
		if !errors.As(err, &perr) {
			if errors.Is(err, task.ErrClosed) {
				for j := i + 1; j < len(ps); j++ { // claimed and recorded, never submitted
					if p := &ps[j]; p.err == nil && p.held == nil && p.w.Durability == protocol.Durable {
						q.replica.dur.releaseClaim(p) // term-checked, as every release of a claim
					}
				}
				return engineError(id, err, "")
			}
			perr = mapEngineError(err, "")
		}
		r.Code, r.Message, r.Field = perr.Code, perr.Message, perr.Field
	}
	return &protocol.BatchResult{ID: id, Results: res}, false
}

// submitOne converts and submits one wire task; a durable one is recorded in the store
// first. Errors are *protocol.Error from the conversion (field relative to the task), the
// durable checks or the store, or the engine's own.
func (q *requests) submitOne(w *protocol.Task) (task.Info, error) {
	ps := q.prepareOne(w)
	q.writeRecords(ps)
	return q.submitPrepared(&ps[0])
}

// engineError turns an engine error into the ERROR reply; prefix is prepended to a
// field the error names ("task" for SUBMIT). The second result is whether the
// connection closes (SHUTTING_DOWN).
func engineError(id uint64, err error, prefixOrField string) (protocol.Message, bool) {
	e := mapEngineError(err, prefixOrField)
	e.ID = id
	return e, e.Code.Closes()
}

// mapEngineError maps core/task's sentinels to protocol codes (the table is in the
// package's tests, TestEngineErrorCodes):
//
//	ErrExists                          EXISTS
//	ErrNotFound                        NOT_FOUND
//	ErrInvalidTask                     INVALID_TASK, field "depends_on" when it is the
//	                                   parents (a cycle, a missing or recurring one),
//	                                   "payload" when it is the payload
//	ErrInvalidSchedule                 INVALID_TASK, field "schedule"
//	ErrInvalidRetry                    INVALID_TASK, field "retry"
//	ErrOverloaded                      OVERLOADED
//	ErrClosed                          SHUTTING_DOWN (closes)
//	ErrIllegalTransition               INTERNAL: CANCEL, the one request that meets it (a
//	                                   finished task), answers the task's state instead
//	ErrBadCursor                       BAD_FIELD, field "cursor"
//	anything else                      INTERNAL
//
// For the task errors, pf is the prefix of the field ("task", "" for batch items); for
// ErrBadCursor it is the field itself.
func mapEngineError(err error, pf string) *protocol.Error {
	e := &protocol.Error{Message: err.Error()}
	switch {
	case errors.Is(err, task.ErrExists):
		e.Code = protocol.CodeExists
	case errors.Is(err, task.ErrNotFound):
		e.Code = protocol.CodeNotFound
	case errors.Is(err, task.ErrInvalidSchedule):
		e.Code, e.Field = protocol.CodeInvalidTask, prefix(pf, "schedule")
	case errors.Is(err, task.ErrInvalidRetry):
		e.Code, e.Field = protocol.CodeInvalidTask, prefix(pf, "retry")
	case errors.Is(err, task.ErrInvalidTask):
		// ToTask has checked every task rule but the payload's size (the engine's
		// MaxPayload), so that is what the engine refuses here; the engine's errors carry
		// no field, so its message is the evidence.
		e.Code = protocol.CodeInvalidTask
		switch msg := err.Error(); {
		case strings.Contains(msg, "DependsOn"): // a cycle, a missing or recurring parent
			e.Field = prefix(pf, "depends_on")
		case strings.Contains(msg, "payload"):
			e.Field = prefix(pf, "payload")
		}
	case errors.Is(err, task.ErrOverloaded):
		e.Code = protocol.CodeOverloaded
	case errors.Is(err, task.ErrClosed):
		e.Code, e.Message = protocol.CodeShuttingDown, "the engine is closed: "+err.Error()
	case errors.Is(err, task.ErrBadCursor):
		e.Code, e.Field = protocol.CodeBadField, pf
	default:
		e.Code = protocol.CodeInternal
	}
	return e
}

func prefix(p, field string) string {
	switch {
	case p == "":
		return field
	case field == "":
		return p
	}
	return p + "." + field
}

func internal(id uint64, err error) *protocol.Error {
	return &protocol.Error{ID: id, Code: protocol.CodeInternal, Message: err.Error()}
}

func unexpected(id uint64, msg string) *protocol.Error {
	return &protocol.Error{ID: id, Code: protocol.CodeUnexpected, Message: msg}
}

func nsOrDefault(ns string) string {
	if ns == "" {
		return task.DefaultNamespace
	}
	return ns
}

// nextRun is in's next due time as Unix ns, 0 when none is scheduled.
func nextRun(in task.Info) int64 {
	if in.NextRun.IsZero() {
		return 0
	}
	v, _ := protocol.UnixNano(in.NextRun)
	return v
}

func (q *requests) status(id uint64, in task.Info) *protocol.TaskStatus {
	return &protocol.TaskStatus{ID: id, Namespace: in.Task.Namespace, TaskID: in.Task.ID, Durability: q.durabilityOf(in),
		State: in.State, NextRun: nextRun(in), Version: in.Task.Version}
}

// stats answers STATS with the engine's counters and the server's gauges, under the
// names PROTOCOL.md lists (plus a few more, which clients ignore if unknown).
func (q *requests) stats(id uint64) *protocol.StatsReply {
	ss := q.snapshot()
	st := ss.Engine
	leader := int64(0)
	if ss.IsLeader {
		leader = 1
	}
	counters := map[string]uint64{
		"submitted": st.Submitted, "started": st.Started, "succeeded": st.Succeeded, "failed": st.Failed,
		"retried": st.Retried, "dead": st.Dead, "cancelled": st.Cancelled, "timed_out": st.TimedOut,
		"misfired":        st.Misfired,
		"redelivered":     ss.Redelivered, // runs failed because their worker disconnected
		"durable_commits": ss.DurableCommits,
		"carried":         ss.Carried,
		"adopted":         ss.Adopted,
		"limit_waits":     st.LimitWaits,
		// Beyond the documented names:
		"panics": st.Panics, "late_results": st.LateResults, "dlq_evicted": st.DLQEvicted,
		"fired": ss.Fired, "acked": ss.Acked, "nacked": ss.Nacked, "leader_changes": ss.LeaderChanges,
		"reply_stalls": ss.ReplyStalls, "fires_frames": ss.FiresFrames,
	}
	for r, n := range ss.CarryRefused {
		counters["carry_refused_"+CarryRefusal(r).String()] = n
	}
	return &protocol.StatsReply{ID: id,
		Counters: counters,
		Gauges: map[string]int64{
			"tasks": int64(st.Tasks), "queued": int64(st.Queued) + int64(ss.Waiting), "running": int64(st.Running),
			"dead_letters": int64(st.DeadLetters), "connections": int64(ss.Connections),
			"workers":          ss.Workers,
			"is_leader":        leader,
			"waiting_on_limit": int64(st.WaitingOnLimit),
			// Beyond the documented names:
			"hung_workers": int64(st.HungWorkers), "waiting": int64(ss.Waiting), "epoch": int64(ss.Epoch),
			"pending_deletes":    int64(ss.PendingDeletes),
			"queued_reply_bytes": ss.QueuedReplyBytes,
			"partitions":         int64(ss.Partitions.Count),
			"partitions_owned":   int64(ss.Partitions.ownedBy(q.opts.NodeName)),
			"partitions_held":    int64(ss.Partitions.HeldBy(q.opts.NodeName)),
			"partitions_unheld":  int64(ss.Partitions.Unheld()),
			"partition_map_rev":  ss.Partitions.Rev,
		},
	}
}

// pauseOrResume answers PAUSE and RESUME of a task type: the runtime configuration's
// paused/<type>, set or reset (liveConfig.setPaused): with a Store it is recorded in
// etcd, so that every node, the next leader and a restarted node hold it too, and the OK
// comes once this node has applied it.
func (q *requests) pauseOrResume(id uint64, typ string, paused bool) protocol.Message {
	if typ == "" {
		return &protocol.Error{ID: id, Code: protocol.CodeBadField, Field: "type", Message: "an empty task type"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
	defer cancel()
	if _, err := q.config.setPaused(ctx, typ, paused); err != nil {
		return configError(id, err)
	}
	return &protocol.OK{ID: id}
}

// configReply answers CONFIG_GET, CONFIG_LIST and CONFIG_SET (any node, leading or
// not): the settings as this node applies them; CONFIG_SET once it has applied the
// change (bounded by storeOpTimeout).
func (q *requests) configReply(id uint64, m protocol.Message) protocol.Message {
	var (
		es  []ConfigEntry
		e   ConfigEntry
		rev int64
		err error
	)
	switch m := m.(type) {
	case *protocol.ConfigList:
		es, rev = q.config.list()
	case *protocol.ConfigGet:
		e, err = q.config.get(m.Key)
	case *protocol.ConfigSet:
		ctx, cancel := context.WithTimeout(context.Background(), storeOpTimeout)
		defer cancel()
		if m.Reset {
			e, err = q.config.reset(ctx, m.Key)
		} else {
			e, err = q.config.set(ctx, m.Key, m.Value)
		}
	}
	if err != nil {
		return configError(id, err)
	}
	if es == nil {
		es, rev = []ConfigEntry{e}, q.config.revision()
	}
	r := &protocol.ConfigValues{ID: id, Rev: uint64(max(rev, 0)), Values: make([]protocol.ConfigValue, len(es))}
	for i, e := range es {
		r.Values[i] = protocol.ConfigValue{Key: e.Key, Value: e.Value, Set: e.Set}
	}
	return r
}

// configError maps the error of a configuration request (CONFIG_*, PAUSE, RESUME) to its reply: a
// key or value refused is BAD_FIELD (nothing was written); a write whose outcome is
// unknown is UNCERTAIN; one that landed but was not applied here in time is INTERNAL;
// anything else (etcd refused or could not be reached before writing) is OVERLOADED.
func configError(id uint64, err error) *protocol.Error {
	e := &protocol.Error{ID: id, Message: err.Error()}
	switch {
	case errors.Is(err, settings.ErrUnknownKey):
		e.Code, e.Field = protocol.CodeBadField, "key"
	case errors.Is(err, settings.ErrBadValue):
		e.Code, e.Field = protocol.CodeBadField, "value"
	case errors.Is(err, errNotApplied):
		e.Code = protocol.CodeInternal
	case errors.Is(err, store.ErrUncertain):
		e.Code = protocol.CodeUncertain
	default:
		e.Code = protocol.CodeOverloaded
	}
	return e
}
