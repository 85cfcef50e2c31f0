package tockd

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// Broadcast tasks (task.Task.Broadcast): each occurrence runs once on every worker
// connection subscribed to the task's type when it comes due. The engine fans the
// occurrence out into one shard per worker (task.Options.BroadcastWidth, answered by
// broadcastTargets, which records the workers in subscription order); the run of shard
// i is FIREd at the i-th of them alone (routeTo), tracked and ACKed as any run. A run
// never waits in a type's queue for its worker (it would hold back the runs behind it):
//   - its worker has no credit, its reply queue is full, the type is paused or this
//     node does not lead: the attempt fails with errNoWorker, retried per the task's
//     policy (a broadcast task wants one);
//   - its worker has gone (its connection closed, even if the process reconnected): the
//     run fails for good (errBroadcastGone), and so the occurrence, once its other runs
//     have ended (one dead letter, the task's).
//
// Locking: broadcasts is guarded by router.mu. broadcastTargets is called by the engine
// under no lock of its own, so taking router.mu there keeps the lock order.

// errBroadcastGone fails a broadcast run whose worker connection has gone.
var errBroadcastGone = errors.New("tockd: the broadcast run's worker has gone")

// broadcastTargets records the workers subscribed to t's type, in subscription order,
// as the targets of t's occurrence now fanning out, and returns how many there are.
// Cost: O(workers of the type × log).
func (r *router[W]) broadcastTargets(t *task.Task) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.table.byType[t.Type]
	ws := make([]W, 0, len(set))
	for w := range set {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b W) int { return int(set[a].seq) - int(set[b].seq) })
	if len(ws) > task.MaxShards {
		ws = ws[:task.MaxShards]
	}
	if r.broadcasts == nil {
		r.broadcasts = map[taskKey][]W{}
	}
	k := taskKey{t.Namespace, t.ID}
	if len(ws) == 0 {
		delete(r.broadcasts, k)
	} else {
		r.broadcasts[k] = ws
	}
	return len(ws)
}

// routeTo FIREs f, the run of shard i of a broadcast occurrence, at its own worker, or
// fails it (see above). It returns task.ErrDeferred once f is FIREd.
func (r *router[W]) routeTo(f *protocol.Fire, i int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	targets := r.broadcasts[taskKey{f.Namespace, f.TaskID}]
	if i >= len(targets) {
		return task.NonRetryable(fmt.Errorf("%w: shard %d of %d", errBroadcastGone, i, len(targets)))
	}
	w := targets[i]
	ws := r.table.byType[f.TaskType][w]
	switch {
	case ws == nil:
		return task.NonRetryable(fmt.Errorf("%w: worker %d of the broadcast", errBroadcastGone, i))
	case !r.leading || r.hold.on || r.paused[f.TaskType]:
		return fmt.Errorf("%w for broadcast type %q: not dispatching now", errNoWorker, f.TaskType)
	case ws.credits == 0:
		return fmt.Errorf("%w for broadcast type %q: worker %d of the broadcast has no credit", errNoWorker, f.TaskType, i)
	}
	f.Epoch = r.epoch
	if r.lease != nil && !r.lease.Valid(time.Now()) {
		r.lease.Lapsed()
		return fmt.Errorf("%w for broadcast type %q: the term's lease lapsed", errNoWorker, f.TaskType)
	}
	if !w.push(f) {
		return fmt.Errorf("%w for broadcast type %q: worker %d of the broadcast is not reading", errNoWorker, f.TaskType, i)
	}
	r.pushed.add(w)
	r.table.charge(ws, f)
	r.fired.Add(1)
	r.pushed.flush()
	return task.ErrDeferred
}
