package main

import (
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// maxLateness is the largest lateness the histogram records exactly (larger values are
// clamped to it, and still counted); one hour is beyond any run's grace.
const maxLateness = int64(time.Hour)

// Recorder is loadgen's accounting: it is told which tasks were expected to run and
// records every run of them, and from that computes fired, lost, early and duplicate
// counts and the lateness distribution.
//
// Tasks are numbered 0..n-1. A task is expected unless Reject was called for it (its
// submit failed). Record may be called from any number of goroutines at once; Summary
// may be called at any time and reflects the runs recorded so far. Freeze ends the
// accounting (the last deadline plus grace has passed): a run recorded after it is
// counted only as AfterGrace, so a task that ran too late stays lost. A Record racing
// with Freeze may land on either side of it.
//
// Acked tells it how the target answered each run's ACK (server target). A duplicate run
// is classed when it is recorded: after a confirmed ACK when the task already had one
// (at-least-once never allows that: a failure), otherwise after an unconfirmed ACK (an
// earlier run whose ACK the server never confirmed, or not yet: a run in flight at a
// leader's death). A confirmation racing with the duplicate's Record may land on either
// side, so the count of duplicates after a confirmed ACK can only be low, never high.
//
// With a DAG (NewDAGRecorder), it also keeps each task's first run's start (Record) and
// its first run's end (Ended), and Summary counts the early children: tasks whose first
// run started before some parent's first run had ended (or with a parent that never
// ended). A child's start must come after each parent's end by loadgen's own clock, so
// any early child is a failure. A task's first end is the one that counts: under
// at-least-once a parent may run again, and its child may start after the first end.
type Recorder struct {
	runs      []atomic.Uint32 // runs per task
	rejected  []atomic.Bool   // submits that failed: not expected to run
	confirmed []atomic.Bool   // a run's ACK was confirmed by the target

	fired    atomic.Int64 // runs recorded, duplicates included
	unique   atomic.Int64 // tasks with at least one run
	early    atomic.Int64 // runs before their due time
	strays   atomic.Int64 // runs of an index outside [0, n)
	nRejects atomic.Int64
	frozen   atomic.Bool  // set by Freeze: later runs only count as afterGrace
	after    atomic.Int64 // runs recorded after Freeze

	dupAfterConfirmed atomic.Int64 // duplicate runs of a task whose ACK was confirmed
	unconfirmed       atomic.Int64 // ACKs answered with an error (or never)
	nConfirmed        atomic.Int64 // tasks with a confirmed ACK

	dag    dagSpec        // the workflows' shape (none: starts and ends are nil)
	starts []atomic.Int64 // with a DAG: each task's first run's start, ns (0: none yet)
	ends   []atomic.Int64 // with a DAG: each task's first run's end, ns (0: none yet)

	mu   sync.Mutex
	hist *hdrhistogram.Histogram // lateness in ns of each task's first run; guarded by mu

	expected atomic.Int64 // n minus rejected
	done     chan struct{}
	doneOnce sync.Once
}

// NewRecorder returns a Recorder for n tasks.
func NewRecorder(n int) *Recorder {
	r := &Recorder{
		runs:      make([]atomic.Uint32, n),
		rejected:  make([]atomic.Bool, n),
		confirmed: make([]atomic.Bool, n),
		hist:      hdrhistogram.New(1, maxLateness, 3),
		done:      make(chan struct{}),
	}
	r.expected.Store(int64(n))
	if n == 0 {
		r.doneOnce.Do(func() { close(r.done) })
	}
	return r
}

// NewDAGRecorder returns a Recorder for n tasks in workflows of shape d, which also
// counts early children (d with no DAG: as NewRecorder).
func NewDAGRecorder(n int, d dagSpec) *Recorder {
	r := NewRecorder(n)
	if d.on() {
		r.dag = d
		r.starts = make([]atomic.Int64, n)
		r.ends = make([]atomic.Int64, n)
	}
	return r
}

// Ended records the end of a run of task i at at (ns, Record's clock); only a task's
// first end is kept, and only with a DAG. An index outside [0, n) is ignored.
func (r *Recorder) Ended(i int, at int64) {
	if r.ends == nil || i < 0 || i >= len(r.ends) {
		return
	}
	r.ends[i].CompareAndSwap(0, at)
}

// Reject marks task i as never submitted (its submit failed): it is not expected to run,
// and is not counted lost.
func (r *Recorder) Reject(i int) {
	if i < 0 || i >= len(r.rejected) || r.rejected[i].Swap(true) {
		return
	}
	r.nRejects.Add(1)
	if r.expected.Add(-1) == r.unique.Load() {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

// Record records one run of task i, due at due and run at ran (both in ns on the same
// clock). A run before due is early; a second run of the same task is a duplicate, and
// only a task's first run enters the lateness histogram.
func (r *Recorder) Record(i int, due, ran int64) {
	if r.frozen.Load() {
		r.after.Add(1)
		return
	}
	if i < 0 || i >= len(r.runs) {
		r.strays.Add(1)
		return
	}
	r.fired.Add(1)
	late := ran - due
	if late < 0 {
		r.early.Add(1)
	}
	if r.runs[i].Add(1) != 1 {
		if r.confirmed[i].Load() {
			r.dupAfterConfirmed.Add(1)
		}
		return
	}
	if r.starts != nil {
		r.starts[i].Store(ran)
	}
	v := min(max(late, 0), maxLateness)
	r.mu.Lock()
	_ = r.hist.RecordValue(v) // v is within the histogram's range
	r.mu.Unlock()
	if r.unique.Add(1) == r.expected.Load() {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

// Acked records the answer to the ACK of one run of task i: confirmed (the target took
// it: the task must never run again) or not (an error, a lost connection). An index
// outside [0, n) is ignored (Record counts it as a stray).
func (r *Recorder) Acked(i int, confirmed bool) {
	if i < 0 || i >= len(r.confirmed) {
		return
	}
	if confirmed {
		if !r.confirmed[i].Swap(true) {
			r.nConfirmed.Add(1)
		}
	} else {
		r.unconfirmed.Add(1)
	}
}

// Ran reports whether task i has run at least once (false outside [0, n)).
func (r *Recorder) Ran(i int) bool { return i >= 0 && i < len(r.runs) && r.runs[i].Load() > 0 }

// Unconfirmed returns the ACKs answered with an error so far.
func (r *Recorder) Unconfirmed() int64 { return r.unconfirmed.Load() }

// Confirmed returns the tasks with a confirmed ACK so far, and the tasks expected (n
// minus the rejected ones): once they are equal, the target owes no task a run.
func (r *Recorder) Confirmed() (confirmed, expected int64) {
	return r.nConfirmed.Load(), r.expected.Load()
}

// Freeze ends the accounting: runs recorded from now on are counted as AfterGrace and
// change nothing else.
func (r *Recorder) Freeze() { r.frozen.Store(true) }

// Done is closed once every expected task has run at least once.
func (r *Recorder) Done() <-chan struct{} { return r.done }

// Fired returns the runs recorded so far, duplicates included.
func (r *Recorder) Fired() int64 { return r.fired.Load() }

// Counts is what Summary reports.
type Counts struct {
	Tasks      int   `json:"tasks"`
	Rejected   int64 `json:"rejected"`    // submits that failed
	Fired      int64 `json:"fired"`       // runs, duplicates included
	Unique     int64 `json:"unique"`      // tasks run at least once
	Lost       int64 `json:"lost"`        // expected tasks never run
	Early      int64 `json:"early"`       // runs before their due time
	Duplicates int64 `json:"duplicates"`  // runs beyond a task's first
	Strays     int64 `json:"strays"`      // runs of unknown tasks
	AfterGrace int64 `json:"after_grace"` // runs recorded after Freeze (their tasks count as lost)
	// DupAfterConfirmed is the duplicates of a task whose ACK had been confirmed (must be
	// 0); the rest of Duplicates came after an unconfirmed ACK. UnconfirmedAcks is the
	// ACKs the target answered with an error (only the server target reports ACKs).
	DupAfterConfirmed int64 `json:"duplicates_after_confirmed_ack"`
	UnconfirmedAcks   int64 `json:"unconfirmed_acks"`

	// EarlyChildren is, with a DAG, the tasks whose first run started before a parent's
	// first run had ended (must be 0).
	EarlyChildren int64 `json:"early_children"`

	Lateness Lateness `json:"lateness_ns"`
}

// Lateness holds lateness percentiles (run time minus due time, of each task's first
// run, early runs counted as 0), in ns.
type Lateness struct {
	P50  int64 `json:"p50"`
	P90  int64 `json:"p90"`
	P99  int64 `json:"p99"`
	P999 int64 `json:"p99_9"`
	Max  int64 `json:"max"`
}

// Summary computes the counts from the runs recorded so far. O(n).
func (r *Recorder) Summary() Counts {
	c := Counts{
		Tasks:      len(r.runs),
		Rejected:   r.nRejects.Load(),
		Early:      r.early.Load(),
		Strays:     r.strays.Load(),
		AfterGrace: r.after.Load(),

		DupAfterConfirmed: r.dupAfterConfirmed.Load(),
		UnconfirmedAcks:   r.unconfirmed.Load(),
	}
	for i := range r.runs {
		k := int64(r.runs[i].Load())
		c.Fired += k
		switch {
		case k > 0:
			c.Unique++
			c.Duplicates += k - 1
		case !r.rejected[i].Load():
			c.Lost++
		}
	}
	c.EarlyChildren = r.earlyChildren()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hist.TotalCount() > 0 {
		c.Lateness = Lateness{
			P50:  r.hist.ValueAtQuantile(50),
			P90:  r.hist.ValueAtQuantile(90),
			P99:  r.hist.ValueAtQuantile(99),
			P999: r.hist.ValueAtQuantile(99.9),
			Max:  r.hist.Max(),
		}
	}
	return c
}

// earlyChildren counts the tasks that ran, with a parent whose first run had not ended
// (by the ends recorded so far) when their own first run started. O(tasks + edges).
func (r *Recorder) earlyChildren() int64 {
	var early int64
	for i := range r.starts {
		s := r.starts[i].Load()
		if s == 0 {
			continue // never ran: lost, not early
		}
		lo, hi := r.dag.parents(i)
		for p := lo; p < hi; p++ {
			if e := r.ends[p].Load(); e == 0 || s < e {
				early++
				break
			}
		}
	}
	return early
}

// Failed reports whether the counts break loadgen's promise: a lost, early, rejected or
// unknown run, a run again after a confirmed ACK, or a child run before its parent ended.
func (c Counts) Failed() bool {
	return c.Lost > 0 || c.Early > 0 || c.Rejected > 0 || c.Strays > 0 || c.DupAfterConfirmed > 0 || c.EarlyChildren > 0
}
