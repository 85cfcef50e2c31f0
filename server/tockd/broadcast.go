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
// broadcaster.fanOut, which records the workers in subscription order); the run of
// shard i is FIREd at the i-th of them alone (broadcaster.route), tracked and ACKed as
// any run. A run never waits in a type's queue for its worker (it would hold back the
// runs behind it):
//   - its worker has no credit, its reply queue is full, the type is paused or this
//     node does not lead: the attempt fails with errNoWorker, retried per the task's
//     policy (a broadcast task wants one);
//   - its worker has gone (its connection closed, even if the process reconnected): the
//     run fails for good (errBroadcastGone), and so the occurrence, once its other runs
//     have ended (one dead letter, the task's).

// errBroadcastGone fails a broadcast run whose worker connection has gone.
var errBroadcastGone = errors.New("tockd: the broadcast run's worker has gone")

// broadcaster is the router's part in broadcast tasks (router.broadcasts): the workers
// each broadcast task's latest occurrence fanned out to, and the FIRE of each of its
// runs at its own worker.
//
// Invariants:
//   - 1 ≤ len(targets[k]) ≤ task.MaxShards for every k, in subscription order at the
//     fan-out: the run of shard i of k's occurrence goes to targets[k][i] alone, or
//     fails. A target whose connection has gone stays listed until k's next fan-out
//     (its runs fail errBroadcastGone); a fan-out to no worker deletes k.
//   - A broadcast run never waits in a waiting queue: route FIREs it or fails it.
//
// Locking: targets is guarded by router.mu; fanOut and route take it, and are called
// with no lock held (fanOut by the engine, under no lock of its own; route by the
// handler), which keeps the lock order.
//
// Costs: fanOut is O(workers of the type × log) a broadcast occurrence; route is O(1).
type broadcaster[W workerConn] struct {
	r       *router[W] // set by router.init, immutable after
	targets map[taskKey][]W
}

// fanOut records the workers subscribed to t's type, in subscription order, as the
// targets of t's occurrence now fanning out, and returns how many there are.
func (b *broadcaster[W]) fanOut(t *task.Task) int {
	r := b.r
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
	if b.targets == nil {
		b.targets = map[taskKey][]W{}
	}
	k := taskKey{t.Namespace, t.ID}
	if len(ws) == 0 {
		delete(b.targets, k)
	} else {
		b.targets[k] = ws
	}
	return len(ws)
}

// route FIREs f, the run of shard i of a broadcast occurrence, at its own worker, or
// fails it (see above). It returns task.ErrDeferred once f is FIREd.
func (b *broadcaster[W]) route(f *protocol.Fire, i int) error {
	r := b.r
	r.mu.Lock()
	defer r.mu.Unlock()
	targets := b.targets[taskKey{f.Namespace, f.TaskID}]
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
