package tockd

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// unserved is a Server over an engine of its own, never served: its requests are called
// directly with decoded messages. Cleanup shuts both down.
func unserved(t *testing.T) (*Server, *task.Engine) {
	t.Helper()
	eng, err := task.New()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(WithEngine(eng), WithHeartbeat(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = eng.Close(ctx)
	})
	return srv, eng
}

// TestSubmitHandsPayloadOver: the payloads of a decoded SUBMIT_BATCH (each its own copy,
// sharing nothing with the frame) enter the engine as they are (Engine.SubmitOwned), not
// copied a second time; and the frame's buffer, overwritten after the decode as a
// connection's reused buffer is, changes none of them.
func TestSubmitHandsPayloadOver(t *testing.T) {
	srv, eng := unserved(t)
	batch := &protocol.SubmitBatch{ID: 1}
	for i := range 4 {
		w := workTask(fmt.Sprintf("t%d", i), 1)
		w.Schedule = protocol.Schedule{Kind: task.KindAfter, Delay: int64(time.Hour)} // never fired here
		batch.Tasks = append(batch.Tasks, w)
	}
	frame, err := protocol.AppendFrame(nil, batch, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := protocol.Decode(frame[4:]) // the body, after the length prefix
	if err != nil {
		t.Fatal(err)
	}
	clear(frame)
	decoded := m.(*protocol.SubmitBatch)
	r, _ := srv.requests.serve(nil, decoded)
	if res, ok := r.(*protocol.BatchResult); !ok || len(res.Results) != len(batch.Tasks) {
		t.Fatalf("SUBMIT_BATCH answered %+v", r)
	}
	for i, w := range decoded.Tasks {
		in, err := eng.Get(task.DefaultNamespace, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := batch.Tasks[i].Payload
		if !bytes.Equal(in.Task.Payload, want) {
			t.Errorf("task %s: the engine holds payload %q, want %q", w.ID, in.Task.Payload, want)
		}
		if &in.Task.Payload[0] != &w.Payload[0] {
			t.Errorf("task %s: the engine holds its payload at %p, the decoder's copy is at %p: copied twice", w.ID, &in.Task.Payload[0], &w.Payload[0])
		}
	}
}

// TestSubmitBatchReusesItsScratch: a SUBMIT_BATCH's per-task state (a prepared, 480
// bytes with pointers, for each task) comes from a pool, not a fresh slice a request,
// which was a third of the bytes tockd allocated in a loadgen run. Its tasks are durable
// on a server without a store, so each is refused: the reply and its results allocate,
// and per task the *protocol.Error and the target errors.As reads it into.
func TestSubmitBatchReusesItsScratch(t *testing.T) {
	srv, _ := unserved(t)
	batch := &protocol.SubmitBatch{ID: 1}
	for i := range 100 {
		w := workTask(fmt.Sprintf("t%d", i), 1)
		w.Durability = protocol.Durable
		batch.Tasks = append(batch.Tasks, w)
	}
	serve := func() {
		r, _ := srv.requests.serve(nil, batch)
		if res, ok := r.(*protocol.BatchResult); !ok || len(res.Results) != len(batch.Tasks) || res.Results[0].Code != protocol.CodeInvalidTask {
			t.Fatalf("SUBMIT_BATCH answered %+v", r)
		}
	}
	serve() // warm: the pool
	want := float64(2 + 2*len(batch.Tasks))
	if n := testing.AllocsPerRun(50, serve); n != want {
		t.Errorf("SUBMIT_BATCH of %d refused tasks: %v allocs, want %v (the reply, its results, two a refused task)", len(batch.Tasks), n, want)
	}
}
