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

// TestSubmitHandsPayloadOver: the payloads of a decoded SUBMIT_BATCH (each its own copy,
// sharing nothing with the frame) enter the engine as they are (Engine.SubmitOwned), not
// copied a second time; and the frame's buffer, overwritten after the decode as a
// connection's reused buffer is, changes none of them.
func TestSubmitHandsPayloadOver(t *testing.T) {
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
