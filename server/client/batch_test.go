package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// firesOfType is a FIRES of n runs of type typ, run IDs from first.
func firesOfType(typ string, first uint64, n int) *protocol.Fires {
	m := &protocol.Fires{Runs: make([]protocol.Fire, n)}
	for i := range m.Runs {
		run := first + uint64(i)
		m.Runs[i] = protocol.Fire{Namespace: "default", TaskID: fmt.Sprint("t", run), TaskType: typ, RunID: run, Attempt: 1,
			Due: 1, Epoch: 3, TTR: int64(tockdtest.Limit), Durability: protocol.Ephemeral}
	}
	return m
}

// reports reads the Worker's ACKS and NACKs (answering each) until n runs are reported:
// the runs acknowledged, and each NACKed run's error.
func (fw *fakeWorkerConn) reports(n int) (acked map[uint64]bool, nacked map[uint64]string) {
	fw.t.Helper()
	acked, nacked = map[uint64]bool{}, map[uint64]string{}
	for len(acked)+len(nacked) < n {
		switch m := fw.next().(type) {
		case *protocol.Acks:
			for _, r := range m.RunIDs {
				acked[r] = true
			}
			fw.f.send(fw.nc, &protocol.Acked{ID: m.ID})
		case *protocol.Nack:
			nacked[m.RunID] = m.Err
			fw.f.send(fw.nc, &protocol.OK{ID: m.ID})
		default:
			fw.t.Fatalf("got %v %+v, want ACKS or NACK", m.Type(), m)
		}
	}
	return acked, nacked
}

// TestBatchHandlerTakesTheRunsOfAFires: the runs of one FIRES of a type with a batch
// handler reach it in one call, in order, each with its result slot: nil is ACKed, an
// error NACKed, each run reported once.
func TestBatchHandlerTakesTheRunsOfAFires(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	w := newWorkerT(t, f.ln.Addr().String(), WithConcurrency(8))
	var mu sync.Mutex
	var calls [][]uint64
	if err := w.HandleBatch("b", func(_ context.Context, fires []*Fire, results []error) {
		mu.Lock()
		defer mu.Unlock()
		var runs []uint64
		for i, fi := range fires {
			runs = append(runs, fi.RunID)
			if fi.RunID%2 == 1 {
				results[i] = fmt.Errorf("odd run %d", fi.RunID)
			}
		}
		calls = append(calls, runs)
	}); err != nil {
		t.Fatal(err)
	}
	fw := runOnFake(t, f, w, func(context.Context, *Fire) error { return nil }) // type "w"
	if got := fw.sub.Types; len(got) != 2 || got[0] != "b" || got[1] != "w" {
		t.Fatalf("SUBSCRIBE types %v, want [b w]", got)
	}
	fw.f.send(fw.nc, firesOfType("b", 10, 6))
	acked, nacked := fw.reports(6)
	for run := uint64(10); run < 16; run++ {
		if run%2 == 0 && !acked[run] || run%2 == 1 && nacked[run] != fmt.Sprintf("odd run %d", run) {
			t.Fatalf("run %d: acked %v, nacked %q", run, acked[run], nacked[run])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(calls) != "[[10 11 12 13 14 15]]" {
		t.Fatalf("batch handler calls %v, want one with runs 10 to 15", calls)
	}
}

// TestBatchHandlerPanicFailsItsRuns: a batch handler that panics NACKs every run it
// held, retryably, and the Worker goes on.
func TestBatchHandlerPanicFailsItsRuns(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	w := newWorkerT(t, f.ln.Addr().String(), WithConcurrency(4))
	if err := w.HandleBatch("w", func(context.Context, []*Fire, []error) { panic("boom") }); err != nil {
		t.Fatal(err)
	}
	fw := runOnFake(t, f, w, nil)
	fw.f.send(fw.nc, firesOfType("w", 1, 3))
	acked, nacked := fw.reports(3)
	if len(acked) != 0 || len(nacked) != 3 || !strings.Contains(nacked[2], "panicked: boom") {
		t.Fatalf("acked %v, nacked %v; want all 3 NACKed for the panic", acked, nacked)
	}
}

// TestHandleAndHandleBatchReplaceEachOther: the last registration for a type wins,
// whichever kind; a nil batch handler is refused.
func TestHandleAndHandleBatchReplaceEachOther(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	w := newWorkerT(t, f.ln.Addr().String(), WithConcurrency(2))
	if err := w.HandleBatch("w", nil); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("HandleBatch(nil): %v, want ErrInvalidOption", err)
	}
	if err := w.HandleBatch("w", func(context.Context, []*Fire, []error) { t.Error("the replaced batch handler ran") }); err != nil {
		t.Fatal(err)
	}
	ran := make(chan uint64, 1)
	fw := runOnFake(t, f, w, func(_ context.Context, fi *Fire) error { ran <- fi.RunID; return nil })
	fw.fire(7)
	if run := tockdtest.Receive(t, ran, "the per-run handler"); run != 7 {
		t.Fatalf("ran run %d, want 7", run)
	}
	if acked, _ := fw.reports(1); !acked[7] {
		t.Fatalf("run 7 not acknowledged: %v", acked)
	}
}
