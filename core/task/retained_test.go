package task

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/tock-sched/tock/core/internal/waitfor"
)

// idsInShard returns n IDs whose keys (in the default namespace) fall in shard 0, so
// that a test sees one shard's log grow.
func idsInShard(n int) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if id := fmt.Sprintf("t%d", i); keyHash(DefaultNamespace, id)&(numShards-1) == 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// waitSucceeded spins until shard 0 has counted n successes (the end of an attempt is
// microseconds after its handler returns), without allocating on the way there.
func waitSucceeded(e *Engine, n uint64) {
	sh := &e.shards[0]
	for {
		sh.mu.Lock()
		done := sh.succeeded >= n
		sh.mu.Unlock()
		if done {
			return
		}
		runtime.Gosched()
	}
}

// TestRetainedTaskAllocs: under a retention, a task submitted (SubmitOwned), run and
// finished allocates nothing a task either: its record is reused at once and what the
// retention keeps of it goes to its shard's log (a chunk, and its bytes' growth, once
// per retChunkLen tasks: AllocsPerRun's integer average rounds them away). A retained
// record was a fresh 480 B record a task.
func TestRetainedTaskAllocs(t *testing.T) {
	const runs = 200
	e := newRealEngine(t, WithWorkers(1), WithRetention(time.Hour))
	done := make(chan struct{}, 1)
	e.Register("x", func(context.Context, *Run) error { done <- struct{}{}; return nil })
	ids := idsInShard(runs + 2)
	var n uint64
	run := func() {
		if _, err := e.SubmitOwned(Task{ID: ids[n], Type: "x", Schedule: After(0)}); err != nil {
			t.Fatal(err)
		}
		<-done
		n++
		waitSucceeded(e, n)
	}
	run() // warm: the record pool, the queue, the first chunk
	if got := testing.AllocsPerRun(runs, run); got != 0 {
		t.Errorf("submit + run + finish under a 1h retention: %v allocs a task; want 0", got)
	}
	if st := e.Stats(); st.Tasks != int(n) {
		t.Errorf("Stats().Tasks = %d with %d tasks finished and retained", st.Tasks, n)
	}
}

// TestRetainedReadBack: a finished task kept in the retained log reads back (Get, List)
// as the retained record showed it: every field of its Task, its state and counts, even
// after its record was reused by tasks with other fields (which read back as theirs).
// A task whose Info needs more than a log entry holds (a failed attempt's history)
// stays a record.
func TestRetainedReadBack(t *testing.T) {
	h := newHarness(t, WithRetention(time.Hour), WithWorkers(1))
	h.e.Register("a", func(context.Context, *Run) error { return nil })
	h.e.Register("bb", func(context.Context, *Run) error { return nil })
	failedOnce := false
	h.e.Register("flaky", func(context.Context, *Run) error {
		if !failedOnce {
			failedOnce = true
			return errors.New("once")
		}
		return nil
	})
	local := time.Date(2026, 5, 31, 23, 0, 0, 123, time.Local)
	tasks := []Task{
		{ID: "plain", Type: "a", Schedule: After(0)},
		{ID: "payload", Type: "bb", Schedule: After(0), Payload: []byte("payload bytes"), Version: 3, Timeout: time.Minute},
		{ID: "empty", Type: "a", Schedule: After(0), Payload: []byte{}, Exclusive: true},
		{Namespace: "ns", ID: "utc", Type: "bb", Schedule: At(epoch.Add(-time.Second)), Misfire: MisfireSkip,
			Retry: RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Second, Multiplier: 3, Jitter: 0.5}},
		{ID: "local", Type: "a", Schedule: At(local), Payload: []byte{0, 1, 2}},
	}
	want := map[string]Info{}
	for _, tk := range tasks {
		in := h.submit(tk)
		h.fake.Advance(0)
		h.wait(EventSucceeded, tk.ID)
		in.State, in.Attempts, in.Runs, in.NextRun = Succeeded, 1, 1, time.Time{}
		want[tk.ID] = in
	}
	h.submit(Task{ID: "flaky", Type: "flaky", Schedule: After(0), Retry: RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond}})
	h.fake.Advance(0)
	h.wait(EventRetrying, "flaky")
	h.fake.Advance(time.Second)
	h.wait(EventSucceeded, "flaky")

	live := 0
	for i := range h.e.shards {
		sh := &h.e.shards[i]
		sh.mu.Lock()
		live += sh.ret.live
		sh.mu.Unlock()
	}
	if live != len(tasks) {
		t.Fatalf("%d tasks in the retained logs, want the %d plain ones", live, len(tasks))
	}
	if st := h.e.Stats(); st.Tasks != len(tasks)+1 {
		t.Errorf("Stats().Tasks = %d, want %d retained", st.Tasks, len(tasks)+1)
	}
	page, _, err := h.e.List(Succeeded, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, in := range page {
		listed = append(listed, in.Task.Namespace+"/"+in.Task.ID)
		if w, ok := want[in.Task.ID]; ok && !reflect.DeepEqual(in, w) {
			t.Errorf("List: %s:\n got %+v\nwant %+v", in.Task.ID, in, w)
		}
	}
	wantListed := []string{"default/empty", "default/flaky", "default/local", "default/payload", "default/plain", "ns/utc"}
	if !reflect.DeepEqual(listed, wantListed) {
		t.Errorf("List(SUCCEEDED) = %v, want %v", listed, wantListed)
	}
	for _, tk := range tasks {
		in, err := h.e.Get(tk.Namespace, tk.ID)
		if err != nil {
			t.Fatalf("Get(%s): %v", tk.ID, err)
		}
		if !reflect.DeepEqual(in, want[tk.ID]) {
			t.Errorf("Get(%s):\n got %+v\nwant %+v", tk.ID, in, want[tk.ID])
		}
	}
	if in, err := h.e.Get("", "flaky"); err != nil || in.State != Succeeded || len(in.History) != 1 || in.LastError != "once" {
		t.Errorf("Get(flaky) = %+v, %v: want SUCCEEDED with its failed attempt", in, err)
	}
}

// TestRetainedKeepsTheID: a task in the retained log holds its ID as its retained record
// did: the same version is ErrExists, Cancel is an illegal move, a higher version
// replaces it, and Drop forgets it; each counts towards Stats.Tasks until it goes.
func TestRetainedKeepsTheID(t *testing.T) {
	h := newHarness(t, WithRetention(time.Hour))
	h.e.Register("a", func(context.Context, *Run) error { return nil })
	for _, id := range []string{"dup", "gone"} {
		h.submit(Task{ID: id, Type: "a", Schedule: After(0), Payload: []byte("12345")})
		h.fake.Advance(0)
		h.wait(EventSucceeded, id)
	}
	if _, err := h.e.Submit(Task{ID: "dup", Type: "a", Schedule: After(0)}); !errors.Is(err, ErrExists) {
		t.Errorf("Submit of a retained ID at its version: %v, want ErrExists", err)
	}
	if err := h.e.Cancel("", "dup"); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("Cancel of a retained task: %v, want ErrIllegalTransition", err)
	}
	in := h.submit(Task{ID: "dup", Type: "a", Schedule: After(0), Version: 1})
	if in.State != Pending || in.Task.Version != 1 {
		t.Errorf("a higher version of a retained task: %+v, want it PENDING at version 1", in)
	}
	h.fake.Advance(0)
	h.wait(EventSucceeded, "dup")
	if err := h.e.Drop("", "gone"); err != nil {
		t.Fatalf("Drop of a retained task: %v", err)
	}
	if _, err := h.e.Get("", "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Drop: %v, want ErrNotFound", err)
	}
	if st := h.e.Stats(); st.Tasks != 1 {
		t.Errorf("Stats().Tasks = %d, want 1 (dup at version 1)", st.Tasks)
	}
	if in, err := h.e.Get("", "dup"); err != nil || in.Task.Version != 1 || in.State != Succeeded || in.Runs != 1 {
		t.Errorf("Get(dup) = %+v, %v: want version 1, SUCCEEDED after its one run", in, err)
	}
}

// TestRetainedDeadline: a task in the retained log is there until its retention has
// passed (on the fake clock: 1 ms short of it), then gone from Get and from the counts,
// without a read: the sweep pops it. Its ID is then free.
func TestRetainedDeadline(t *testing.T) {
	h := newHarness(t, WithRetention(time.Minute))
	h.e.Register("a", func(context.Context, *Run) error { return nil })
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		h.submit(Task{ID: id, Type: "a", Schedule: After(0)})
	}
	h.fake.Advance(0)
	for _, id := range ids {
		h.wait(EventSucceeded, id)
	}
	h.fake.Advance(time.Minute - time.Millisecond)
	if st := h.e.Stats(); st.Tasks != 3 {
		t.Errorf("1 ms before the retention ends: Stats().Tasks = %d, want 3", st.Tasks)
	}
	if _, err := h.e.Get("", "a"); err != nil {
		t.Errorf("Get 1 ms before the retention ends: %v", err)
	}
	h.fake.Advance(time.Millisecond)
	waitfor.Until(t, "the retained tasks gone at their deadline", func() bool { return h.e.Stats().Tasks == 0 })
	for _, id := range ids {
		if _, err := h.e.Get("", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%s) after its retention: %v, want ErrNotFound", id, err)
		}
	}
	h.submit(Task{ID: "b", Type: "a", Schedule: After(time.Hour)})
}

// TestRetEntrySize pins a retained task's fixed cost (the figure Options.Retention
// states): its fields packed with no padding between them, 5 B at the end; a chunk of
// them stays within the collector's small-object size classes (32 KB).
func TestRetEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(retEntry{}); got != 96 {
		t.Errorf("unsafe.Sizeof(retEntry{}) = %d, want 96", got)
	}
	if got := unsafe.Sizeof(retChunk{}); got > 32<<10 {
		t.Errorf("unsafe.Sizeof(retChunk{}) = %d, over 32 KB", got)
	}
}

// TestRetainedPolicies: a shard's log keeps each retry policy once, up to
// maxRetPolicies of them; a task with one more keeps its record, and every task reads
// back with its own policy.
func TestRetainedPolicies(t *testing.T) {
	h := newHarness(t, WithRetention(time.Hour))
	h.e.Register("a", func(context.Context, *Run) error { return nil })
	ids := idsInShard(maxRetPolicies + 2)
	policy := func(i int) RetryPolicy {
		return RetryPolicy{MaxAttempts: 2 + i%(maxRetPolicies+1), InitialBackoff: time.Millisecond}.WithDefaults()
	}
	for i, id := range ids {
		h.submit(Task{ID: id, Type: "a", Schedule: After(0), Retry: policy(i)})
		h.fake.Advance(0)
		h.wait(EventSucceeded, id)
	}
	sh := &h.e.shards[0]
	sh.mu.Lock()
	live, policies := sh.ret.live, len(sh.ret.policies)
	sh.mu.Unlock()
	// The last ID's policy is the first's again (i % 65 == 0): it shares its index.
	if live != maxRetPolicies+1 || policies != maxRetPolicies {
		t.Errorf("%d tasks retained in the log with %d policies; want %d with %d (one task kept as its record)",
			live, policies, maxRetPolicies+1, maxRetPolicies)
	}
	for i, id := range ids {
		if in, err := h.e.Get("", id); err != nil || in.Task.Retry != policy(i) {
			t.Errorf("Get(%s): retry %+v, %v; want %+v", id, in.Task.Retry, err, policy(i))
		}
	}
}

// TestRetainedChunksGo: the sweep pops a shard's entries as their retention passes, and
// a chunk whose entries have all gone is dropped (one kept as the spare the next chunk
// reuses); entries taken before (Drop) are popped with the rest; the log then keeps
// later tasks as before, the index naming each.
func TestRetainedChunksGo(t *testing.T) {
	const n = 2*retChunkLen + 88
	h := newHarness(t, WithRetention(time.Minute))
	h.e.Register("a", func(context.Context, *Run) error { return nil })
	ids := idsInShard(2 * n)
	finish := func(ids []string) {
		t.Helper()
		for _, id := range ids {
			h.submit(Task{ID: id, Type: "a", Schedule: After(0), Payload: []byte(id)})
		}
		h.fake.Advance(0)
		waitfor.Until(t, fmt.Sprintf("%d tasks retained", len(ids)), func() bool {
			sh := &h.e.shards[0]
			sh.mu.Lock()
			defer sh.mu.Unlock()
			return sh.ret.live == len(ids)
		})
	}
	finish(ids[:n])
	if err := h.e.Drop("", ids[300]); err != nil {
		t.Fatal(err)
	}
	h.fake.Advance(time.Minute)
	waitfor.Until(t, "the retained tasks swept", func() bool { return h.e.Stats().Tasks == 0 })
	sh := &h.e.shards[0]
	sh.mu.Lock()
	chunks, spare, head := len(sh.ret.chunks), sh.ret.spare != nil, sh.ret.head
	sh.mu.Unlock()
	if chunks != 1 || !spare || head != n {
		t.Errorf("after the sweep: %d chunks, spare %v, head %d; want 1 chunk (the last, partly used), a spare, head %d", chunks, spare, head, n)
	}
	finish(ids[n:])
	for _, id := range []string{ids[n], ids[2*n-1]} {
		if in, err := h.e.Get("", id); err != nil || string(in.Task.Payload) != id || in.State != Succeeded {
			t.Errorf("Get(%s) = %+v, %v", id, in, err)
		}
	}
	if _, err := h.e.Get("", ids[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(%s) after its retention: %v, want ErrNotFound", ids[0], err)
	}
	if err := h.e.verify(); err != nil {
		t.Error(err)
	}
}

// TestRetainedSlotIgnoresOldRuns: a retained entry keeps its record's slot, which run IDs
// and timer arguments name: the finished run's ID names no running attempt, neither
// while the entry holds the slot nor once a read has revived the task into it; and a
// task of the same shard submitted once the entry is forgotten gets the slot, and runs
// and completes under its own run ID only.
func TestRetainedSlotIgnoresOldRuns(t *testing.T) {
	h := newHarness(t, WithRetention(time.Minute), WithWorkers(1))
	runs := deferring(h, "remote")
	ids := idsInShard(2)
	id := h.startDeferred(runs, Task{ID: ids[0], Type: "remote", Schedule: After(0)})
	if err := h.e.Complete(id, nil); err != nil {
		t.Fatal(err)
	}
	h.wait(EventSucceeded, ids[0])
	if err := h.e.Complete(id, nil); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("Complete of the retained task's run: %v, want ErrUnknownRun", err)
	}
	if in, err := h.e.Get("", ids[0]); err != nil || in.State != Succeeded || in.Runs != 1 {
		t.Fatalf("Get(%s) = %+v, %v", ids[0], in, err)
	}
	if err := h.e.Complete(id, errors.New("late")); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("Complete of the revived task's old run: %v, want ErrUnknownRun", err)
	}
	h.fake.Advance(time.Minute)
	waitfor.Until(t, "the task forgotten after its retention", func() bool { return h.e.Stats().Tasks == 0 })
	id2 := h.startDeferred(runs, Task{ID: ids[1], Type: "remote", Schedule: After(0)})
	_, s1 := h.e.runRecord(id)
	if _, s2 := h.e.runRecord(id2); s1 != s2 {
		t.Fatalf("the second task got slot %d, not the first's %d: the test would not reuse it", s2, s1)
	}
	if err := h.e.Complete(id, nil); !errors.Is(err, ErrUnknownRun) {
		t.Errorf("Complete of the first task's run once the second runs in its slot: %v, want ErrUnknownRun", err)
	}
	if err := h.e.Complete(id2, nil); err != nil {
		t.Fatalf("Complete of the second task's own run: %v", err)
	}
	h.wait(EventSucceeded, ids[1])
}
