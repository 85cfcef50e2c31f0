package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/internal/waitfor"
)

// order records the handlers' starts and ends, in the order they happen.
type order struct {
	mu    sync.Mutex
	seq   int
	start map[string]int
	end   map[string]int
}

func newOrder() *order { return &order{start: map[string]int{}, end: map[string]int{}} }

// handler records each run's start and end around fn's outcome (nil: success).
func (o *order) handler(fn func(*Run) error) Handler {
	return func(_ context.Context, r *Run) error {
		o.mu.Lock()
		o.seq++
		o.start[r.Task.ID] = o.seq
		o.mu.Unlock()
		var err error
		if fn != nil {
			err = fn(r)
		}
		o.mu.Lock()
		o.seq++
		o.end[r.Task.ID] = o.seq
		o.mu.Unlock()
		return err
	}
}

// early returns the children (of the edges child -> parents) that started before one
// of their parents ended, or without their parents having run.
func (o *order) early(edges map[string][]string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var bad []string
	for child, parents := range edges {
		s, ran := o.start[child]
		for _, p := range parents {
			if e, done := o.end[p]; ran && (!done || e > s) {
				bad = append(bad, child+" before "+p)
			}
		}
	}
	slices.Sort(bad)
	return bad
}

func deps(on ...string) *Deps { return &Deps{On: on} }

// numbered returns prefix0 ... prefix(n-1).
func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}

// TestDiamondRunsInOrder: a -> b, a -> c, b,c -> d, submitted as one batch in the
// reverse of their order: d waits while b and c do, and no child starts before all its
// parents have succeeded. Get shows the waiting state and the parents.
func TestDiamondRunsInOrder(t *testing.T) {
	h := newHarness(t)
	o := newOrder()
	release := make(chan struct{})
	h.e.Register("x", o.handler(func(r *Run) error {
		if r.Task.ID == "b" {
			<-release // hold b so that d is seen waiting on it
		}
		return nil
	}))
	edges := map[string][]string{"b": {"a"}, "c": {"a"}, "d": {"b", "c"}}
	var batch []Task
	for _, id := range []string{"d", "c", "b", "a"} {
		tk := Task{ID: id, Type: "x", Schedule: After(0)}
		if p := edges[id]; p != nil {
			tk.DependsOn = deps(p...)
		}
		batch = append(batch, tk)
	}
	infos, err := h.e.SubmitBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []State{Waiting, Waiting, Waiting, Pending} {
		if infos[i].State != want {
			t.Errorf("%s accepted %s, want %s", batch[i].ID, infos[i].State, want)
		}
	}
	h.wait(EventSucceeded, "c")
	h.wait(EventStarted, "b")
	in, err := h.e.Get("", "d")
	if err != nil || in.State != Waiting || in.Task.DependsOn == nil || !slices.Equal(in.Task.DependsOn.On, []string{"b", "c"}) {
		t.Fatalf("d while b runs: %+v, %v; want WAITING on b, c", in, err)
	}
	close(release)
	h.wait(EventSucceeded, "d")
	if bad := o.early(edges); len(bad) > 0 {
		t.Fatalf("children started early: %v", bad)
	}
	if st := h.e.Stats(); st.Succeeded != 4 || st.Started != 4 {
		t.Fatalf("stats %+v: want 4 runs, 4 successes", st)
	}
}

// TestParentFailurePolicies: a parent that ends DEAD after its retries, and one the
// user cancels, cancel their ParentCancel children (and those children's children, by
// their own default policy) and release their ParentRunAnyway children.
func TestParentFailurePolicies(t *testing.T) {
	h := newHarness(t)
	o := newOrder()
	h.e.Register("x", o.handler(nil))
	h.e.Register("fail", o.handler(func(*Run) error { return errors.New("broken") }))
	anyway := func(on string) *Deps { return &Deps{On: []string{on}, OnParentFailure: ParentRunAnyway} }
	_, err := h.e.SubmitBatch([]Task{
		{ID: "bad", Type: "fail", Schedule: After(0), Retry: RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second}},
		{ID: "bad.cancel", Type: "x", Schedule: After(0), DependsOn: deps("bad")},
		{ID: "bad.cancel.grand", Type: "x", Schedule: After(0), DependsOn: anyway("bad.cancel")},
		{ID: "bad.anyway", Type: "x", Schedule: After(0), DependsOn: anyway("bad")},
		{ID: "later", Type: "x", Schedule: After(time.Hour)},
		{ID: "later.cancel", Type: "x", Schedule: After(0), DependsOn: deps("later")},
		{ID: "later.anyway", Type: "x", Schedule: After(0), DependsOn: anyway("later")},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(EventRetrying, "bad")
	h.fake.Advance(2 * time.Second) // past the backoff: the second attempt fails for good
	h.wait(EventDead, "bad")
	ev := h.wait(EventCancelled, "bad.cancel")
	if !errors.Is(ev.Err, ErrParentFailed) || !strings.Contains(ev.Err.Error(), `parent "bad" ended DEAD`) {
		t.Errorf("bad.cancel's cancel: %v; want ErrParentFailed naming bad", ev.Err)
	}
	h.wait(EventSucceeded, "bad.cancel.grand") // its parent was cancelled; it runs anyway
	h.wait(EventSucceeded, "bad.anyway")
	if err := h.e.Cancel("", "later"); err != nil {
		t.Fatal(err)
	}
	h.wait(EventCancelled, "later.cancel")
	h.wait(EventSucceeded, "later.anyway")
	for id, want := range map[string]State{"bad": Dead, "bad.cancel": Cancelled, "bad.cancel.grand": Succeeded, "bad.anyway": Succeeded,
		"later": Cancelled, "later.cancel": Cancelled, "later.anyway": Succeeded} {
		if got := h.state(id); got != want {
			t.Errorf("%s is %s, want %s", id, got, want)
		}
	}
	if in, _ := h.e.Get("", "bad.cancel"); !strings.Contains(in.LastError, `parent "bad" ended DEAD`) {
		t.Errorf("bad.cancel's last error %q", in.LastError)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range []string{"bad.cancel", "later.cancel"} {
		if _, ran := o.start[id]; ran {
			t.Errorf("%s ran, though its parent failed", id)
		}
	}
	if e, s := o.end["bad"], o.start["bad.anyway"]; s < e {
		t.Errorf("bad.anyway started (%d) before bad's last attempt ended (%d)", s, e)
	}
}

// TestCascadeCancelsDescendants: cancelling a WAITING task cancels its children and
// their children (default policy) down a chain, and the chain's root still runs.
func TestCascadeCancelsDescendants(t *testing.T) {
	h := newHarness(t)
	unblock := h.blocking()
	chain := []Task{{ID: "c0", Type: "block", Schedule: After(0)}}
	for i := 1; i < 5; i++ {
		chain = append(chain, Task{ID: fmt.Sprint("c", i), Type: "block", Schedule: After(0), DependsOn: deps(fmt.Sprint("c", i-1))})
	}
	if _, err := h.e.SubmitBatch(chain); err != nil {
		t.Fatal(err)
	}
	h.wait(EventStarted, "c0")
	if err := h.e.Cancel("", "c1"); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 5; i++ {
		h.wait(EventCancelled, fmt.Sprint("c", i))
	}
	if err := h.e.Cancel("", "c1"); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("second cancel of c1: %v, want ErrIllegalTransition", err)
	}
	unblock()
	h.wait(EventSucceeded, "c0")
}

// TestParentsThatEndedBefore: a child submitted after its parent ended counts the
// parent as it ended: run at once after a success; cancelled at once after a failure
// (ParentCancel); run after one with ParentRunAnyway.
func TestParentsThatEndedBefore(t *testing.T) {
	h := newHarness(t)
	h.e.Register("x", func(context.Context, *Run) error { return nil })
	h.e.Register("fail", func(context.Context, *Run) error { return NonRetryable(errors.New("no")) })
	h.submit(Task{ID: "ok", Type: "x", Schedule: After(0)})
	h.submit(Task{ID: "bad", Type: "fail", Schedule: After(0)})
	h.wait(EventSucceeded, "ok")
	h.wait(EventDead, "bad")
	if in := h.submit(Task{ID: "after-ok", Type: "x", Schedule: After(0), DependsOn: deps("ok")}); in.State != Pending {
		t.Errorf("after-ok accepted %s, want PENDING", in.State)
	}
	h.wait(EventSucceeded, "after-ok")
	h.submit(Task{ID: "after-bad", Type: "x", Schedule: After(0), DependsOn: deps("bad")})
	if ev := h.wait(EventCancelled, "after-bad"); !strings.Contains(ev.Err.Error(), `parent "bad" had ended DEAD`) {
		t.Errorf("after-bad cancelled with %v", ev.Err)
	}
	h.submit(Task{ID: "anyway", Type: "x", Schedule: After(0), DependsOn: &Deps{On: []string{"bad"}, OnParentFailure: ParentRunAnyway}})
	h.wait(EventSucceeded, "anyway")
}

// TestChildDelayCountsFromRelease: a child's After delay counts from its release, on
// the fake clock: its run is due 5 s after its parent succeeded, not after it was
// submitted, and not a tick before.
func TestChildDelayCountsFromRelease(t *testing.T) {
	h := newHarness(t)
	dues := make(chan time.Time, 1)
	h.e.Register("x", func(_ context.Context, r *Run) error {
		if r.Task.ID == "child" {
			dues <- r.Due
		}
		return nil
	})
	if _, err := h.e.SubmitBatch([]Task{
		{ID: "parent", Type: "x", Schedule: After(10 * time.Second)},
		{ID: "child", Type: "x", Schedule: After(5 * time.Second), DependsOn: deps("parent")},
	}); err != nil {
		t.Fatal(err)
	}
	h.fake.Advance(10 * time.Second)
	h.wait(EventSucceeded, "parent")
	// The release follows the parent's events (no event announces it); the fake clock
	// stands still meanwhile, so it is at this reading.
	waitfor.Until(t, "child released", func() bool { return h.state("child") == Pending })
	released := h.fake.Time(h.fake.Now())
	h.fake.Advance(5*time.Second - time.Millisecond)
	if st := h.state("child"); st != Pending {
		t.Fatalf("child is %s 1 ms before its delay ends, want PENDING", st)
	}
	h.fake.Advance(time.Millisecond)
	if due := <-dues; !due.Equal(released.Add(5 * time.Second)) {
		t.Errorf("child due %v, want %v (5 s after its release)", due, released.Add(5*time.Second))
	}
}

// TestDependencyRefusals: a cycle is refused with its path; a missing parent, a
// recurring parent or child, a self-dependency, an ID twice and a field out of range
// are refused naming the field; a batch with one bad task is refused as a whole, with
// nothing of it accepted.
func TestDependencyRefusals(t *testing.T) {
	h := newHarness(t)
	h.submit(Task{ID: "tick", Type: "x", Schedule: Every(time.Minute)})
	h.submit(Task{ID: "taken", Type: "x", Schedule: After(time.Hour)})
	x := func(id string, on ...string) Task {
		tk := Task{ID: id, Type: "x", Schedule: After(0)}
		if len(on) > 0 {
			tk.DependsOn = deps(on...)
		}
		return tk
	}
	for _, tc := range []struct {
		name  string
		batch []Task
		want  string
	}{
		{"cycle", []Task{x("root"), x("a", "root", "c"), x("b", "a"), x("c", "b")}, "DependsOn: dependency cycle: a -> c -> b -> a"},
		{"self", []Task{x("a", "a")}, "DependsOn.On[0]: dependency cycle: a -> a"},
		{"missing", []Task{x("a"), x("b", "a"), x("c", "b", "x")}, `DependsOn.On: task "c" depends on "x", which does not exist`},
		{"recurring parent", []Task{x("a", "tick")}, `task "a" depends on "tick", which is recurring`},
		{"recurring child", []Task{{ID: "a", Type: "x", Schedule: Every(time.Minute), DependsOn: deps("taken")}}, "DependsOn: a recurring task cannot have parents"},
		{"twice in DependsOn", []Task{x("a"), x("b", "a", "a")}, `DependsOn.On[1]: parent "a" named twice`},
		{"twice in a long DependsOn", []Task{x("b", append(numbered("p", 19), "p3")...)}, `DependsOn.On[19]: parent "p3" named twice`},
		{"twice in batch", []Task{x("a"), x("b"), x("a")}, "task default/a is in the batch twice"},
		{"no parents", []Task{{ID: "a", Type: "x", Schedule: After(0), DependsOn: &Deps{}}}, "DependsOn.On names 0 parents"},
		{"bad policy", []Task{{ID: "a", Type: "x", Schedule: After(0), DependsOn: &Deps{On: []string{"taken"}, OnParentFailure: 7}}},
			"DependsOn.OnParentFailure ParentPolicy(7) is not a policy (want cancel, run)"},
		{"bad parent ID", []Task{x("a", "")}, "DependsOn.On[0] must be an ID"},
	} {
		_, err := h.e.SubmitBatch(tc.batch)
		if !errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrInvalidTask with %q", tc.name, err, tc.want)
		}
	}
	// Refused by the engine's state, not the batch's shape: taken exists at version 0.
	if _, err := h.e.SubmitBatch([]Task{x("a"), x("b", "a"), x("taken")}); !errors.Is(err, ErrExists) {
		t.Errorf("batch replacing taken at its version: %v, want ErrExists", err)
	}
	for _, id := range []string{"root", "a", "b", "c"} {
		if _, err := h.e.Get("", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s after refused batches: %v, want ErrNotFound", id, err)
		}
	}
	if st := h.e.Stats(); st.Submitted != 2 || st.Tasks != 2 {
		t.Errorf("stats %+v: want only tick and taken", st)
	}
}

// TestWorkflowMemberIsNotReplaced: a WAITING task, and a parent with children waiting,
// cannot be replaced by a resubmit until they end (ErrExists); once ended, they can.
func TestWorkflowMemberIsNotReplaced(t *testing.T) {
	h := newHarness(t)
	h.e.Register("x", func(context.Context, *Run) error { return nil })
	if _, err := h.e.SubmitBatch([]Task{
		{ID: "p", Type: "x", Schedule: After(time.Hour)},
		{ID: "c", Type: "x", Schedule: After(0), DependsOn: deps("p")},
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p", "c"} {
		_, err := h.e.Submit(Task{ID: id, Type: "x", Schedule: After(0), Version: 2})
		if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "in a workflow") {
			t.Errorf("replacing %s: %v, want ErrExists (in a workflow)", id, err)
		}
	}
	h.fake.Advance(time.Hour)
	h.wait(EventSucceeded, "c")
	h.submit(Task{ID: "c", Type: "x", Schedule: After(0), Version: 2})
	h.wait(EventSucceeded, "c")
}

// TestListShowsWaiting: List by state finds the WAITING tasks, with their parents.
func TestListShowsWaiting(t *testing.T) {
	h := newHarness(t)
	if _, err := h.e.SubmitBatch([]Task{
		{ID: "p", Type: "x", Schedule: After(time.Hour)},
		{ID: "c1", Type: "x", Schedule: After(0), DependsOn: deps("p")},
		{ID: "c2", Type: "x", Schedule: After(0), DependsOn: deps("p", "c1")},
	}); err != nil {
		t.Fatal(err)
	}
	page, _, err := h.e.List(Waiting, "", 10)
	if err != nil || len(page) != 2 || page[0].Task.ID != "c1" || page[1].Task.ID != "c2" ||
		!slices.Equal(page[1].Task.DependsOn.On, []string{"p", "c1"}) {
		t.Fatalf("List(WAITING) = %+v, %v", page, err)
	}
}

// TestDropLeavesChildrenWaiting: a parent dropped (handed over) does not release or
// cancel its children; they wait, counted as orphaned by verify, until dropped too.
func TestDropLeavesChildrenWaiting(t *testing.T) {
	h := newHarness(t)
	if _, err := h.e.SubmitBatch([]Task{
		{ID: "p", Type: "x", Schedule: After(time.Hour)},
		{ID: "c", Type: "x", Schedule: After(0), DependsOn: deps("p")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Drop("", "p"); err != nil {
		t.Fatal(err)
	}
	if st := h.state("c"); st != Waiting {
		t.Fatalf("c is %s after its parent was dropped, want WAITING", st)
	}
	if err := h.e.verify(); err != nil {
		t.Fatal(err)
	}
}

// TestFanOutFanIn10k: 1 root -> 10,000 children -> 1 sink, submitted as one batch
// (sink first), on 8 workers: every child starts after the root ended, the sink after
// every child ended, each task runs once. What an edge costs, and that the cost stays
// flat with the fan's width, is measured by bench's EngineDAG, not here.
func TestFanOutFanIn10k(t *testing.T) {
	const n = 10_000
	e := newRealEngine(t, WithWorkers(8))
	o := newOrder()
	e.Register("x", o.handler(nil))
	children := make([]string, n)
	edges := map[string][]string{}
	batch := []Task{{ID: "sink", Type: "x", Schedule: After(0), DependsOn: &Deps{On: children}}}
	for i := range children {
		children[i] = fmt.Sprint("child", i)
		edges[children[i]] = []string{"root"}
		batch = append(batch, Task{ID: children[i], Type: "x", Schedule: After(0), DependsOn: deps("root")})
	}
	edges["sink"] = children
	batch = append(batch, Task{ID: "root", Type: "x", Schedule: After(0)})
	if _, err := e.SubmitBatch(batch); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "every task to succeed", func() bool { return e.Stats().Succeeded == n+2 })
	if bad := o.early(edges); len(bad) > 0 {
		t.Fatalf("%d children started early, first %v", len(bad), bad[:min(len(bad), 5)])
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.start) != n+2 || o.seq != 2*(n+2) {
		t.Fatalf("%d tasks started, %d starts and ends: want %d tasks, each once", len(o.start), o.seq, n+2)
	}
}

// TestRequeueOfAGoneChild: a dead child whose record (and its parent's) has been dropped
// after its retention is requeued as a task of its own: it ran once its parents had
// ended, so the requeued run waits for none.
func TestRequeueOfAGoneChild(t *testing.T) {
	h := newHarness(t, WithRetention(time.Minute))
	h.e.Register("x", func(context.Context, *Run) error { return nil })
	var failing atomic.Bool
	failing.Store(true)
	h.e.Register("flaky", func(context.Context, *Run) error {
		if failing.Load() {
			return NonRetryable(errors.New("not yet"))
		}
		return nil
	})
	if _, err := h.e.SubmitBatch([]Task{
		{ID: "p", Type: "x", Schedule: After(0)},
		{ID: "c", Type: "flaky", Schedule: After(0), DependsOn: deps("p")},
	}); err != nil {
		t.Fatal(err)
	}
	h.wait(EventDead, "c")
	h.fake.Advance(2 * time.Minute)
	waitfor.Until(t, "both records dropped", func() bool {
		_, errP := h.e.Get("", "p")
		_, errC := h.e.Get("", "c")
		return errors.Is(errP, ErrNotFound) && errors.Is(errC, ErrNotFound)
	})
	failing.Store(false)
	if _, err := h.e.Requeue("", "c"); err != nil {
		t.Fatal(err)
	}
	h.wait(EventSucceeded, "c")
}
