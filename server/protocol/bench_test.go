package protocol

import (
	"strconv"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
)

var benchFire = &Fire{Namespace: "default", TaskID: "order-123456", TaskType: "email", Payload: make([]byte, 64),
	RunID: 1 << 40, Attempt: 1, Due: 1_767_225_600_000_000_000, Epoch: 7, TTR: int64(30 * time.Second), Durability: Ephemeral}

// benchFires is what a worker that opted in receives under load: benchFire's run 100
// times in one frame, each with its own task ID and run ID.
var benchFires = func() *Fires {
	m := &Fires{Runs: make([]Fire, 100)}
	for i := range m.Runs {
		m.Runs[i] = *benchFire
		m.Runs[i].TaskID = "order-" + strconv.Itoa(100_000+i)
		m.Runs[i].RunID += uint64(i)
	}
	return m
}()

// benchTracedFire and benchTracedFires are benchFire and benchFires with a trace
// context on every run: what a traced task's runs cost.
var (
	benchTracedFire  = traced(*benchFire)
	benchTracedFires = func() *Fires {
		m := &Fires{Runs: make([]Fire, len(benchFires.Runs))}
		for i, r := range benchFires.Runs {
			m.Runs[i] = *traced(r)
		}
		return m
	}()
)

func traced(f Fire) *Fire {
	f.Traceparent, f.Tracestate = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE"
	return &f
}

var benchAck = &Ack{ID: 1 << 20, RunID: 1 << 40, Epoch: 7}

// benchBatch is what a load generator submits: 100 one-shot tasks with a 64-byte payload,
// a due time and a retry policy.
var benchBatch = func() *SubmitBatch {
	m := &SubmitBatch{ID: 1 << 20, Tasks: make([]Task, 100)}
	for i := range m.Tasks {
		m.Tasks[i] = Task{ID: "run-1a2b-" + strconv.Itoa(100_000+i), Type: "load", Payload: make([]byte, 64),
			Schedule: Schedule{Kind: task.KindAt, At: 1_767_225_600_000_000_000 + int64(i)},
			Retry:    Retry{MaxAttempts: 3, InitialBackoff: int64(time.Second)}, Durability: Ephemeral}
	}
	return m
}()

// benchResults is the server's answer to benchBatch: 99 tasks scheduled, one refused.
var benchResults = func() *BatchResult {
	m := &BatchResult{ID: 1 << 20, Results: make([]ItemResult, len(benchBatch.Tasks))}
	for i, t := range benchBatch.Tasks {
		m.Results[i] = ItemResult{ID: t.ID, Durability: t.Durability, State: task.Pending, NextRun: t.Schedule.At, Version: 1}
	}
	m.Results[50] = ItemResult{ID: benchBatch.Tasks[50].ID, Durability: Ephemeral, Code: CodeExists, Message: "task exists", Field: "tid"}
	return m
}()

// benchEncode appends m as a frame into a reused buffer, b.N times.
func benchEncode(b *testing.B, m Message) {
	buf := make([]byte, 0, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendFrame(buf[:0], m, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// benchDecode feeds m's frame through one Decoder and decodes it, b.N times: what a
// connection's reader does with each frame.
func benchDecode(b *testing.B, m Message) {
	frame, err := AppendFrame(nil, m, 0)
	if err != nil {
		b.Fatal(err)
	}
	d := NewDecoder(0)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		d.Feed(frame)
		if m, err := d.Next(); err != nil || m == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeFire: the server's hot path out, a FIRE into a reused buffer.
func BenchmarkEncodeFire(b *testing.B) { benchEncode(b, benchFire) }

// BenchmarkEncodeAck: the worker's hot path out.
func BenchmarkEncodeAck(b *testing.B) { benchEncode(b, benchAck) }

// BenchmarkEncodeSubmitBatch: a producer's hot path out, 100 tasks in one frame.
func BenchmarkEncodeSubmitBatch(b *testing.B) { benchEncode(b, benchBatch) }

// BenchmarkDecodeSubmitBatch: the server's hot path in from producers (100 tasks: their
// strings, payloads and the slice allocated).
func BenchmarkDecodeSubmitBatch(b *testing.B) { benchDecode(b, benchBatch) }

// BenchmarkEncodeBatchResult: the server's answer to each SUBMIT_BATCH.
func BenchmarkEncodeBatchResult(b *testing.B) { benchEncode(b, benchResults) }

// BenchmarkDecodeBatchResult: a producer reading that answer.
func BenchmarkDecodeBatchResult(b *testing.B) { benchDecode(b, benchResults) }

// BenchmarkDecodeAck: the server's hot path in.
func BenchmarkDecodeAck(b *testing.B) { benchDecode(b, benchAck) }

// BenchmarkDecodeFire: the worker's hot path in (payload copied, strings allocated).
func BenchmarkDecodeFire(b *testing.B) { benchDecode(b, benchFire) }

// BenchmarkEncodeFires: the server's hot path out to a worker that opted in, 100 runs in
// one FIRES; ns/run compares with BenchmarkEncodeFire's ns/op.
func BenchmarkEncodeFires(b *testing.B) {
	benchEncode(b, benchFires)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(benchFires.Runs)), "ns/run")
}

// BenchmarkDecodeFires: the worker's hot path in, 100 runs in one FIRES (one slice and
// one buffer for all their task IDs and payloads); ns/run compares with
// BenchmarkDecodeFire's ns/op.
func BenchmarkDecodeFires(b *testing.B) {
	benchDecode(b, benchFires)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(benchFires.Runs)), "ns/run")
}

// TestHotPathAllocs pins the allocation counts the benchmarks report.
func TestHotPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race")
	}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(1000, func() { buf, _ = AppendFrame(buf[:0], benchFire, 0) }); n != 0 {
		t.Errorf("encoding FIRE: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { buf, _ = AppendFrame(buf[:0], benchTracedFire, 0) }); n != 0 {
		t.Errorf("encoding a traced FIRE: %v allocs, want 0", n)
	}
	buf = make([]byte, 0, 32<<10)
	if n := testing.AllocsPerRun(1000, func() { buf, _ = AppendFrame(buf[:0], benchFires, 0) }); n != 0 {
		t.Errorf("encoding FIRES of %d runs: %v allocs, want 0", len(benchFires.Runs), n)
	}
	if n := testing.AllocsPerRun(1000, func() { buf, _ = AppendFrame(buf[:0], benchTracedFires, 0) }); n != 0 {
		t.Errorf("encoding traced FIRES of %d runs: %v allocs, want 0", len(benchTracedFires.Runs), n)
	}
	status := &TaskStatus{ID: 1, Namespace: "default", TaskID: "order-1", Durability: Ephemeral, State: task.Pending, NextRun: 1, Version: 1}
	for _, tc := range []struct {
		m    Message
		want float64
		what string
	}{
		{benchAck, 1, "the *Ack"},
		{benchFire, 3, "the *Fire, its ID and payload; namespace and type interned"},
		{benchFires, 3, "the *Fires, its runs' slice and one buffer for every run's ID and payload: none per run"},
		{benchTracedFire, 5, "a FIRE's 3, and its traceparent and tracestate"},
		{benchTracedFires, 3, "the *Fires, its runs' slice and one buffer, which holds the trace contexts too"},
		{status, 2, "the *TaskStatus and its ID; the state parsed in place"},
		{benchBatch, float64(2 + len(benchBatch.Tasks)), "the message, its slice, and one buffer a task for its ID and payload"},
	} {
		frame, _ := AppendFrame(nil, tc.m, 0)
		d := NewDecoder(0)
		if n := testing.AllocsPerRun(100, func() { d.Feed(frame); _, _ = d.Next() }); n != tc.want {
			t.Errorf("decoding %v: %v allocs, want %v (%s)", tc.m.Type(), n, tc.want, tc.what)
		}
	}
}
