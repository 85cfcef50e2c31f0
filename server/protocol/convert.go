package protocol

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tock-sched/tock/core/task"
)

// ToTask converts a wire task to the engine's, checking everything the engine checks
// without its state (core/task's own check is unexported, so the task-level rules are
// restated here from its exported limits; schedules and retry policies go through their
// exported Validate). Errors are *Error values whose Field is relative to the task
// ("tid", "schedule.cron", "retry.jitter"): BAD_FIELD for what cannot be represented
// (an unknown zone, a non-zero partition, a kind's field missing, a field another kind
// uses), INVALID_TASK for what the engine's rules refuse. The payload is not copied and
// its size is left to the engine (Options.MaxPayload). It never panics. Cost: O(1), plus
// a cron parse (cached by core/task) and a zone load (cached here) on first sight.
func ToTask(w *Task) (task.Task, error) {
	invalid := func(field, format string, args ...any) error {
		return newError(CodeInvalidTask, field, fmt.Sprintf(format, args...))
	}
	bad := func(field, format string, args ...any) error {
		return newError(CodeBadField, field, fmt.Sprintf(format, args...))
	}
	switch {
	case w.Durability != Ephemeral && w.Durability != Durable:
		return task.Task{}, bad("durability", "must be %q or %q", durNames[Ephemeral], durNames[Durable])
	case w.Partition != 0:
		return task.Task{}, bad("partition", "must be 0: partitions are reserved for the cluster")
	case w.ID == "":
		return task.Task{}, invalid("tid", "empty task ID")
	case len(w.ID) > task.MaxIDLen || !utf8.ValidString(w.ID):
		return task.Task{}, invalid("tid", "must be valid UTF-8 of at most %d bytes", task.MaxIDLen)
	case len(w.Namespace) > task.MaxNamespaceLen || !utf8.ValidString(w.Namespace):
		return task.Task{}, invalid("ns", "must be valid UTF-8 of at most %d bytes", task.MaxNamespaceLen)
	case w.Type == "":
		return task.Task{}, invalid("type", "empty task type")
	case len(w.Type) > task.MaxTypeLen || !utf8.ValidString(w.Type):
		return task.Task{}, invalid("type", "must be valid UTF-8 of at most %d bytes", task.MaxTypeLen)
	case w.Timeout < 0 || time.Duration(w.Timeout) > task.MaxTimeout:
		return task.Task{}, invalid("timeout_ns", "%d outside [0, %d]", w.Timeout, int64(task.MaxTimeout))
	case w.Misfire != task.MisfireFireOnce && w.Misfire != task.MisfireSkip:
		return task.Task{}, bad("misfire", "must be %q or %q", misfireNames[task.MisfireFireOnce], misfireNames[task.MisfireSkip])
	case len(w.ConcurrencyKey) > task.MaxConcurrencyKeyLen || !utf8.ValidString(w.ConcurrencyKey):
		return task.Task{}, invalid("concurrency_key", "must be valid UTF-8 of at most %d bytes", task.MaxConcurrencyKeyLen)
	case w.ConcurrencyLimit > task.MaxConcurrencyLimit:
		return task.Task{}, invalid("concurrency_limit", "%d outside [0, %d]", w.ConcurrencyLimit, task.MaxConcurrencyLimit)
	case w.ConcurrencyLimit != 0 && w.ConcurrencyKey == "":
		return task.Task{}, invalid("concurrency_limit", "set without a concurrency_key")
	case w.Shards == 1 || w.Shards > task.MaxShards:
		return task.Task{}, invalid("shards", "%d outside [2, %d] (absent for none)", w.Shards, task.MaxShards)
	case w.Shards != 0 && (w.ConcurrencyKey != "" || w.Exclusive):
		return task.Task{}, invalid("shards", "a sharded task can have no concurrency_key and cannot be exclusive")
	case w.Broadcast && (w.Shards != 0 || w.ConcurrencyKey != "" || w.Exclusive):
		return task.Task{}, invalid("broadcast", "a broadcast task can have no shards, no concurrency_key and cannot be exclusive")
	}
	var deps *task.Deps
	if w.DependsOn != nil {
		var err error
		if deps, err = toDeps(w); err != nil {
			return task.Task{}, err
		}
	}
	s, err := toSchedule(&w.Schedule)
	if err != nil {
		return task.Task{}, err
	}
	r, err := toRetry(&w.Retry)
	if err != nil {
		return task.Task{}, err
	}
	ns := w.Namespace
	if ns == "" {
		ns = task.DefaultNamespace
	}
	var conc *task.Concurrency
	if w.ConcurrencyKey != "" {
		conc = &task.Concurrency{Key: w.ConcurrencyKey, Limit: int(w.ConcurrencyLimit)}
	}
	var trace *task.Trace
	if ValidTraceparent(w.Traceparent) {
		trace = &task.Trace{Parent: w.Traceparent, State: w.Tracestate}
	}
	return task.Task{
		Namespace:   ns,
		ID:          w.ID,
		Type:        w.Type,
		Payload:     w.Payload,
		Schedule:    s,
		Retry:       r,
		Timeout:     time.Duration(w.Timeout),
		Exclusive:   w.Exclusive,
		Shards:      w.Shards,
		Broadcast:   w.Broadcast,
		Misfire:     w.Misfire,
		Concurrency: conc,
		DependsOn:   deps,
		Version:     w.Version,
		Trace:       trace,
	}, nil
}

// toDeps converts and checks w's parents (w.DependsOn is set), as the engine checks
// them without its state: the field names the bad element ("depends_on[2]"); nil for
// none. A cycle longer than the task itself, a missing or recurring parent are the
// engine's to find (at submit; tockd names the field "depends_on"). O(parents).
func toDeps(w *Task) (*task.Deps, error) {
	on, policy := w.DependsOn.On, w.DependsOn.OnParentFailure
	switch {
	case policy != task.ParentCancel && policy != task.ParentRunAnyway:
		return nil, newError(CodeBadField, "on_parent_failure", fmt.Sprintf("must be %q or %q", parentNames[task.ParentCancel], parentNames[task.ParentRunAnyway]))
	case policy != task.ParentCancel && len(on) == 0:
		return nil, newError(CodeInvalidTask, "on_parent_failure", "set without depends_on")
	case len(on) == 0:
		return nil, nil
	}
	if len(on) > MaxDependsOn {
		return nil, newError(CodeBadField, "depends_on", fmt.Sprintf("%d parents exceed the limit of %d", len(on), MaxDependsOn))
	}
	if w.Schedule.Kind == task.KindEvery || w.Schedule.Kind == task.KindCron {
		return nil, newError(CodeInvalidTask, "depends_on", "a recurring task cannot have parents (only one-shot tasks take part in a workflow)")
	}
	var seen map[string]struct{} // for a long list; a short one is scanned
	if len(on) > 16 {
		seen = make(map[string]struct{}, len(on))
	}
	for i, p := range on {
		field := "depends_on[" + strconv.Itoa(i) + "]"
		dup := false
		if seen != nil {
			_, dup = seen[p]
			seen[p] = struct{}{}
		} else {
			dup = slices.Contains(on[:i], p)
		}
		switch {
		case p == "" || len(p) > task.MaxIDLen || !utf8.ValidString(p):
			return nil, newError(CodeInvalidTask, field, fmt.Sprintf("must be a task ID: valid UTF-8 of 1 to %d bytes", task.MaxIDLen))
		case p == w.ID:
			return nil, newError(CodeInvalidTask, field, fmt.Sprintf("dependency cycle: %s -> %s", p, p))
		case dup:
			return nil, newError(CodeInvalidTask, field, fmt.Sprintf("parent %q named twice", p))
		}
	}
	return &task.Deps{On: on, OnParentFailure: policy}, nil
}

func toSchedule(w *Schedule) (task.Schedule, error) {
	if w.Kind < task.KindAt || w.Kind > task.KindCron {
		return task.Schedule{}, newError(CodeBadField, "schedule.kind", "must be one of at, after, every, cron")
	}
	if f := w.strayField(); f != "" {
		return task.Schedule{}, newError(CodeBadField, "schedule."+f, "not used by kind "+kindNames[w.Kind])
	}
	if w.Anchor != task.FixedRate && w.Anchor != task.FixedDelay {
		return task.Schedule{}, newError(CodeBadField, "schedule.anchor", "must be rate or delay")
	}
	s := task.Schedule{Kind: w.Kind, Delay: time.Duration(w.Delay), Interval: time.Duration(w.Interval), Anchor: w.Anchor, Cron: w.Cron}
	if w.Kind == task.KindAt {
		s.At = time.Unix(0, w.At).UTC()
	}
	if w.TZ != "" {
		loc, err := loadLocation(w.TZ)
		if err != nil {
			return task.Schedule{}, newError(CodeBadField, "schedule.tz", err.Error())
		}
		s.Location = loc
	}
	if err := s.Validate(); err != nil {
		return task.Schedule{}, newError(CodeInvalidTask, "schedule."+kindKey[w.Kind], err.Error())
	}
	return s, nil
}

// toRetry converts and validates a policy. The engine's Validate names Go fields in
// prose; to name the wire key, each field is first validated alone (the others zero, so
// at their defaults), and only the cross-field rules are left to the whole policy, where
// they always involve max_backoff_ns.
func toRetry(w *Retry) (task.RetryPolicy, error) {
	if w.MaxAttempts > task.MaxAttemptsLimit {
		return task.RetryPolicy{}, newError(CodeInvalidTask, "retry.max_attempts", fmt.Sprintf("%d exceeds %d", w.MaxAttempts, task.MaxAttemptsLimit))
	}
	p := task.RetryPolicy{
		MaxAttempts:      int(w.MaxAttempts),
		InitialBackoff:   time.Duration(w.InitialBackoff),
		MaxBackoff:       time.Duration(w.MaxBackoff),
		Multiplier:       w.Multiplier,
		Jitter:           w.Jitter,
		MaxRetryDuration: time.Duration(w.MaxRetry),
	}
	alone := [...]struct {
		key string
		p   task.RetryPolicy
	}{
		{"retry.initial_backoff_ns", task.RetryPolicy{InitialBackoff: p.InitialBackoff}},
		{"retry.max_backoff_ns", task.RetryPolicy{MaxBackoff: p.MaxBackoff, InitialBackoff: min(p.MaxBackoff, time.Second)}},
		{"retry.multiplier", task.RetryPolicy{Multiplier: p.Multiplier}},
		{"retry.jitter", task.RetryPolicy{Jitter: p.Jitter}},
		{"retry.max_retry_ns", task.RetryPolicy{MaxRetryDuration: p.MaxRetryDuration}},
	}
	for _, a := range alone {
		if err := a.p.Validate(); err != nil {
			return task.RetryPolicy{}, newError(CodeInvalidTask, a.key, err.Error())
		}
	}
	if err := p.Validate(); err != nil {
		return task.RetryPolicy{}, newError(CodeInvalidTask, "retry.max_backoff_ns", err.Error())
	}
	return p, nil
}

// The zone cache maps an IANA name to its *time.Location or the error loading it.
// time.LoadLocation reads the zone database on every call (tens of µs); submits name few
// zones, and a flood of distinct names from clients costs a reload, never unbounded
// memory (the cache is cleared past zoneCacheMax entries, as core/task's cron cache is).
const zoneCacheMax = 1024

type zoneEntry struct {
	loc *time.Location
	err error
}

var (
	zoneCache     sync.Map // string -> zoneEntry
	zoneCacheSize atomic.Int64
)

// errLocalZone: "Local" is the machine's zone, which differs between hosts.
var errLocalZone = errors.New(`"Local" is not a zone: name an IANA zone such as "Europe/Berlin"`)

func loadLocation(name string) (*time.Location, error) {
	if v, ok := zoneCache.Load(name); ok {
		e := v.(zoneEntry)
		return e.loc, e.err
	}
	var e zoneEntry
	if name == "Local" {
		e.err = errLocalZone
	} else {
		e.loc, e.err = time.LoadLocation(name)
	}
	if zoneCacheSize.Add(1) > zoneCacheMax {
		zoneCache.Clear()
		zoneCacheSize.Store(0)
	}
	zoneCache.Store(name, e)
	return e.loc, e.err
}

// Unix nanoseconds represent 1677-09-21 to 2262-04-11; time.Time.UnixNano is undefined
// outside.
var (
	minUnixNano = time.Unix(0, math.MinInt64)
	maxUnixNano = time.Unix(0, math.MaxInt64)
)

// UnixNano returns t as Unix nanoseconds, 0 for the zero time, and false for a time
// outside the range an int64 of nanoseconds can hold.
func UnixNano(t time.Time) (int64, bool) {
	if t.IsZero() {
		return 0, true
	}
	if t.Before(minUnixNano) || t.After(maxUnixNano) {
		return 0, false
	}
	return t.UnixNano(), true
}

// unixNano is UnixNano for times that come from the engine (run records, next runs):
// out-of-range ones are clamped, never garbage.
func unixNano(t time.Time) int64 {
	if v, ok := UnixNano(t); ok {
		return v
	}
	if t.Before(minUnixNano) {
		return math.MinInt64
	}
	return math.MaxInt64
}

// FromTask converts an engine task to the wire with durability class d. It fails with a
// BAD_FIELD *Error for what the wire cannot carry: a KindAt time outside Unix-nanosecond
// range, or a cron Location that is not a loadable IANA zone (time.Local, time.FixedZone).
// O(1) (a zone name is checked through the cache).
func FromTask(t task.Task, d Durability) (Task, error) {
	w := Task{
		Namespace:  t.Namespace,
		ID:         t.ID,
		Type:       t.Type,
		Payload:    t.Payload,
		Timeout:    int64(t.Timeout),
		Misfire:    t.Misfire,
		Version:    t.Version,
		Durability: d,
		Exclusive:  t.Exclusive,
		Shards:     t.Shards,
		Broadcast:  t.Broadcast,
		Retry: Retry{
			MaxAttempts:    uint64(max(t.Retry.MaxAttempts, 0)),
			InitialBackoff: int64(t.Retry.InitialBackoff),
			MaxBackoff:     int64(t.Retry.MaxBackoff),
			Multiplier:     t.Retry.Multiplier,
			Jitter:         t.Retry.Jitter,
			MaxRetry:       int64(t.Retry.MaxRetryDuration),
		},
	}
	if t.Retry.MaxAttempts < 0 {
		return Task{}, newError(CodeBadField, "retry.max_attempts", "negative")
	}
	if c := t.Concurrency; c != nil {
		switch {
		case c.Key == "":
			return Task{}, newError(CodeInvalidTask, "concurrency_key", "empty: a task.Concurrency needs a Key")
		case c.Limit < 0:
			return Task{}, newError(CodeInvalidTask, "concurrency_limit", fmt.Sprintf("%d is negative", c.Limit))
		}
		w.ConcurrencyKey, w.ConcurrencyLimit = c.Key, uint64(c.Limit)
	}
	if tr := t.Trace; tr != nil {
		w.Traceparent, w.Tracestate = tr.Parent, tr.State
	}
	w.DependsOn = t.DependsOn
	s := t.Schedule
	w.Schedule = Schedule{Kind: s.Kind}
	switch s.Kind {
	case task.KindAt:
		at, ok := UnixNano(s.At)
		if !ok {
			return Task{}, newError(CodeBadField, "schedule.at", fmt.Sprintf("%v is outside the range of Unix nanoseconds", s.At))
		}
		w.Schedule.At = at
	case task.KindAfter:
		w.Schedule.Delay = int64(s.Delay)
	case task.KindEvery:
		w.Schedule.Interval, w.Schedule.Anchor = int64(s.Interval), s.Anchor
	case task.KindCron:
		w.Schedule.Cron = s.Cron
		if s.Location != nil && s.Location != time.UTC {
			name := s.Location.String()
			if _, err := loadLocation(name); err != nil {
				return Task{}, newError(CodeBadField, "schedule.tz", fmt.Sprintf("zone %q cannot be sent: %v", name, err))
			}
			w.Schedule.TZ = name
		}
	}
	return w, nil
}

// FromInfo converts a task snapshot to the wire, with the task's durability class.
func FromInfo(in task.Info, d Durability) (Info, error) {
	t, err := FromTask(in.Task, d)
	if err != nil {
		return Info{}, err
	}
	return Info{
		Task:      t,
		State:     in.State,
		Attempts:  uint64(max(in.Attempts, 0)),
		LastError: in.LastError,
		NextRun:   unixNano(in.NextRun),
		Runs:      in.Runs,
		History:   fromAttempts(in.History),
	}, nil
}

// FromDeadLetter converts a dead letter to the wire, with its task's durability class.
func FromDeadLetter(dl task.DeadLetter, d Durability) (DeadLetter, error) {
	t, err := FromTask(dl.Task, d)
	if err != nil {
		return DeadLetter{}, err
	}
	return DeadLetter{Task: t, Attempts: fromAttempts(dl.Attempts), DiedAt: unixNano(dl.DiedAt), Reason: dl.Reason}, nil
}

func fromAttempts(as []task.AttemptRecord) []AttemptRecord {
	if len(as) == 0 {
		return nil
	}
	out := make([]AttemptRecord, len(as))
	for i, a := range as {
		out[i] = AttemptRecord{Attempt: uint64(max(a.Attempt, 0)), Start: unixNano(a.Start), End: unixNano(a.End), Err: a.Err}
	}
	return out
}
