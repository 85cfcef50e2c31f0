package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// runs counts handler runs per task ID, across both workers.
type runs struct {
	mu      sync.Mutex
	n       map[string]int
	by      map[string]map[string]bool // task ID -> workers that ran it
	workers map[string]bool            // every worker that ran something
	// bothRan is closed once two workers have run something.
	bothRan chan struct{}
}

func newRuns() *runs {
	return &runs{n: map[string]int{}, by: map[string]map[string]bool{}, workers: map[string]bool{},
		bothRan: make(chan struct{})}
}

func (r *runs) add(id, worker string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[id]++
	if r.by[id] == nil {
		r.by[id] = map[string]bool{}
	}
	r.by[id][worker] = true
	if !r.workers[worker] {
		r.workers[worker] = true
		if len(r.workers) == 2 {
			close(r.bothRan)
		}
	}
	return r.n[id]
}

func (r *runs) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// scrape returns the value of each sample of /metrics whose name (with labels) is in want.
func scrape(t *testing.T, adminAddr string, want ...string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	got := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		for _, w := range want {
			if name == w {
				v, err := strconv.ParseFloat(value, 64)
				if err != nil {
					t.Fatalf("metric %s: %v", line, err)
				}
				got[w] = v
			}
		}
	}
	for _, w := range want {
		if _, ok := got[w]; !ok {
			t.Fatalf("/metrics has no sample %s", w)
		}
	}
	return got
}

// TestEndToEnd is issue 4's end-to-end check, through the tockd command itself (flags,
// embedded etcd, admin port, webhook alerts) on 127.0.0.1: one-shot (ephemeral and
// durable), interval and cron tasks submitted through the client run on two Workers; a
// flaky task is retried; a failing one goes DEAD, raises a webhook alert, is requeued and
// then succeeds; the election's epoch rides on every FIRE and its leader alert reaches
// the webhook; /metrics moves; and cancelling the context drains the server cleanly.
func TestEndToEnd(t *testing.T) {
	var alerts []map[string]any
	var alertsMu sync.Mutex
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a map[string]any
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		alertsMu.Lock()
		alerts = append(alerts, a)
		alertsMu.Unlock()
	}))
	defer hook.Close()

	ctx, addr, adminAddr, drain := startTockd(t, "-data-dir", t.TempDir(), "-etcd-client-port", "0", "-node-name", "e2e",
		"-log-level", "warn", "-webhook", hook.URL, "-drain-timeout", "10s")

	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := scrape(t, adminAddr, "tock_tasks_succeeded_total", "tock_runs_fired_total", "tock_lateness_seconds_count")

	// Two workers serve every type.
	var (
		ran       = newRuns()
		healed    atomic.Bool // once set, "doomed" succeeds
		workersWG sync.WaitGroup
	)
	wctx, stopWorkers := context.WithCancel(ctx)
	for _, name := range []string{"w1", "w2"} {
		w, err := client.NewWorker(addr, client.WithConcurrency(4), client.WithClientName(name))
		if err != nil {
			t.Fatal(err)
		}
		handle := func(typ string, h client.HandlerFunc) {
			if err := w.Handle(typ, h); err != nil {
				t.Fatal(err)
			}
		}
		handle("job", func(ctx context.Context, f *client.Fire) error {
			ran.add(f.TaskID, name)
			if f.Epoch == 0 {
				return task.NonRetryable(errors.New("FIRE without the leader's epoch"))
			}
			// A one-shot job holds its worker until both workers have run something:
			// the first worker to subscribe fills its 4 credits and waits, so the other
			// 16 go to the second, whenever it subscribes. Without this, a worker that
			// subscribes late finds every job done (runs went to one worker only).
			if strings.HasPrefix(f.TaskID, "one-") {
				select {
				case <-ran.bothRan:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
		handle("flaky", func(ctx context.Context, f *client.Fire) error {
			if ran.add(f.TaskID, name) == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		})
		handle("doomed", func(ctx context.Context, f *client.Fire) error {
			ran.add(f.TaskID, name)
			if healed.Load() {
				return nil
			}
			return errors.New("always fails")
		})
		workersWG.Add(1)
		go func() {
			defer workersWG.Done()
			if err := w.Run(wctx); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("worker %s: %v", name, err)
			}
		}()
	}
	defer func() { stopWorkers(); workersWG.Wait() }()

	fast := task.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	submit := func(tk task.Task, d protocol.Durability) {
		t.Helper()
		st, err := c.Submit(ctx, tk, d)
		if err != nil {
			t.Fatalf("submit %s: %v", tk.ID, err)
		}
		if st.Durability != d {
			t.Fatalf("submit %s: durability %v, want %v", tk.ID, st.Durability, d)
		}
	}
	for i := range 20 {
		submit(task.Task{ID: fmt.Sprint("one-", i), Type: "job", Schedule: task.After(0)}, protocol.Ephemeral)
	}
	submit(task.Task{ID: "durable-one", Type: "job", Schedule: task.After(50 * time.Millisecond)}, protocol.Durable)
	submit(task.Task{ID: "every", Type: "job", Schedule: task.Every(100 * time.Millisecond)}, protocol.Ephemeral)
	submit(task.Task{ID: "cron", Type: "job", Schedule: task.Cron("* * * * * *", time.UTC)}, protocol.Durable)
	submit(task.Task{ID: "flaky", Type: "flaky", Schedule: task.After(0), Retry: fast}, protocol.Ephemeral)
	submit(task.Task{ID: "doomed", Type: "doomed", Schedule: task.After(0), Retry: fast}, protocol.Ephemeral)

	state := func(id string) task.State {
		in, err := c.Get(ctx, "", id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		return in.State
	}
	for i := range 20 {
		id := fmt.Sprint("one-", i)
		tockdtest.Eventually(t, id+" SUCCEEDED", func() bool { return state(id) == task.Succeeded })
	}
	tockdtest.Eventually(t, "durable-one SUCCEEDED", func() bool { return state("durable-one") == task.Succeeded })
	tockdtest.Eventually(t, "3 interval runs", func() bool { return ran.count("every") >= 3 })
	tockdtest.Eventually(t, "2 cron runs", func() bool { return ran.count("cron") >= 2 })
	for _, id := range []string{"every", "cron"} {
		if _, err := c.Cancel(ctx, "", id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	tockdtest.Eventually(t, "flaky retried to SUCCEEDED", func() bool { return state("flaky") == task.Succeeded })
	if n := ran.count("flaky"); n != 2 {
		t.Fatalf("flaky ran %d times, want 2 (one failure, one retry)", n)
	}

	// The doomed task: three attempts, DEAD, in the dead-letter queue, with an alert.
	tockdtest.Eventually(t, "doomed DEAD", func() bool { return state("doomed") == task.Dead })
	if n := ran.count("doomed"); n != 3 {
		t.Fatalf("doomed ran %d times, want its 3 attempts", n)
	}
	dl, _, err := c.DeadLetters(ctx, "", 100)
	if err != nil || len(dl) != 1 || dl[0].Task.ID != "doomed" || len(dl[0].Attempts) != 3 {
		t.Fatalf("dead letters %+v, err %v: want doomed with 3 attempts", dl, err)
	}
	if m := scrape(t, adminAddr, "tock_dead_letters"); m["tock_dead_letters"] != 1 {
		t.Fatalf("tock_dead_letters %v, want 1", m["tock_dead_letters"])
	}
	tockdtest.Eventually(t, "a dead-letter alert on the webhook", func() bool {
		alertsMu.Lock()
		defer alertsMu.Unlock()
		for _, a := range alerts {
			if a["kind"] == "dead_letter" && a["key"] == "dead_letter/default/doomed" {
				return true
			}
		}
		return false
	})
	epoch := scrape(t, adminAddr, "tock_leader_epoch")["tock_leader_epoch"]
	tockdtest.Eventually(t, "a leader-change alert naming this node's epoch", func() bool {
		alertsMu.Lock()
		defer alertsMu.Unlock()
		for _, a := range alerts {
			if a["kind"] == "leader_change" && a["key"] == fmt.Sprintf("leader_change/%d", int64(epoch)) && epoch > 0 {
				return true
			}
		}
		return false
	})
	healed.Store(true)
	if _, err := c.Requeue(ctx, "", "doomed"); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	tockdtest.Eventually(t, "requeued doomed SUCCEEDED", func() bool { return state("doomed") == task.Succeeded })

	// Both workers took part, and the metrics moved.
	ran.mu.Lock()
	workers := maps.Clone(ran.workers)
	ran.mu.Unlock()
	if !workers["w1"] || !workers["w2"] {
		t.Fatalf("runs went to workers %v, want both", workers)
	}
	after := scrape(t, adminAddr, "tock_tasks_succeeded_total", "tock_runs_fired_total", "tock_lateness_seconds_count",
		"tock_is_leader", "tock_dead_letters", "tock_tasks_retried_total", "tock_workers_connected")
	for _, m := range []string{"tock_tasks_succeeded_total", "tock_runs_fired_total", "tock_lateness_seconds_count"} {
		if after[m] <= before[m] {
			t.Errorf("%s did not move: %v -> %v", m, before[m], after[m])
		}
	}
	if after["tock_is_leader"] != 1 || after["tock_dead_letters"] != 0 || after["tock_tasks_retried_total"] < 3 ||
		after["tock_workers_connected"] != 2 {
		t.Errorf("metrics after the run: %v", after)
	}

	stopWorkers()
	workersWG.Wait()
	c.Close()
	if err := drain(); err != nil {
		t.Fatalf("drain: %v", err)
	}
}
