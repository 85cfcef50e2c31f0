package task

import (
	"strings"
	"sync/atomic"
	"time"
)

// EventKind names a state change reported to Options.OnEvent.
type EventKind uint8

const (
	EventSubmitted EventKind = iota + 1 // accepted, first occurrence scheduled
	EventStarted                        // an attempt was handed to a handler
	EventSucceeded                      // an attempt returned nil
	EventRetrying                       // an attempt failed; a retry is scheduled
	EventDead                           // an occurrence failed for good: in the dead-letter queue
	EventTimedOut                       // an attempt outlived its timeout (followed by Retrying or Dead)
	EventCancelled                      // cancelled by the user
	EventMisfired                       // occurrences of a recurring task were skipped or merged
)

var eventNames = [...]string{"", "submitted", "started", "succeeded", "retrying", "dead", "timed out", "cancelled", "misfired"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k > 0 {
		return eventNames[k]
	}
	return "unknown"
}

// Event describes one state change.
type Event struct {
	Kind      EventKind
	Namespace string
	ID        string
	Version   uint64 // the task's version: tells a replaced task's last events from its successor's
	Type      string
	Attempt   int
	Err       error         // Retrying, Dead, TimedOut
	Lateness  time.Duration // Started: start time minus due time
	Duration  time.Duration // Succeeded, Retrying, Dead: the attempt's run time
	Missed    int           // Misfired: occurrences skipped or merged
	// RunID names the attempt: Started, Succeeded, Retrying, Dead and TimedOut after an
	// attempt; Cancelled, the attempt it stopped (0 when none was running or due).
	RunID uint64
	// Trace is the task's Task.Trace (nil for none): Succeeded, Retrying and Dead after
	// an attempt.
	Trace *Trace
}

// OfShard reports whether ev is of a shard's own record (Task.Shards, Task.Broadcast):
// its ID is the engine's name for the shard, not a task's, and a shard that ends DEAD
// files no dead letter (its task's occurrence does, with an event of its own). A hook
// that acts on a task's events (alerts, records) skips these. Cost: O(1).
func (ev *Event) OfShard() bool { return strings.HasPrefix(ev.ID, shardIDPrefix) }

// latencyBounds are the histogram buckets' upper bounds, 50 µs to 1 min: the range in
// which a scheduler's lateness and a task's run time are worth telling apart.
var latencyBounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
	10 * time.Second, 30 * time.Second, time.Minute,
}

// histogram counts durations into latencyBounds; each worker owns one, so the atomics
// are uncontended (they only make concurrent reads by Stats safe).
type histogram struct {
	counts [len(latencyBounds) + 1]atomic.Uint64 // last: above every bound
	sum    atomic.Int64                          // nanoseconds
}

func (h *histogram) observe(d time.Duration) {
	// Binary search: the first bound >= d (len(latencyBounds) when above every bound).
	lo, hi := 0, len(latencyBounds)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if d > latencyBounds[mid] {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	h.counts[lo].Add(1)
	h.sum.Add(int64(d))
}

// Histogram is a snapshot in Prometheus's shape: cumulative counts per upper bound.
type Histogram struct {
	Bounds []time.Duration // upper bounds, ascending; +Inf is implied by Count
	Counts []uint64        // Counts[i]: observations <= Bounds[i] (cumulative)
	Count  uint64
	Sum    time.Duration
}

func (s *Histogram) add(h *histogram) {
	if s.Bounds == nil {
		s.Bounds = latencyBounds[:]
		s.Counts = make([]uint64, len(latencyBounds))
	}
	cum := uint64(0)
	for i := range h.counts {
		cum += h.counts[i].Load()
		if i < len(s.Counts) {
			s.Counts[i] += cum
		}
	}
	s.Count += cum
	s.Sum += time.Duration(h.sum.Load())
}

// workerStats are counted by one worker goroutine.
type workerStats struct {
	started, panics, lateResults atomic.Uint64
	running                      atomic.Int32 // 1 while in a handler
	lateness, duration           histogram
}

// Stats is a snapshot of the engine's counters and gauges.
type Stats struct {
	Submitted uint64 // tasks accepted
	Started   uint64 // attempts handed to handlers
	Succeeded uint64 // attempts that returned nil
	Failed    uint64 // attempts that failed (error, panic, timeout, no handler)
	Retried   uint64 // retries scheduled
	Dead      uint64 // occurrences given up on (added to the dead-letter queue)
	Cancelled uint64
	TimedOut  uint64 // attempts that outlived their timeout
	Panics    uint64 // handler panics recovered
	Misfired  uint64 // occurrences of recurring tasks skipped or merged by a misfire policy
	// LateResults counts handler returns ignored because the attempt had already timed out
	// or the task been cancelled.
	LateResults uint64

	Tasks       int // task records held
	Queued      int // due tasks waiting for a worker
	Running     int // attempts in handlers
	HungWorkers int // workers left running a handler past its timeout
	DeadLetters int // entries in the dead-letter queue
	DLQEvicted  uint64
	// WaitingOnLimit counts the runs due but held back by a concurrency key's or a
	// rate limit now; LimitWaits, the times a run was held back (a run held by both
	// counts twice).
	WaitingOnLimit int
	LimitWaits     uint64

	Lateness Histogram // attempt start minus due time
	Duration Histogram // attempt run time
}
