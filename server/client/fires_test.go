package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// TestWorkerAsksForFires: a Worker's SUBSCRIBE asks for FIRES of as many runs as it has
// credits (Concurrency), within protocol.MaxFiresRuns, or of Options.BatchFires; a
// negative BatchFires asks for none (FIRE frames only).
func TestWorkerAsksForFires(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want uint64
	}{
		{[]Option{WithConcurrency(8)}, 8},
		{[]Option{WithConcurrency(5000)}, protocol.MaxFiresRuns},
		{[]Option{WithConcurrency(8), WithBatchFires(3)}, 3},
		{[]Option{WithConcurrency(8), WithBatchFires(-1)}, 0},
	} {
		f := startFake(t, "127.0.0.1:0")
		fw := runOnFake(t, f, newWorkerT(t, f.ln.Addr().String(), tc.opts...), func(context.Context, *Fire) error { return nil })
		if fw.sub.BatchFires != tc.want {
			t.Errorf("SUBSCRIBE batch_fires %d, want %d (credits %d)", fw.sub.BatchFires, tc.want, fw.sub.Credits)
		}
	}
}

// TestWorkerRunsEveryRunOfAFires: each run of a FIRES is handed to the handler once, as
// its FIRE would have been, and acknowledged.
func TestWorkerRunsEveryRunOfAFires(t *testing.T) {
	const n = 8
	f := startFake(t, "127.0.0.1:0")
	var mu sync.Mutex
	seen := map[uint64]Fire{}
	fw := runOnFake(t, f, newWorkerT(t, f.ln.Addr().String(), WithConcurrency(n)), func(_ context.Context, fi *Fire) error {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := seen[fi.RunID]; dup {
			t.Errorf("run %d handled twice", fi.RunID)
		}
		seen[fi.RunID] = *fi
		return nil
	})
	m := &protocol.Fires{Runs: make([]protocol.Fire, n)}
	for i := range m.Runs {
		m.Runs[i] = protocol.Fire{Namespace: "default", TaskID: fmt.Sprint("t", i), TaskType: "w", Payload: []byte(fmt.Sprint("p", i)),
			RunID: uint64(100 + i), Attempt: 1, Due: int64(i), Epoch: 3, TTR: int64(tockdtest.Limit), Durability: protocol.Ephemeral, Version: 9}
	}
	fw.f.send(fw.nc, m)
	var acked []uint64
	for len(acked) < n {
		a, ok := fw.next().(*protocol.Acks)
		if !ok || a.Epoch != 3 {
			t.Fatalf("want ACKS at epoch 3, got %+v", a)
		}
		acked = append(acked, a.RunIDs...)
		fw.f.send(fw.nc, &protocol.Acked{ID: a.ID})
	}
	slices.Sort(acked)
	mu.Lock()
	defer mu.Unlock()
	for i, r := range m.Runs {
		got, ok := seen[r.RunID]
		if !ok || acked[i] != r.RunID || got.TaskID != r.TaskID || string(got.Payload) != string(r.Payload) || got.Type != "w" ||
			got.Epoch != 3 || got.Version != 9 || !got.Due.Equal(time.Unix(0, r.Due)) || got.TTR != tockdtest.Limit {
			t.Fatalf("run %d: handled %+v (acked %v)", r.RunID, got, acked)
		}
	}
}

// TestFiresReadWithoutAllocationPerRun: the reader decodes a FIRES and makes the jobs
// of its runs for the runners (Worker.jobsOf) with the same allocations for 10 runs as
// for 1000: the frame's 3 (the message, its runs, the buffer of their IDs and payloads),
// one slice of Fires and one of the jobs' runs; with a HandlerFunc and a batch handler.
func TestFiresReadWithoutAllocationPerRun(t *testing.T) {
	w := newWorkerT(t, "127.0.0.1:1")
	if err := w.Handle("email", func(context.Context, *Fire) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := w.HandleBatch("batch", func(context.Context, []*Fire, []error) {}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{10, protocol.MaxFiresRuns} {
		m := &protocol.Fires{Runs: make([]protocol.Fire, n)}
		for i := range m.Runs {
			m.Runs[i] = protocol.Fire{Namespace: "default", TaskID: fmt.Sprint("order-", i), TaskType: []string{"email", "batch"}[i/(n/2)], Payload: make([]byte, 64),
				RunID: uint64(1 + i), Attempt: 1, Due: 1, Epoch: 7, TTR: 1, Durability: protocol.Ephemeral}
		}
		frame, err := protocol.AppendFrame(nil, m, protocol.MaxFrameLimit)
		if err != nil {
			t.Fatal(err)
		}
		c := &conn{dec: protocol.NewDecoder(protocol.MaxFrameLimit)}
		var handed, jobs int
		c.onFires = func(runs []protocol.Fire) {
			w.jobsOf(runs, func(job []*Fire) { handed, jobs = handed+len(job), jobs+1 })
		}
		if allocs := testing.AllocsPerRun(20, func() {
			c.dec.Feed(frame)
			if err := c.drain(); err != nil {
				t.Fatal(err)
			}
		}); allocs != 5 {
			t.Errorf("a FIRES of %d runs: %v allocations, want 5", n, allocs)
		}
		// Each email run is a job of its own; the batch runs, all in a row, are one.
		if handed != 21*n || jobs != 21*(n/2+1) {
			t.Fatalf("%d runs handed over in %d jobs, want %d in %d", handed, jobs, 21*n, 21*(n/2+1))
		}
	}
}

// TestMalformedFiresClosesTheConnection: a FIRES with no runs, which the encoder
// refuses to write, ends the connection that reads one with an error naming the field.
func TestMalformedFiresClosesTheConnection(t *testing.T) {
	if _, err := protocol.AppendFrame(nil, &protocol.Fires{}, 0); !errors.Is(err, protocol.ErrBadField) {
		t.Fatalf("an empty FIRES encoded: %v", err)
	}
	body := []byte("\x83\xa1t\x38\xa2id\x00\xa4runs\x90") // {"t": 56, "id": 0, "runs": []}
	c := &conn{dec: protocol.NewDecoder(0), onFires: func([]protocol.Fire) { t.Error("an empty FIRES handed over") }}
	c.dec.Feed(append([]byte{0, 0, 0, byte(len(body))}, body...))
	err := c.drain()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeBadField || pe.Field != "runs" || !strings.Contains(err.Error(), "malformed frame from server") {
		t.Fatalf("drain: %v, want a malformed frame, BAD_FIELD runs", err)
	}
}
