package tockd

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/internal/wiretest"
	"github.com/tock-sched/tock/server/protocol"
)

// BenchmarkFireToWorker: batches of 100 tasks due now, submitted in one SUBMIT_BATCH,
// through a real tockd over loopback TCP to one raw worker that acknowledges each round
// with one ACKS granting the credits back: the server's FIRE path and the worker's
// decoding, with FIRE frames (batch_fires=0, a worker that predates FIRES) and with
// FIRES (batch_fires=100). ns/task is the whole round's time over its tasks; cpu-ns/task
// the process's CPU over its tasks (server and worker together, getrusage: steadier than
// ns/task on a shared machine, where a round waits for a core); runs/frame is how many
// runs a frame carried to the worker.
func BenchmarkFireToWorker(b *testing.B) {
	for _, batch := range []uint64{0, 100} {
		b.Run("batch_fires="+strconv.FormatUint(batch, 10), func(b *testing.B) { benchFireToWorker(b, batch) })
	}
}

func benchFireToWorker(b *testing.B, batch uint64) {
	const round = 100
	eng, err := task.New(task.WithWorkers(2))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(WithEngine(eng), WithHeartbeat(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
		_ = eng.Close(ctx)
	})
	cl := wiretest.Dial(b, ln.Addr().String(), waitBound)
	cl.Hello(helloAs(protocol.RoleClient, "bench"))
	wk := wiretest.Dial(b, ln.Addr().String(), waitBound)
	wk.Hello(helloAs(protocol.RoleWorker, "bench-worker"))
	if r := wk.Call(&protocol.Subscribe{ID: 2, Types: []string{"w"}, Credits: round, BatchFires: batch}); r.Type() != protocol.TypeOK {
		b.Fatalf("SUBSCRIBE answered %v %+v", r.Type(), r)
	}
	tasks := make([]protocol.Task, round)
	runs := make([]uint64, 0, round)
	var frames, id uint64 = 0, 10
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	for i := 0; i < b.N; i++ {
		for j := range tasks {
			tasks[j] = workTask(fmt.Sprintf("b%d-%d", i, j), 1)
		}
		id++
		if r, ok := cl.Call(&protocol.SubmitBatch{ID: id, Tasks: tasks}).(*protocol.BatchResult); !ok || len(r.Results) != round {
			b.Fatalf("SUBMIT_BATCH answered %+v", r)
		}
		runs = runs[:0]
		for len(runs) < round {
			switch m := wk.Recv().(type) {
			case *protocol.Fire:
				runs = append(runs, m.RunID)
			case *protocol.Fires:
				for k := range m.Runs {
					runs = append(runs, m.Runs[k].RunID)
				}
			default:
				b.Fatalf("worker got %v %+v", m.Type(), m)
			}
			frames++
		}
		id++
		if r, ok := wk.Call(&protocol.Acks{ID: id, RunIDs: runs, Credits: round}).(*protocol.Acked); !ok || len(r.Failed) != 0 {
			b.Fatalf("ACKS answered %+v", r)
		}
	}
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N*round), "cpu-ns/task")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*round), "ns/task")
	b.ReportMetric(float64(b.N*round)/float64(frames), "runs/frame")
}
