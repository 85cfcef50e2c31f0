package tockd

import (
	"reflect"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// wkr is a raw worker connection that sorts what it reads: FIREs and the runs of FIRES
// (pushes, id 0) are queued for fire, replies are matched to requests by req.
type wkr struct {
	*client
	fires []*protocol.Fire
	id    uint64
	// fireFrames counts the FIRE frames read; firesRuns lists the runs of each FIRES
	// read, in order.
	fireFrames int
	firesRuns  []int
	firesBytes []int // the body length of each FIRES read
}

// push queues the runs of m and reports whether it was a push (FIRE or FIRES).
func (w *wkr) push(m protocol.Message) bool {
	switch m := m.(type) {
	case *protocol.Fire:
		w.fireFrames++
		w.fires = append(w.fires, m)
	case *protocol.Fires:
		w.firesRuns = append(w.firesRuns, len(m.Runs))
		b, err := protocol.AppendFrame(nil, m, protocol.MaxFrameLimit) // the bytes that came: encoding is deterministic
		if err != nil {
			w.t.Fatalf("FIRES does not encode again: %v", err)
		}
		w.firesBytes = append(w.firesBytes, len(b)-4)
		for i := range m.Runs {
			w.fires = append(w.fires, &m.Runs[i])
		}
	default:
		return false
	}
	return true
}

// dialWorker connects as a worker named name (key hashing weighs by name), not yet
// subscribed: what a worker that hands in outcomes (CARRY) first does.
func dialWorker(t *testing.T, addr, name string) *wkr {
	t.Helper()
	return &wkr{client: connectAs(t, addr, protocol.RoleWorker, name), id: 1}
}

// connectNamedWorker connects as a worker named name and subscribes to types with
// credits.
func connectNamedWorker(t *testing.T, addr, name string, credits uint64, types ...string) *wkr {
	t.Helper()
	w := dialWorker(t, addr, name)
	if r := w.req(&protocol.Subscribe{Types: types, Credits: credits}); r.Type() != protocol.TypeOK {
		t.Fatalf("SUBSCRIBE answered %v %+v", r.Type(), r)
	}
	return w
}

// connectWorker is connectNamedWorker as "worker".
func connectWorker(t *testing.T, addr string, credits uint64, types ...string) *wkr {
	t.Helper()
	return connectNamedWorker(t, addr, "worker", credits, types...)
}

// startWithWorker starts a server for opts with a worker of type "w" holding credits,
// and then a client.
func startWithWorker(t *testing.T, opts Options, credits uint64) (*testServer, *client, *wkr) {
	t.Helper()
	ts := startServer(t, opts)
	w := connectWorker(t, ts.addr, credits, "w")
	return ts, connect(t, ts.addr), w
}

// startFired is startWithWorker with tk submitted (request ID 2) and its first FIRE taken.
func startFired(t *testing.T, opts Options, credits uint64, tk protocol.Task) (*testServer, *client, *wkr, *protocol.Fire) {
	t.Helper()
	ts, c, w := startWithWorker(t, opts, credits)
	submit(t, c, 2, tk)
	return ts, c, w, w.fire()
}

// req sends m with a fresh request ID and returns its reply, queueing FIREs read meanwhile.
func (w *wkr) req(m protocol.Message) protocol.Message {
	w.t.Helper()
	w.id++
	// Every request type has its ID in a field of that name; the messages have no setter.
	id := reflect.ValueOf(m).Elem().FieldByName("ID")
	if !id.IsValid() || id.Kind() != reflect.Uint64 {
		w.t.Fatalf("req: %v has no request ID", m.Type())
	}
	id.SetUint(w.id)
	w.send(m)
	for {
		r := w.recv()
		if w.push(r) {
			continue
		}
		if r.RequestID() != w.id {
			w.t.Fatalf("%v reply has id %d, want %d", r.Type(), r.RequestID(), w.id)
		}
		return r
	}
}

// fire returns the next run (of a FIRE or a FIRES); only pushes may arrive meanwhile.
func (w *wkr) fire() *protocol.Fire {
	w.t.Helper()
	if len(w.fires) == 0 {
		if r := w.recv(); !w.push(r) {
			w.t.Fatalf("got %v %+v, want FIRE", r.Type(), r)
		}
	}
	f := w.fires[0]
	w.fires = w.fires[1:]
	return f
}

// drain sends a PING and reads up to its PONG: every FIRE the server sent before it is
// then in w.fires.
func (w *wkr) drain() {
	w.t.Helper()
	if r := w.req(&protocol.Ping{}); r.Type() != protocol.TypePong {
		w.t.Fatalf("PING answered %v", r.Type())
	}
}

// ack sends an ACK of runID at epoch 0 (a node without a store) and returns the reply.
func (w *wkr) ack(runID uint64) protocol.Message {
	w.t.Helper()
	return w.req(&protocol.Ack{RunID: runID})
}

func wantOK(t *testing.T, r protocol.Message) {
	t.Helper()
	if r.Type() != protocol.TypeOK {
		t.Fatalf("got %v %+v, want OK", r.Type(), r)
	}
}

// workTask is an ephemeral task of type "w" due now, retried quickly.
func workTask(id string, attempts uint64) protocol.Task {
	return protocol.Task{ID: id, Type: "w", Durability: protocol.Ephemeral, Payload: []byte("p-" + id),
		Schedule: protocol.Schedule{Kind: task.KindAfter},
		Retry: protocol.Retry{MaxAttempts: attempts, InitialBackoff: int64(10 * time.Millisecond),
			MaxBackoff: int64(10 * time.Millisecond)}}
}

func submit(t *testing.T, c *client, id uint64, w protocol.Task) {
	t.Helper()
	if r := c.call(&protocol.Submit{ID: id, Task: w}); r.Type() != protocol.TypeTaskStatus {
		t.Fatalf("SUBMIT answered %v %+v", r.Type(), r)
	}
}

func TestWorkerAckSucceeds(t *testing.T) {
	_, c, w := startWithWorker(t, Options{}, 10)
	timed := workTask("b", 1)
	timed.Timeout = int64(5 * time.Second)
	submit(t, c, 2, workTask("a", 1))
	submit(t, c, 3, timed)
	seen := map[string]*protocol.Fire{}
	for range 2 {
		f := w.fire()
		seen[f.TaskID] = f
	}
	for tid, ttr := range map[string]time.Duration{"a": DefaultTTR, "b": 5 * time.Second} {
		f := seen[tid]
		if f == nil {
			t.Fatalf("no FIRE for %s", tid)
		}
		if f.TaskType != "w" || string(f.Payload) != "p-"+tid || f.Attempt != 1 || f.Epoch != 0 ||
			f.TTR != int64(ttr) || f.Namespace != task.DefaultNamespace || f.Durability != protocol.Ephemeral || f.Due == 0 || f.RunID == 0 {
			t.Fatalf("FIRE %+v", f)
		}
		wantOK(t, w.ack(f.RunID))
		c.waitState(10, tid, task.Succeeded)
	}
	// A second ACK of the same run is not outstanding any more.
	e := wantError(t, w.ack(seen["a"].RunID), protocol.CodeUnknownRun, "")
	if e.RunID != seen["a"].RunID {
		t.Fatalf("UNKNOWN_RUN names run %d, want %d", e.RunID, seen["a"].RunID)
	}
}

// ACKS acknowledges many runs in one frame, and its ACKED lists exactly the runs an ACK
// of each alone would have refused; a stale epoch refuses the whole frame.
func TestWorkerAcksBatch(t *testing.T) {
	_, c, w := startWithWorker(t, Options{}, 3)
	for i, tid := range []string{"a", "b", "c"} {
		submit(t, c, uint64(2+i), workTask(tid, 1))
	}
	runs := map[string]uint64{}
	for range 3 {
		f := w.fire()
		runs[f.TaskID] = f.RunID
	}
	wantError(t, w.req(&protocol.Acks{RunIDs: []uint64{runs["a"]}, Epoch: 7}), protocol.CodeStaleEpoch, "")

	r := w.req(&protocol.Acks{RunIDs: []uint64{runs["a"], 424242, runs["b"], runs["a"]}})
	acked, ok := r.(*protocol.Acked)
	if !ok {
		t.Fatalf("ACKS answered %v %+v", r.Type(), r)
	}
	// 424242 was never fired; the second runs["a"] was acknowledged by the first.
	if len(acked.Failed) != 2 || acked.Failed[0].RunID != 424242 || acked.Failed[1].RunID != runs["a"] ||
		acked.Failed[0].Code != protocol.CodeUnknownRun || acked.Failed[1].Code != protocol.CodeUnknownRun {
		t.Fatalf("ACKED %+v, want runs 424242 and %d refused as UNKNOWN_RUN", acked, runs["a"])
	}
	c.waitState(10, "a", task.Succeeded)
	c.waitState(11, "b", task.Succeeded)
	if in := c.waitState(12, "c", task.Running); in.Attempts != 1 {
		t.Fatalf("c: %+v", in)
	}
	// Every credit is spent, so "d" waits, until an ACKS grants one back.
	submit(t, c, 13, workTask("d", 1))
	r = w.req(&protocol.Acks{RunIDs: []uint64{runs["c"]}, Credits: 1})
	if acked, ok := r.(*protocol.Acked); !ok || len(acked.Failed) != 0 {
		t.Fatalf("ACKS answered %v %+v, want ACKED with no failures", r.Type(), r)
	}
	c.waitState(14, "c", task.Succeeded)
	if f := w.fire(); f.TaskID != "d" {
		t.Fatalf("FIRE of %q after the credit, want d", f.TaskID)
	}
}

func TestWorkerNackRetryableIsRetried(t *testing.T) {
	_, c, w, f1 := startFired(t, Options{}, 10, workTask("a", 3))
	wantOK(t, w.req(&protocol.Nack{RunID: f1.RunID, Err: "try again", Retryable: true}))
	f2 := w.fire()
	if f2.TaskID != "a" || f2.Attempt != 2 || f2.RunID == f1.RunID {
		t.Fatalf("retry FIRE %+v after %+v", f2, f1)
	}
	wantError(t, w.ack(f1.RunID), protocol.CodeUnknownRun, "")
	wantOK(t, w.ack(f2.RunID))
	in := c.waitState(3, "a", task.Succeeded)
	if len(in.History) != 1 || in.History[0].Err != "try again" {
		t.Fatalf("history %+v", in.History)
	}
}

func TestWorkerNackNonRetryableIsDead(t *testing.T) {
	_, c, w, f := startFired(t, Options{}, 10, workTask("a", 5))
	wantOK(t, w.req(&protocol.Nack{RunID: f.RunID, Err: "bad payload", Retryable: false}))
	in := c.waitState(3, "a", task.Dead)
	if in.Attempts != 1 {
		t.Fatalf("attempts %d, want 1", in.Attempts)
	}
}

func TestWorkerDisconnectRedelivers(t *testing.T) {
	ts, c, a, f1 := startFired(t, Options{}, 1, workTask("x", 3))
	b := connectWorker(t, ts.addr, 1, "w")
	a.nc.Close()
	f2 := b.fire()
	if f2.TaskID != "x" || f2.RunID == f1.RunID || f2.Attempt != 2 || f2.Due == 0 {
		t.Fatalf("redelivered FIRE %+v after %+v", f2, f1)
	}
	wantOK(t, b.ack(f2.RunID))
	c.waitState(3, "x", task.Succeeded)
}

func TestWorkerAckErrors(t *testing.T) {
	ts := startServer(t, Options{})
	w := connectWorker(t, ts.addr, 10, "w")
	e := wantError(t, w.ack(424242), protocol.CodeUnknownRun, "")
	if e.RunID != 424242 {
		t.Fatalf("run %d", e.RunID)
	}
	c := connect(t, ts.addr)
	submit(t, c, 2, workTask("a", 1))
	f := w.fire()
	wantError(t, w.req(&protocol.Ack{RunID: f.RunID, Epoch: 7}), protocol.CodeStaleEpoch, "")
	// Another worker connection cannot ACK this one's run.
	other := connectWorker(t, ts.addr, 0, "other")
	wantError(t, other.ack(f.RunID), protocol.CodeUnknownRun, "")
	wantOK(t, w.ack(f.RunID))
	c.waitState(3, "a", task.Succeeded)
	// A client connection may not act as a worker.
	wantError(t, c.call(&protocol.Ack{ID: 4, RunID: f.RunID}), protocol.CodeUnexpected, "")
}

func TestWorkerCreditsRespected(t *testing.T) {
	_, c, w := startWithWorker(t, Options{}, 1)
	submit(t, c, 2, workTask("a", 1000))
	submit(t, c, 3, workTask("b", 1000))
	f1 := w.fire()
	wantOK(t, w.ack(f1.RunID))
	// ACK returns no credit (PROTOCOL.md): nothing more may have been fired.
	if w.drain(); len(w.fires) != 0 {
		t.Fatalf("with no credit left: fires %+v", w.fires)
	}
	wantOK(t, w.req(&protocol.Credit{Credits: 1}))
	f2 := w.fire()
	if f2.TaskID == f1.TaskID {
		t.Fatalf("both FIREs for %s", f1.TaskID)
	}
	wantOK(t, w.ack(f2.RunID))
	c.waitState(4, "a", task.Succeeded)
	c.waitState(5, "b", task.Succeeded)
}

func TestWorkerTTRTimesOut(t *testing.T) {
	_, c, w, f1 := startFired(t, Options{DefaultTTR: 50 * time.Millisecond, EngineOptions: []task.Option{task.WithWorkers(2)}}, 2, workTask("a", 2))
	if f1.TTR != int64(50*time.Millisecond) {
		t.Fatalf("ttr %v", time.Duration(f1.TTR))
	}
	f2 := w.fire() // no ACK within the TTR: the engine timed it out and retried it
	if f2.Attempt != 2 || f2.RunID == f1.RunID {
		t.Fatalf("FIRE %+v after %+v", f2, f1)
	}
	wantError(t, w.ack(f1.RunID), protocol.CodeUnknownRun, "")
	wantOK(t, w.ack(f2.RunID))
	c.waitState(3, "a", task.Succeeded)
}

func TestPushNeverBlocks(t *testing.T) {
	s := &Server{}
	s.opts.MaxPendingPerConn = 1
	c := s.newConn(nil)
	if !c.push(&protocol.Fire{}) {
		t.Fatal("push to an empty queue failed")
	}
	if c.push(&protocol.Fire{}) {
		t.Fatal("push to a full queue succeeded")
	}
	<-c.out
	c.outClosed = true
	if c.push(&protocol.Fire{}) {
		t.Fatal("push to a closed queue succeeded")
	}
}
