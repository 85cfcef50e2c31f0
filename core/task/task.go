package task

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Task is what a user submits: which handler runs it (Type), with what (Payload), when
// (Schedule), and what happens when it fails (Retry, Timeout, Misfire).
type Task struct {
	// Namespace and ID name the task; IDs are unique within a namespace. An empty
	// Namespace is DefaultNamespace.
	Namespace string
	ID        string
	// Type selects the handler registered with Engine.Register.
	Type    string
	Payload []byte
	// Schedule says when it runs; the zero Schedule is invalid.
	Schedule Schedule
	// Retry is applied to every failed attempt; the zero value means a single attempt.
	Retry RetryPolicy
	// Timeout bounds each attempt; the handler's context carries it as a deadline, and an
	// attempt that outlives it is reported timed out even if the handler ignores its
	// context. 0 means Options.DefaultTimeout.
	Timeout time.Duration
	// Misfire says what happens to occurrences of a recurring task that came due while
	// the engine was behind, or while an earlier occurrence was still running or waiting
	// out a retry's backoff, by more than Options.MisfireThreshold.
	Misfire MisfirePolicy
	// Exclusive asks that no two runs of the task ever overlap, even across a failover of
	// the server that dispatches it. The engine alone needs nothing more (a task never has
	// two attempts at once); a server carries it out (see server/tockd).
	Exclusive bool // beside Misfire: one byte, in what was padding
	// Shards, if 2 or more (at most MaxShards), fans each occurrence out into that many
	// runs, each with its own attempts and backoff; the occurrence succeeds once every
	// shard has, and fails (see shards.go) if one ends DEAD. Run.Shard tells a handler
	// which shard it runs. 0 (or 1) is an ordinary task. Two bytes, in what was padding.
	Shards uint16
	// shard is 1 + the shard index of a shard's own record (shards.go); 0 otherwise.
	shard uint16
	// Broadcast fans each occurrence out as Shards does, into as many runs as
	// Options.BroadcastWidth says when it comes due (a server: one per worker subscribed
	// to the type, each run routed to its own). Not with Shards. One byte, in padding.
	Broadcast bool
	// Concurrency, if set, puts the task under a concurrency key: at most the key's limit
	// of its tasks' runs at once (limits.go). The engine keeps its own value, shared by
	// the key's tasks of the same Limit; the one it hands out (Info, Run, DeadLetter) is
	// read-only. One pointer, so that tasks without a key carry 8 B for it.
	Concurrency *Concurrency
	// DependsOn, if set, makes the task wait (WAITING) until the tasks it names have
	// ended, and says what their failure means to it (dag.go). The engine keeps its own
	// copy, which the one it hands out (Info, Run, DeadLetter) is: read-only. One
	// pointer, so that tasks without parents carry 8 B for it.
	DependsOn *Deps
	// Version implements optimistic replacement: submitting an existing ID succeeds only
	// with a higher Version, and replaces the task.
	Version uint64
	// Trace, if set, is the trace context the task was submitted under. The engine
	// neither reads nor checks it: it keeps it with the task and hands it out with each
	// run (Run.Task) and in the events that end an attempt (Event.Trace), so that a
	// server can make the spans of the task's life children of the submitter's. One
	// pointer, so that tasks without one carry 8 B for it; shared, never written by the
	// engine: do not change it after Submit.
	Trace *Trace
}

// Trace is a trace context as text: W3C Trace Context's traceparent and tracestate
// (server/tracing reads and writes them).
type Trace struct {
	Parent string // traceparent: version-traceid-parentid-flags
	State  string // tracestate; empty for none
}

// DefaultNamespace is the namespace of a task submitted without one.
const DefaultNamespace = "default"

// Limits on a task's fields (Options.MaxPayload bounds the payload).
const (
	MaxIDLen        = 256
	MaxTypeLen      = 128
	MaxNamespaceLen = 128
	MaxTimeout      = 24 * time.Hour
)

// defaultRetry is the zero RetryPolicy with its defaults: the policy of a task submitted
// without one, which is valid and so needs no check.
var defaultRetry = RetryPolicy{}.WithDefaults()

// normalize checks everything about t that does not depend on the engine's state, and
// gives its namespace and retry policy their defaults. A task in the default namespace
// with the default policy (the common case) skips the checks those cannot fail.
func (t *Task) normalize(maxPayload int) error {
	defaultNS := t.Namespace == "" || t.Namespace == DefaultNamespace
	if defaultNS {
		t.Namespace = DefaultNamespace
	}
	switch {
	case t.ID == "":
		return fmt.Errorf("%w: empty ID", ErrInvalidTask)
	case len(t.ID) > MaxIDLen || !utf8.ValidString(t.ID):
		return fmt.Errorf("%w: ID must be valid UTF-8 of at most %d bytes", ErrInvalidTask, MaxIDLen)
	case !defaultNS && (len(t.Namespace) > MaxNamespaceLen || !utf8.ValidString(t.Namespace)):
		return fmt.Errorf("%w: namespace must be valid UTF-8 of at most %d bytes", ErrInvalidTask, MaxNamespaceLen)
	case t.Type == "":
		return fmt.Errorf("%w: task %q has no type", ErrInvalidTask, t.ID)
	case len(t.Type) > MaxTypeLen:
		return fmt.Errorf("%w: type longer than %d bytes", ErrInvalidTask, MaxTypeLen)
	case len(t.Payload) > maxPayload:
		return fmt.Errorf("%w: payload of %d bytes exceeds Options.MaxPayload (%d)", ErrInvalidTask, len(t.Payload), maxPayload)
	case t.Timeout < 0 || t.Timeout > MaxTimeout:
		return fmt.Errorf("%w: timeout %v outside [0, %v]", ErrInvalidTask, t.Timeout, MaxTimeout)
	}
	if t.Shards != 0 || t.Broadcast || strings.HasPrefix(t.ID, shardIDPrefix) {
		if err := t.validateShards(); err != nil {
			return fmt.Errorf("%w: task %q: %w", ErrInvalidTask, t.ID, err)
		}
	}
	if t.Concurrency != nil {
		if err := validateConcurrency(t.Concurrency); err != nil {
			return fmt.Errorf("task %q: %w", t.ID, err)
		}
	}
	if err := t.Schedule.Validate(); err != nil {
		return fmt.Errorf("task %q: %w", t.ID, err)
	}
	if t.DependsOn != nil {
		if err := t.validateDeps(); err != nil {
			return fmt.Errorf("task %q: %w", t.ID, err)
		}
	}
	if t.Retry == (RetryPolicy{}) {
		t.Retry = defaultRetry
		return nil
	}
	if err := t.Retry.Validate(); err != nil {
		return fmt.Errorf("task %q: %w", t.ID, err)
	}
	t.Retry = t.Retry.WithDefaults()
	return nil
}

// Run describes one attempt to the handler that executes it.
type Run struct {
	Task    *Task     // the task; read-only, and never changed while the handler runs
	Attempt int       // 1 for the first attempt of an occurrence
	Due     time.Time // when this occurrence (or retry) was due
	// RunID is unique per attempt within the engine and, drawn from a random per-engine
	// base, differs across engines but for a tiny chance (nextRunID states the bound):
	// handlers use it to be idempotent. Never 0.
	RunID uint64
}

// Handler executes one attempt. Returning nil succeeds; an error fails the attempt and
// is retried per the task's RetryPolicy unless wrapped with NonRetryable. ctx carries the
// attempt's deadline and is cancelled when the attempt times out, the task is cancelled,
// or the engine closes. A panic is recovered and counts as a failed attempt. Returning
// ErrDeferred leaves the attempt RUNNING until Engine.Complete(run.RunID, err) reports
// its outcome (or its timeout fails it), freeing the worker in the meantime.
//
// ctx, run and run.Task, and contexts derived from ctx, are valid until the handler
// returns: the engine reuses their memory for later tasks afterwards (see the package's
// invariants). Work handed to another goroutine, a deferred attempt's above all, copies
// what it needs: the RunID, a Task value or its fields. A Payload slice may be kept: its
// bytes are never reused.
type Handler func(ctx context.Context, run *Run) error

// Info is a snapshot of a task's state, for queries.
type Info struct {
	Task      Task
	State     State
	Attempts  int             // attempts of the current occurrence
	LastError string          // of the last failed attempt, if any
	NextRun   time.Time       // when it is next due (zero when none is scheduled)
	History   []AttemptRecord // the current occurrence's failed attempts, oldest first
	Runs      uint64          // attempts over the task's life
	// Shards is, for a sharded task (Task.Shards) whose occurrence has fanned out, each
	// shard's state, by index; nil otherwise.
	Shards []ShardInfo
}
