package tockd

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// The FIRES wire tests: a worker that asks for FIRES (SUBSCRIBE batch_fires) gets the
// runs ready together in one frame, bounded by its ask, the server's MaxFiresRuns and
// MaxFrame; an old worker gets FIRE; credits bound the runs either way. The runs are
// made to wait before the worker subscribes, so that the SUBSCRIBE fires them all in one
// router call: what leaves together is then fixed, not a matter of timing. The
// heartbeat is an hour so that no beat wakes the writer in the middle.

// subscribedAfterRuns starts a server for opts (its heartbeat an hour), submits n work
// tasks due now (with payloads of payload bytes, if not 0) before any worker subscribes,
// waits until they all wait for one, then subscribes a worker to type "w" with credits,
// asking for FIRES of batch runs (0: FIRE only), and reads every push sent up to a
// PING's answer.
func subscribedAfterRuns(t *testing.T, opts Options, n, payload int, credits, batch uint64) (*client, *wkr) {
	t.Helper()
	opts.Heartbeat = time.Hour
	ts := startServer(t, opts)
	c := connect(t, ts.addr)
	for i := range n {
		w := workTask(fmt.Sprintf("r%03d", i), 1)
		if payload > 0 {
			w.Payload = make([]byte, payload)
		}
		submit(t, c, uint64(2+i), w)
	}
	if !waitUntil(func() bool { return ts.srv.router.waitingLen() == n }) {
		t.Fatalf("%d runs waiting, want %d", ts.srv.router.waitingLen(), n)
	}
	w := dialWorker(t, ts.addr, "worker")
	wantOK(t, w.req(&protocol.Subscribe{Types: []string{"w"}, Credits: credits, BatchFires: batch}))
	w.drain()
	return c, w
}

// takeRuns returns the task IDs of the runs w has read and forgets them, failing t on a
// run twice.
func (w *wkr) takeRuns() (ids []string, runs []uint64) {
	w.t.Helper()
	for _, f := range w.fires {
		if slices.Contains(ids, f.TaskID) {
			w.t.Fatalf("task %s fired twice", f.TaskID)
		}
		ids, runs = append(ids, f.TaskID), append(runs, f.RunID)
	}
	w.fires = nil
	return ids, runs
}

// TestBatchingWorkerGetsOneFires: 50 runs that wait for a worker go, when a worker that
// asked for FIRES subscribes, in one FIRES frame, each run as its FIRE would have been;
// an ACKS ends them all.
func TestBatchingWorkerGetsOneFires(t *testing.T) {
	const n = 50
	c, w := subscribedAfterRuns(t, Options{}, n, 0, n, 100)
	if w.fireFrames != 0 || !slices.Equal(w.firesRuns, []int{n}) {
		t.Fatalf("got %d FIRE frames and FIRES of %v runs; want one FIRES of %d", w.fireFrames, w.firesRuns, n)
	}
	for _, f := range w.fires {
		if f.ID != 0 || f.TaskType != "w" || string(f.Payload) != "p-"+f.TaskID || f.Attempt != 1 || f.Epoch != 0 ||
			f.TTR != int64(DefaultTTR) || f.Namespace != task.DefaultNamespace || f.Durability != protocol.Ephemeral || f.Due == 0 || f.RunID == 0 {
			t.Fatalf("run %+v", f)
		}
	}
	ids, runs := w.takeRuns()
	if len(ids) != n {
		t.Fatalf("%d runs, want %d", len(ids), n)
	}
	if r, ok := w.req(&protocol.Acks{RunIDs: runs}).(*protocol.Acked); !ok || len(r.Failed) != 0 {
		t.Fatalf("ACKS answered %+v, want ACKED with no failures", r)
	}
	c.waitState(1000, ids[0], task.Succeeded)
	c.waitState(1001, ids[n-1], task.Succeeded)
	st, ok := c.call(&protocol.Stats{ID: 1002}).(*protocol.StatsReply)
	if !ok || st.Counters["fired"] != n || st.Counters["fires_frames"] != 1 {
		t.Fatalf("STATS %+v: want fired %d, fires_frames 1", st, n)
	}
}

// TestOldWorkerGetsFire: a worker that does not ask for FIRES gets the same runs as
// one FIRE frame each.
func TestOldWorkerGetsFire(t *testing.T) {
	const n = 20
	_, w := subscribedAfterRuns(t, Options{}, n, 0, n, 0)
	if ids, _ := w.takeRuns(); w.fireFrames != n || len(w.firesRuns) != 0 || len(ids) != n {
		t.Fatalf("got %d FIRE frames and FIRES of %v runs (%d runs); want %d FIRE frames", w.fireFrames, w.firesRuns, len(ids), n)
	}
}

// TestFiresRunsPerFrame: a FIRES holds at most the runs the worker asked for, at most
// the server's MaxFiresRuns, and no more bytes than MaxFrame; the runs beyond go in the
// next frames, none lost, none twice, and a last run alone goes as a FIRE.
func TestFiresRunsPerFrame(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		batch   uint64
		payload int
		want    []int // runs in each FIRES
		fire    int   // FIRE frames
	}{
		{"the worker's ask", Options{}, 4, 0, []int{4, 4, 2}, 0},
		{"the server's bound", Options{MaxFiresRuns: 3}, 100, 0, []int{3, 3, 3}, 1},
		// A run takes at most 3000 + 340 bytes (replyCost): 4 fit in 16 KiB, not 5.
		{"the frame size", Options{MaxFrame: 16 << 10}, 100, 3000, []int{4, 4, 2}, 0},
		// Two runs of 9000 bytes do not fit 16 KiB: each goes alone, as a FIRE.
		{"a run too large to share", Options{MaxFrame: 16 << 10}, 100, 9000, nil, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, w := subscribedAfterRuns(t, tc.opts, 10, tc.payload, 10, tc.batch)
			if ids, _ := w.takeRuns(); w.fireFrames != tc.fire || !slices.Equal(w.firesRuns, tc.want) || len(ids) != 10 {
				t.Fatalf("got %d FIRE frames and FIRES of %v runs (%d runs); want %d and %v", w.fireFrames, w.firesRuns, len(ids), tc.fire, tc.want)
			}
			maxFrame := cmp.Or(tc.opts.MaxFrame, DefaultMaxFrame)
			for i, n := range w.firesBytes {
				if n > maxFrame {
					t.Fatalf("FIRES %d is %d bytes, over MaxFrame %d", i, n, maxFrame)
				}
			}
		})
	}
}

// TestFiresNeverExceedCredits: a worker with 3 credits and 10 runs waiting gets 3 runs,
// then 3 more for each 3 credits its ACKS grants back, then the last one: never more
// runs outstanding than credits.
func TestFiresNeverExceedCredits(t *testing.T) {
	_, w := subscribedAfterRuns(t, Options{}, 10, 0, 3, 100)
	var all []string
	for _, want := range []int{3, 3, 3, 1, 0} {
		ids, runs := w.takeRuns()
		if len(ids) != want {
			t.Fatalf("after %d runs: %d more fired, want %d (runs per FIRES %v)", len(all), len(ids), want, w.firesRuns)
		}
		all = append(all, ids...)
		if want == 0 {
			break
		}
		if r, ok := w.req(&protocol.Acks{RunIDs: runs, Credits: 3}).(*protocol.Acked); !ok || len(r.Failed) != 0 {
			t.Fatalf("ACKS answered %+v, want ACKED with no failures", r)
		}
		w.drain()
	}
	if slices.Sort(all); len(slices.Compact(all)) != 10 {
		t.Fatalf("runs of %v, want 10 distinct tasks", all)
	}
}

// TestWorkerMaySendNoFires: FIRES is the server's; a worker that sends one is answered
// UNEXPECTED, and its connection stays open.
func TestWorkerMaySendNoFires(t *testing.T) {
	ts := startServer(t, Options{})
	w := connectWorker(t, ts.addr, 1, "w")
	e := wantError(t, w.req(&protocol.Fires{Runs: []protocol.Fire{{Namespace: "default", TaskID: "a", TaskType: "w", RunID: 1,
		Attempt: 1, Durability: protocol.Ephemeral}}}), protocol.CodeUnexpected, "")
	if e.Message != "FIRES is sent by the server, never to it" {
		t.Fatalf("UNEXPECTED says %q", e.Message)
	}
	w.drain()
}
