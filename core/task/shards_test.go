package task

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// shardLog counts a sharded task's runs by shard index, and checks what each run says
// of itself.
type shardLog struct {
	t    *testing.T
	mu   sync.Mutex
	runs map[int]int
	ran  chan int // each run's index, as it starts
}

func newShardLog(t *testing.T) *shardLog {
	return &shardLog{t: t, runs: map[int]int{}, ran: make(chan int, 1024)}
}

// saw records run r of task id with total shards.
func (l *shardLog) saw(r *Run, id string, total int) int {
	i, n := r.Shard()
	if n != total || r.Task.ID != id || i < 0 || i >= n {
		l.t.Errorf("run of %q: Shard() = (%d, %d), want an index of %d shards of %q", r.Task.ID, i, n, total, id)
	}
	l.mu.Lock()
	l.runs[i]++
	l.mu.Unlock()
	l.ran <- i
	return i
}

func (l *shardLog) count(i int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[i]
}

// waitShardEvent returns the next event of kind for a shard's own record.
func (h *harness) waitShardEvent(kind EventKind) Event {
	h.t.Helper()
	deadline := time.After(eventWait)
	for {
		select {
		case ev := <-h.events:
			if ev.Kind == kind && strings.HasPrefix(ev.ID, shardIDPrefix) {
				return ev
			}
			h.backlog = append(h.backlog, ev)
		case <-deadline:
			h.t.Fatalf("no %v event for a shard within %v", kind, eventWait)
			return Event{}
		}
	}
}

func wantShardStates(t *testing.T, in Info, n int, want func(i int) State) {
	t.Helper()
	if len(in.Shards) != n {
		t.Fatalf("Info.Shards has %d entries, want %d", len(in.Shards), n)
	}
	for i, s := range in.Shards {
		if s.Index != i || s.State != want(i) {
			t.Errorf("shard %d: %+v, want index %d %v", i, s, i, want(i))
		}
	}
}

func TestShardedTaskRunsEachShardOnce(t *testing.T) {
	h := newHarness(t)
	log := newShardLog(t)
	h.e.Register("sh", func(ctx context.Context, r *Run) error { log.saw(r, "s", 8); return nil })
	h.submit(Task{ID: "s", Type: "sh", Schedule: After(0), Shards: 8})
	h.fake.Advance(0)
	h.wait(EventSucceeded, "s")
	for i := range 8 {
		if n := log.count(i); n != 1 {
			t.Errorf("shard %d ran %d times, want 1", i, n)
		}
	}
	in, err := h.e.Get("", "s")
	if err != nil {
		t.Fatal(err)
	}
	if in.State != Succeeded || in.Attempts != 1 {
		t.Errorf("task: %v after %d attempts, want SUCCEEDED after 1", in.State, in.Attempts)
	}
	wantShardStates(t, in, 8, func(int) State { return Succeeded })
	if page, _, _ := h.e.List(0, "", 100); len(page) != 1 {
		t.Errorf("List shows %d tasks, want the sharded task alone", len(page))
	}
}

// TestShardRetryRerunsOnlyThatShard: shard 3 fails twice, then succeeds on its own
// backoff; the other shards run once.
func TestShardRetryRerunsOnlyThatShard(t *testing.T) {
	h := newHarness(t)
	log := newShardLog(t)
	h.e.Register("sh", func(ctx context.Context, r *Run) error {
		if i := log.saw(r, "s", 8); i == 3 && r.Attempt < 3 {
			return errors.New("flaky")
		}
		return nil
	})
	h.submit(Task{ID: "s", Type: "sh", Schedule: After(0), Shards: 8,
		Retry: RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, Multiplier: 1}})
	h.fake.Advance(0)
	for range 2 {
		h.waitShardEvent(EventRetrying) // armed 1 s after the failure
		if s := h.state("s"); s != Running {
			t.Fatalf("task %v while a shard backs off, want RUNNING", s)
		}
		h.fake.Advance(time.Second)
	}
	h.wait(EventSucceeded, "s")
	for i := range 8 {
		want := 1
		if i == 3 {
			want = 3
		}
		if n := log.count(i); n != want {
			t.Errorf("shard %d ran %d times, want %d", i, n, want)
		}
	}
	in, _ := h.e.Get("", "s")
	wantShardStates(t, in, 8, func(int) State { return Succeeded })
	if in.Shards[3].Attempts != 3 || in.Shards[3].LastError != "flaky" {
		t.Errorf("shard 3: %+v, want 3 attempts, last error flaky", in.Shards[3])
	}
}

// TestDeadShardFailsOccurrence: a shard that ends DEAD fails the occurrence once the
// others have ended: the task is DEAD with one dead letter, its own.
func TestDeadShardFailsOccurrence(t *testing.T) {
	h := newHarness(t)
	log := newShardLog(t)
	h.e.Register("sh", func(ctx context.Context, r *Run) error {
		if log.saw(r, "s", 8) == 5 {
			return NonRetryable(errors.New("bad input"))
		}
		return nil
	})
	h.submit(Task{ID: "s", Type: "sh", Schedule: After(0), Shards: 8, Retry: RetryPolicy{MaxAttempts: 5}})
	h.fake.Advance(0)
	if sev := h.waitShardEvent(EventDead); !sev.OfShard() {
		t.Errorf("the dead shard's event %+v: OfShard false", sev)
	}
	ev := h.wait(EventDead, "s")
	if ev.OfShard() {
		t.Errorf("the task's dead event: OfShard true")
	}
	if !errors.Is(ev.Err, ErrShardFailed) || !strings.Contains(ev.Err.Error(), "shard 5 ended DEAD: bad input") {
		t.Errorf("dead event's error %v, want ErrShardFailed naming shard 5", ev.Err)
	}
	for i := range 8 {
		if n := log.count(i); n != 1 {
			t.Errorf("shard %d ran %d times, want 1", i, n)
		}
	}
	in, _ := h.e.Get("", "s")
	if in.State != Dead {
		t.Errorf("task %v, want DEAD", in.State)
	}
	wantShardStates(t, in, 8, func(i int) State {
		if i == 5 {
			return Dead
		}
		return Succeeded
	})
	dls, _, _ := h.e.DeadLetters("", 0)
	if len(dls) != 1 || dls[0].Task.ID != "s" || dls[0].Task.Shards != 8 {
		t.Errorf("dead letters %+v, want the task's one", dls)
	}
}

// TestRecurringShardedTaskFansOutEachOccurrence: every occurrence runs each shard once.
func TestRecurringShardedTaskFansOutEachOccurrence(t *testing.T) {
	h := newHarness(t)
	log := newShardLog(t)
	h.e.Register("sh", func(ctx context.Context, r *Run) error { log.saw(r, "s", 4); return nil })
	h.submit(Task{ID: "s", Type: "sh", Schedule: Every(10 * time.Second), Shards: 4})
	for occ := 1; occ <= 3; occ++ {
		h.fake.Advance(10 * time.Second)
		h.wait(EventSucceeded, "s")
		for i := range 4 {
			if n := log.count(i); n != occ {
				t.Fatalf("after occurrence %d shard %d ran %d times, want %d", occ, i, n, occ)
			}
		}
		if s := h.state("s"); s != Pending {
			t.Fatalf("after occurrence %d: %v, want PENDING", occ, s)
		}
	}
}

// TestCancelShardedTaskCancelsShards: cancelling a sharded task while its shards run
// cancels every shard's context.
func TestCancelShardedTaskCancelsShards(t *testing.T) {
	h := newHarness(t, WithWorkers(8))
	log := newShardLog(t)
	stopped := make(chan int, 8)
	h.e.Register("sh", func(ctx context.Context, r *Run) error {
		i := log.saw(r, "s", 4)
		<-ctx.Done()
		stopped <- i
		return ctx.Err()
	})
	h.submit(Task{ID: "s", Type: "sh", Schedule: After(0), Shards: 4})
	h.fake.Advance(0)
	for range 4 {
		<-log.ran
	}
	if err := h.e.Cancel("", "s"); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range 4 {
		select {
		case i := <-stopped:
			seen[i] = true
		case <-time.After(eventWait):
			t.Fatalf("%d of 4 shards stopped within %v", len(seen), eventWait)
		}
	}
	if s := h.state("s"); s != Cancelled {
		t.Errorf("task %v, want CANCELLED", s)
	}
}

func TestShardsValidation(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name string
		task Task
		want string
	}{
		{"one", Task{ID: "a", Type: "x", Schedule: After(0), Shards: 1}, "Shards 1"},
		{"over max", Task{ID: "a", Type: "x", Schedule: After(0), Shards: MaxShards + 1}, "Shards 1025"},
		{"with a key", Task{ID: "a", Type: "x", Schedule: After(0), Shards: 2, Concurrency: &Concurrency{Key: "k", Limit: 1}}, "Concurrency"},
		{"broadcast and shards", Task{ID: "a", Type: "x", Schedule: After(0), Shards: 2, Broadcast: true}, "Broadcast"},
		{"exclusive", Task{ID: "a", Type: "x", Schedule: After(0), Shards: 2, Exclusive: true}, "Exclusive"},
		{"reserved ID", Task{ID: shardIDPrefix + "x", Type: "x", Schedule: After(0)}, "ID may not"},
	} {
		_, err := h.e.Submit(tc.task)
		if !errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidTask naming %q", tc.name, err, tc.want)
		}
	}
}

// TestBroadcastFansOutToItsWidth: a broadcast occurrence runs once per unit of the width
// Options.BroadcastWidth gives as it comes due (here 3, then 5); a width of 0 fails the
// attempt (ErrNoShards), retried per the task's policy; without the option the task is
// refused.
func TestBroadcastFansOutToItsWidth(t *testing.T) {
	if _, err := newHarness(t).e.Submit(Task{ID: "b", Type: "x", Schedule: After(0), Broadcast: true}); !errors.Is(err, ErrInvalidTask) {
		t.Fatalf("broadcast without BroadcastWidth: %v, want ErrInvalidTask", err)
	}
	var width sync.Mutex
	widths := []int{0, 3, 5}
	h := newHarness(t, WithBroadcastWidth(func(tk *Task) int {
		width.Lock()
		defer width.Unlock()
		n := widths[0]
		widths = widths[1:]
		return n
	}))
	var mu sync.Mutex
	runs := map[[2]int]int{} // (index, total) -> runs
	h.e.Register("x", func(ctx context.Context, r *Run) error {
		i, n := r.Shard()
		mu.Lock()
		runs[[2]int{i, n}]++
		mu.Unlock()
		return nil
	})
	h.submit(Task{ID: "b", Type: "x", Schedule: Every(10 * time.Second), Broadcast: true,
		Retry: RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second, Multiplier: 1}})
	h.fake.Advance(10 * time.Second)
	if ev := h.wait(EventRetrying, "b"); !errors.Is(ev.Err, ErrNoShards) {
		t.Fatalf("a broadcast to no one: %v, want ErrNoShards", ev.Err)
	}
	h.fake.Advance(time.Second) // the retry: width 3
	h.wait(EventSucceeded, "b")
	h.fake.Advance(9 * time.Second) // the next occurrence: width 5
	h.wait(EventSucceeded, "b")
	mu.Lock()
	defer mu.Unlock()
	want := map[[2]int]int{}
	for i := range 3 {
		want[[2]int{i, 3}] = 1
	}
	for i := range 5 {
		want[[2]int{i, 5}] = 1
	}
	if !reflect.DeepEqual(runs, want) {
		t.Errorf("runs (index, total) -> count: %v, want %v", runs, want)
	}
}

// TestCancelDuringFanOut: a task cancelled while its occurrence fans out (here, while
// BroadcastWidth is being asked) runs no shard: those not yet submitted never are.
func TestCancelDuringFanOut(t *testing.T) {
	asked, answer := make(chan struct{}), make(chan int)
	h := newHarness(t, WithBroadcastWidth(func(*Task) int { close(asked); return <-answer }))
	var ran sync.Mutex
	runs := 0
	h.e.Register("x", func(ctx context.Context, r *Run) error { ran.Lock(); runs++; ran.Unlock(); return nil })
	h.submit(Task{ID: "b", Type: "x", Schedule: After(0), Broadcast: true})
	h.fake.Advance(0)
	<-asked
	if err := h.e.Cancel("", "b"); err != nil {
		t.Fatal(err)
	}
	answer <- 3
	deadline := time.After(eventWait)
	for {
		in, err := h.e.Get("", "b")
		if err != nil {
			t.Fatal(err)
		}
		done := len(in.Shards) == 3
		for _, s := range in.Shards {
			done = done && s.State.Terminal()
		}
		if done {
			wantShardStates(t, in, 3, func(int) State { return Cancelled })
			break
		}
		select {
		case <-deadline:
			t.Fatalf("shards %+v not all ended within %v", in.Shards, eventWait)
		case <-time.After(time.Millisecond): // polling Get: the fan-out emits nothing the test could wait on
		}
	}
	ran.Lock()
	defer ran.Unlock()
	if runs != 0 {
		t.Errorf("%d shards ran after their task was cancelled, want 0", runs)
	}
}

// verifyShards must catch a miscounted fan-out: a check that cannot fail proves nothing.
func TestVerifyShardsCatchesMiscount(t *testing.T) {
	h := newHarness(t)
	unblock := h.blocking()
	h.submit(Task{ID: "s", Type: "block", Schedule: After(0), Shards: 2})
	h.fake.Advance(0)
	h.waitShardEvent(EventStarted)
	h.waitShardEvent(EventStarted)
	if err := h.e.verify(); err != nil {
		t.Fatalf("a sound fan-out failed verify: %v", err)
	}
	h.e.shardMu.Lock()
	var set *shardSet
	for _, s := range h.e.shardSets {
		set = s
	}
	h.e.shardMu.Unlock()
	set.mu.Lock()
	set.left++
	set.mu.Unlock()
	if err := h.e.verify(); err == nil || !strings.Contains(err.Error(), "left 3") {
		t.Fatalf("verify of a miscounted fan-out = %v, want it named", err)
	}
	set.mu.Lock()
	set.left--
	set.mu.Unlock()
	unblock()
	h.wait(EventSucceeded, "s")
}
