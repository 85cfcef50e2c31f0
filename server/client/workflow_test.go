package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// runLog records handlers' starts and ends in the order they happen, by one lock.
type runLog struct {
	mu     sync.Mutex
	events []string // "start:ID", "end:ID"
	runs   map[string]int
}

func (l *runLog) note(kind, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, kind+":"+id)
	if kind == "start" {
		if l.runs == nil {
			l.runs = map[string]int{}
		}
		l.runs[id]++
	}
}

// at returns the index of event ev in the log, -1 when it is not there.
func (l *runLog) at(ev string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, e := range l.events {
		if e == ev {
			return i
		}
	}
	return -1
}

// stepWorker starts a tockd, a client of it, and a Go worker of runners runners whose
// handler of type "step" logs each run's start and end and succeeds.
func stepWorker(t *testing.T, runners int) (*Client, *runLog) {
	t.Helper()
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	w := newWorkerT(t, s.Addr, WithConcurrency(runners))
	log := &runLog{}
	if err := w.Handle("step", func(ctx context.Context, f *Fire) error {
		log.note("start", f.TaskID)
		log.note("end", f.TaskID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	return c, log
}

// step is a workflow task of type "step" with parents.
func step(id string, parents ...string) task.Task {
	t := oneShot(id, "step", 0)
	// With every credit in use the server fails the attempt before any FIRE ("no worker
	// available"): retries cover it, and no handler runs for such an attempt.
	t.Retry = task.RetryPolicy{MaxAttempts: 100, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	if len(parents) > 0 {
		t.DependsOn = &task.Deps{On: parents}
	}
	return t
}

// A batch of 25 diamonds (a -> b, c -> d), children before their parents in the batch,
// runs through a Go worker in order: no child starts before each of its parents' handlers
// has returned, and every task runs once.
func TestWorkflowDiamondsRunInOrder(t *testing.T) {
	c, log := stepWorker(t, 8)
	const n = 25
	var batch []task.Task
	edges := map[string][]string{} // child -> parents
	for i := range n {
		a, b, cc, d := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i), fmt.Sprintf("c%d", i), fmt.Sprintf("d%d", i)
		batch = append(batch, step(d, b, cc), step(b, a), step(cc, a), step(a))
		edges[b], edges[cc], edges[d] = []string{a}, []string{a}, []string{b, cc}
	}
	items, err := c.SubmitBatch(bounded(t), batch, protocol.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		want := task.Waiting
		if batch[i].DependsOn == nil {
			want = task.Pending
		}
		// As accepted (task.Engine.SubmitBatch), whatever ran since.
		if it.Err != nil || it.Status.State != want {
			t.Fatalf("item %d (%s): %+v, want %v", i, batch[i].ID, it, want)
		}
	}
	for i := range n {
		waitState(t, c, fmt.Sprintf("d%d", i), task.Succeeded)
	}
	early := 0
	for child, parents := range edges {
		start := log.at("start:" + child)
		for _, p := range parents {
			if end := log.at("end:" + p); end < 0 || start < end {
				early++
				t.Errorf("%s started (event %d) before %s ended (event %d)", child, start, p, end)
			}
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, tk := range batch {
		if r := log.runs[tk.ID]; r != 1 {
			t.Errorf("%s ran %d times, want 1", tk.ID, r)
		}
	}
	t.Logf("%d tasks, %d edges checked, %d early children", len(batch), 4*n, early)
}

// A parent that ends DEAD cancels its child of the default policy (which never runs)
// and releases its child of policy run (which runs once, after it).
func TestWorkflowFailedParent(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	w := newWorkerT(t, s.Addr, WithConcurrency(4))
	var log runLog
	for _, typ := range []string{"step", "doomed"} {
		if err := w.Handle(typ, func(ctx context.Context, f *Fire) error {
			log.note("start", f.TaskID)
			defer log.note("end", f.TaskID)
			if f.Type == "doomed" {
				return task.NonRetryable(errors.New("bad input"))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	runWorker(t, w)
	p := step("p")
	p.Type = "doomed"
	cancelled, runs := step("cancelled", "p"), step("runs", "p")
	runs.DependsOn.OnParentFailure = task.ParentRunAnyway
	items, err := c.SubmitBatch(bounded(t), []task.Task{p, cancelled, runs}, protocol.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if it.Err != nil {
			t.Fatalf("item %d: %v", i, it.Err)
		}
	}
	waitState(t, c, "p", task.Dead)
	waitState(t, c, "cancelled", task.Cancelled)
	waitState(t, c, "runs", task.Succeeded)
	if i := log.at("start:cancelled"); i >= 0 {
		t.Errorf("the cancelled child ran (event %d)", i)
	}
	if start, end := log.at("start:runs"), log.at("end:p"); end < 0 || start < end {
		t.Errorf("the run-anyway child started at event %d, its parent ended at %d", start, end)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.runs["runs"] != 1 || log.runs["p"] != 1 {
		t.Errorf("runs: %v, want p and runs once each", log.runs)
	}
}

// A cycle is refused over the wire as a whole, every item naming the path; nothing of
// the batch was submitted.
func TestWorkflowCycleRefused(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	items, err := c.SubmitBatch(bounded(t), []task.Task{step("x", "y"), step("y", "x"), step("free")}, protocol.Ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		var pe *protocol.Error
		if !errors.As(it.Err, &pe) || pe.Code != protocol.CodeInvalidTask || pe.Field != "depends_on" || !strings.Contains(pe.Message, "x -> y -> x") {
			t.Fatalf("item %d: %v, want INVALID_TASK field depends_on naming x -> y -> x", i, it.Err)
		}
	}
	for _, id := range []string{"x", "y", "free"} {
		var pe *protocol.Error
		if _, err := c.Get(bounded(t), "", id); !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound {
			t.Errorf("GET %s after the refused batch: %v, want NOT_FOUND", id, err)
		}
	}
}

// A fan-out/fan-in of 10,000 tasks (a root, 9,998 middles, a sink naming all of them)
// submitted in batches of protocol.MaxBatch, parents before children, runs through a
// Go worker in order: no middle starts before the root's handler returned, the sink
// not before every middle's; every task runs once.
func TestWorkflowFanOutFanIn(t *testing.T) {
	const n = 10_000
	c, log := stepWorker(t, 64)
	tasks := []task.Task{step("root")}
	mids := make([]string, 0, n-2)
	for i := range n - 2 {
		id := fmt.Sprintf("m%04d", i)
		mids = append(mids, id)
		tasks = append(tasks, step(id, "root"))
	}
	tasks = append(tasks, step("sink", mids...))
	for from := 0; from < len(tasks); from += protocol.MaxBatch {
		batch := tasks[from:min(from+protocol.MaxBatch, len(tasks))]
		items, err := c.SubmitBatch(bounded(t), batch, protocol.Ephemeral)
		if err != nil {
			t.Fatal(err)
		}
		for i, it := range items {
			if it.Err != nil {
				t.Fatalf("%s: %v", batch[i].ID, it.Err)
			}
		}
	}
	waitState(t, c, "sink", task.Succeeded)
	log.mu.Lock()
	defer log.mu.Unlock()
	at := make(map[string]int, 2*n)
	for i, e := range log.events {
		if _, dup := at[e]; !dup {
			at[e] = i
		}
	}
	early := 0
	for _, m := range mids {
		if at["start:"+m] < at["end:root"] {
			early++
		}
		if at["start:sink"] < at["end:"+m] {
			early++
		}
	}
	for _, tk := range tasks {
		if r := log.runs[tk.ID]; r != 1 {
			t.Fatalf("%s ran %d times, want 1", tk.ID, r)
		}
	}
	if early != 0 {
		t.Fatalf("%d early children of %d edges", early, 2*(n-2))
	}
	t.Logf("%d tasks, %d edges, 0 early children", n, 2*(n-2))
}
