package tockd

import (
	"sync/atomic"

	"github.com/tock-sched/tock/server/protocol"
)

// fireBatch is a worker connection's runs on their way out as FIRES frames (PROTOCOL.md,
// FIRES), when its SUBSCRIBE asked for them (batch_fires): the router pushes runs (push),
// each spending its credit as a FIRE's would, and flushes them once its call has fired
// all it will (flush); the writer takes whatever is pushed each time it wakes
// (appendFires) and writes it as frames of at most perFrame runs and MaxFrame bytes. It
// never waits for more runs than it finds: what leaves together is what the router fired
// in one call (the runs a credit or a SUBSCRIBE let go) and what was fired while the
// writer's last Write was under way.
//
// Invariants:
//   - runs holds the runs pushed and not yet taken by the writer, in the order pushed;
//     each is counted in conn.queued (replyCost) from its push until the Write of the
//     frame that carries it, as a FIRE on conn.out is.
//   - Once perFrame > 0 no run of the connection goes on conn.out: a run goes out with
//     the frame it was pushed for, or, if perFrame fell to 0 meanwhile, as a FIRE by
//     the same writer (the reader signals ready when it does, so none waits).
//   - Every frame appendFires writes holds 1 to perFrame runs and at most MaxFrame
//     bytes: a run too large to share one goes alone, as a FIRE (appendReply).
//
// Locking: runs is guarded by conn.outMu; perFrame is atomic (set by the reader, read by
// push and the writer); spare and frame are owned by the writer.
//
// Memory: runs holds at most MaxQueuedReplyBytes of runs (reserve); spare and frame.Runs
// keep their capacity for the connection's life: a pointer and a protocol.Fire (136
// bytes) for each run of the largest batch the writer took, cleared after each frame so
// that no payload is held.
type fireBatch struct {
	runs     []*protocol.Fire
	ready    chan struct{} // signalled, without blocking, by flush: wakes the writer
	perFrame atomic.Int64  // runs per FIRES: the worker's batch_fires within MaxFiresRuns; 0: FIRE only
	spare    []*protocol.Fire
	frame    protocol.Fires
}

// costFires bounds the bytes of a FIRES frame besides its runs: the frame's prefix, map
// header and envelope, the "runs" key and the array header. Each run is bounded by its
// replyCost as a FIRE, which counts a frame and an envelope of its own besides.
const costFires = costFrame + costKeyValue

// setBatchFires records the runs per FIRES that c's SUBSCRIBE asked for (0: none),
// within Options.MaxFiresRuns. Reader only, before the SUBSCRIBE reaches the router.
func (c *conn) setBatchFires(asked uint64) {
	per := int64(min(asked, uint64(c.s.opts.MaxFiresRuns)))
	if c.fires.perFrame.Swap(per) > 0 && per == 0 {
		c.wakeForFires() // runs pushed for FIRES still wait: they go as FIREs
	}
}

// flush lets the runs pushed on c since the last flush go (workerConn): it wakes the
// writer, if c batches (without FIRES, each push woke it already).
func (c *conn) flush() {
	if c.fires.perFrame.Load() > 0 {
		c.wakeForFires()
	}
}

func (c *conn) wakeForFires() {
	select {
	case c.fires.ready <- struct{}{}:
	default: // already signalled
	}
}

// appendFires appends the runs pushed for FIRES and not yet taken, in the order pushed,
// as frames of at most perFrame runs and MaxFrame bytes (a frame of one run is a FIRE).
// Writer only. Cost: O(runs), the runs copied once into the reused frame; no allocation
// once frame and spare have grown to the largest batch.
func (c *conn) appendFires(buf []byte) []byte {
	q := &c.fires
	c.outMu.Lock()
	runs := q.runs
	q.runs = q.spare[:0]
	c.outMu.Unlock()
	per := max(int(q.perFrame.Load()), 1)
	for i := 0; i < len(runs); {
		n, size := 0, costFires
		for i+n < len(runs) && n < per {
			cost := replyCost(runs[i+n])
			if n > 0 && size+cost > c.s.opts.MaxFrame {
				break
			}
			size += cost
			n++
		}
		buf = c.appendRuns(buf, runs[i:i+n])
		i += n
	}
	clear(runs) // the runs' payloads are not kept for the connection's life
	q.spare = runs[:0]
	return buf
}

// appendRuns appends runs as one frame: a FIRE for one run, else a FIRES. Writer only.
func (c *conn) appendRuns(buf []byte, runs []*protocol.Fire) []byte {
	if len(runs) == 1 {
		return c.appendReply(buf, runs[0])
	}
	q := &c.fires
	q.frame.Runs = q.frame.Runs[:0]
	for _, f := range runs {
		q.frame.Runs = append(q.frame.Runs, *f)
	}
	out, err := protocol.AppendFrame(buf, &q.frame, c.s.opts.MaxFrame)
	clear(q.frame.Runs)
	if err != nil {
		// The runs' replyCost bounds the frame, so only a bug gets here: send them alone.
		c.s.log.Error("tockd: FIRES cannot be encoded; sending its runs as FIREs", "remote", c.nc.RemoteAddr(), "runs", len(runs), "err", err)
		for _, f := range runs {
			buf = c.appendReply(buf, f)
		}
		return buf
	}
	for _, f := range runs {
		c.wcost += int64(replyCost(f)) // released once buf is written, as appendReply's
	}
	c.s.conns.firesFrames.Add(1)
	return out
}
