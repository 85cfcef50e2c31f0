package protocol

import (
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tock-sched/tock/core/task"
)

// Durability is a task's durability class, stated in every submit and every reply that
// concerns a task. The zero value is not a class: the field is required.
type Durability uint8

const (
	// Ephemeral tasks live in the leader's memory only: gone if it dies.
	Ephemeral Durability = 1
	// Durable tasks are recorded in etcd before the submit is acknowledged.
	Durable Durability = 2
)

func (d Durability) String() string {
	if n := enumName(durNames[:], d); n != "" {
		return n
	}
	return "Durability(" + strconv.Itoa(int(d)) + ")"
}

// Role says what a connection is for; it is fixed by HELLO.
type Role uint8

const (
	RoleClient Role = 1 // submits and queries
	RoleWorker Role = 2 // also subscribes, receives FIRE, sends ACK and NACK
)

func (r Role) String() string {
	if n := enumName(roleNames[:], r); n != "" {
		return n
	}
	return "Role(" + strconv.Itoa(int(r)) + ")"
}

// Limits on decoded values (PROTOCOL.md states each beside its key). Strings that name a
// task use the engine's own limits (task.MaxIDLen and friends).
const (
	MaxNameLen   = 128      // HELLO/WELCOME names, node ID, stat names
	MaxTokenLen  = 1024     // HELLO token
	MaxTextLen   = 64 << 10 // error messages, NACK errors, last errors, dead-letter reasons
	MaxCursorLen = 1024     // paging cursors
	MaxCronLen   = 256      // a cron expression
	MaxTZLen     = 128      // an IANA zone name
	MaxBatch     = 1000     // tasks in one SUBMIT_BATCH
	// MaxTraceparentLen and MaxTracestateLen bound a task's and a FIRE's trace context
	// (W3C Trace Context): a version-00 traceparent is 55 bytes, later versions may
	// append fields; 512 bytes of tracestate is what the W3C asks every vendor to pass on.
	MaxTraceparentLen = 128
	MaxTracestateLen  = 512
	// MaxDependsOn bounds a task's "depends_on": the engine's own bound on a task's
	// parents (task.MaxParents, 65,536); the frame (max_frame) bounds it too.
	MaxDependsOn = task.MaxParents
	MaxTypes     = 1024   // task types in one SUBSCRIBE
	MaxPageItems = 10_000 // items in one TASK_PAGE or DLQ_PAGE
	MaxStats     = 1024   // entries in each STATS_REPLY map
	maxLeaderLen = 256    // NOT_LEADER address
	maxStateLen  = 16     // a state name
	maxEnumLen   = 16     // kind, anchor, misfire, durability, role
	maxPayload   = MaxFrameLimit
)

// Task is a task on the wire: core/task.Task plus the durability class and the
// partition. Times are Unix nanoseconds, durations nanoseconds. ToTask turns it into
// the engine's Task, checking what the engine checks; FromTask goes the other way.
type Task struct {
	Namespace string // "ns"; empty means task.DefaultNamespace
	ID        string // "tid"
	Type      string // "type"
	Payload   []byte // "payload"; empty is nil
	Schedule  Schedule
	Retry     Retry
	Timeout   int64 // "timeout_ns"
	Version   uint64
	Partition uint64 // reserved for the cluster; must be 0 for now
	// The one-byte fields share one word (a decoded batch holds a Task per task).
	Misfire    task.MisfirePolicy
	Durability Durability
	Exclusive  bool // "exclusive": no two runs overlap, even across a failover
	// Shards ("shards"), 2 to task.MaxShards, fans each occurrence out into that many
	// runs (task.Task.Shards); absent (0) means none. In the word the one-byte fields share.
	Shards uint16
	// Broadcast ("broadcast"): each occurrence runs once on every worker subscribed to
	// the type when it comes due (task.Task.Broadcast). Not with Shards.
	Broadcast bool
	// ConcurrencyKey ("concurrency_key") and ConcurrencyLimit ("concurrency_limit") are
	// task.Concurrency: at most the key's limit of runs at once; no key means none.
	ConcurrencyKey   string
	ConcurrencyLimit uint64
	// Traceparent ("traceparent") and Tracestate ("tracestate") are the W3C Trace
	// Context the task was submitted under (task.Trace); empty means none. ToTask drops
	// a traceparent that does not parse, with its tracestate (ValidTraceparent).
	Traceparent string
	Tracestate  string
	// DependsOn, if set, is the task's parents: its On is "depends_on", the IDs of the
	// task's parents in its namespace (1 to MaxDependsOn of them), and its
	// OnParentFailure "on_parent_failure", what a parent that ends DEAD or CANCELLED
	// does to it. Nil, or no IDs, means none, and then OnParentFailure must be the
	// default (task.ParentCancel). One pointer, so that a task without parents carries
	// 8 B for it; FromTask shares the engine's (read-only) value.
	DependsOn *task.Deps
}

// Parents returns the IDs of t's parents (DependsOn.On), nil for none.
func (t *Task) Parents() []string {
	if t.DependsOn == nil {
		return nil
	}
	return t.DependsOn.On
}

// deps returns t.DependsOn, made on first use (decoding).
func (t *Task) deps() *task.Deps {
	if t.DependsOn == nil {
		t.DependsOn = &task.Deps{}
	}
	return t.DependsOn
}

// Schedule is a task.Schedule on the wire. Only the field of its Kind may be non-zero
// (Anchor only for KindEvery, TZ only for KindCron).
type Schedule struct {
	Kind     task.Kind
	At       int64       // "at": Unix ns, KindAt
	Delay    int64       // "delay": ns, KindAfter
	Interval int64       // "interval": ns, KindEvery
	Anchor   task.Anchor // "anchor": KindEvery
	Cron     string      // "cron": KindCron
	TZ       string      // "tz": IANA zone name, KindCron; empty means UTC
}

// Retry is a task.RetryPolicy on the wire; zero fields take the engine's defaults.
type Retry struct {
	MaxAttempts    uint64  // "max_attempts"
	InitialBackoff int64   // "initial_backoff_ns"
	MaxBackoff     int64   // "max_backoff_ns"
	Multiplier     float64 // "multiplier"
	Jitter         float64 // "jitter"
	MaxRetry       int64   // "max_retry_ns"
}

// Info is a snapshot of a task (task.Info on the wire).
type Info struct {
	Task      Task
	State     task.State
	Attempts  uint64          // attempts of the current occurrence
	LastError string          // of the last failed attempt
	NextRun   int64           // Unix ns; 0 when none is scheduled
	Runs      uint64          // attempts over the task's life
	History   []AttemptRecord // the current occurrence's failed attempts, oldest first
	Cut
}

// Cut says what a server left out of a snapshot or dead letter, to honour the request's
// omit_payload or to make the reply fit max_frame.
type Cut struct {
	// PayloadLen ("payload_len"), when not 0, says the task's payload was left out (its
	// Payload is empty) and how long it is.
	PayloadLen uint64
	// Truncated ("truncated") says the error texts (last error, reason, each attempt's)
	// were cut to their first bytes and the attempt list to its first and latest.
	Truncated bool
}

// AttemptRecord is one attempt (task.AttemptRecord on the wire).
type AttemptRecord struct {
	Attempt    uint64
	Start, End int64 // Unix ns; End 0 while running
	Err        string
}

// DeadLetter is a dead-letter queue entry (task.DeadLetter on the wire).
type DeadLetter struct {
	Task     Task
	Attempts []AttemptRecord
	DiedAt   int64 // Unix ns
	Reason   string
	Cut
}

// ItemResult is the outcome of one task of a SUBMIT_BATCH, in the batch's order: on
// success Code is 0 and State, NextRun and Version say what was scheduled; on failure
// Code, Message and Field say why (Field relative to the task, e.g. "schedule.cron").
type ItemResult struct {
	Namespace  string
	ID         string
	Durability Durability
	State      task.State // 0 on failure
	NextRun    int64
	Version    uint64
	Code       Code
	Message    string
	Field      string
}

// The names of each enum on the wire, indexed by value: core/task's own tables for the
// schedule model's enums (one table each, which String also reads), this package's for
// its own.
var (
	kindNames    = task.KindNames()
	anchorNames  = task.AnchorNames()
	misfireNames = task.MisfireNames()
	parentNames  = task.ParentPolicyNames()
	durNames     = [...]string{Ephemeral: "ephemeral", Durable: "durable"}
	roleNames    = [...]string{RoleClient: "client", RoleWorker: "worker"}
)

// enumName returns names[v], or "" for a value with no name.
func enumName[T ~uint8](names []string, v T) string {
	if int(v) < len(names) {
		return names[v]
	}
	return ""
}

// enum reads a string that must be one of names (names[0] may be "" for "no value"),
// comparing it in place: a valid name costs no allocation, and no UTF-8 check (the
// names are).
func enum[T ~uint8](d *dec, names []string) (T, *Error) {
	s, err := d.r.strRaw(maxEnumLen)
	if err != nil {
		return 0, err
	}
	for i, n := range names {
		if n != "" && n == string(s) {
			return T(i), nil
		}
	}
	if err := d.r.utf8(s); err != nil {
		return 0, err
	}
	return 0, d.r.badField("%q is not one of %v", s, nonEmpty(names))
}

func nonEmpty(names []string) []string {
	var out []string
	for _, n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// state reads a state name (as task.State.String writes it, in any case), without
// allocating.
func (d *dec) state() (task.State, *Error) {
	s, err := d.r.strBytes(maxStateLen)
	if err != nil {
		return 0, err
	}
	st, ok := task.ParseStateBytes(s)
	if !ok {
		return 0, d.r.badField("%q is not a task state", s)
	}
	return st, nil
}

// putEnum writes v's name, or records a failure for a value with no name.
func putEnum[T ~uint8](c *enc, key string, names []string, v T) {
	c.str(key)
	n := enumName(names, v)
	if n == "" {
		c.fail(key, "value "+strconv.Itoa(int(v))+" has no name on the wire")
	}
	c.str(n)
}

func putState(c *enc, key string, s task.State) {
	c.str(key)
	if _, err := task.ParseState(s.String()); err != nil {
		c.fail(key, "not a task state: "+s.String())
	}
	c.str(s.String())
}

// ---- the hand-written map types ----
//
// A task, its schedule and retry policy, and a batch item's result are on the hot paths
// of SUBMIT, SUBMIT_BATCH and BATCH_RESULT, so each keeps its own encoder and a set
// switch instead of a spec (which, for these, measured 58-78% slower encoding a batch).
// What they share with the specs is how their tables are made: from key names, the
// required ones named too.

// maxHandKeys bounds a hand-written map type's keys: one bit each in the presence mask
// (a uint64). Its encoder writes the header with mapLen, a fixmap or a map 16.
const maxHandKeys = 64

// handTable is the field table of the hand-written map type T: its keys in the order
// T's encoder writes them (key i is read by T's set(d, i)), and the names of the keys T
// requires, from which the required mask comes, so that moving a key cannot make
// another one required. The table is checked when T has a checkFields rule. It panics
// at initialisation on a required name that is not a key, or a bad key list (checkKeys).
func handTable[T any, P interface {
	*T
	decodable
}](keys []string, required ...string) fieldTable {
	checkKeys(keys, maxHandKeys)
	t := fieldTable{keys: keys, read: setBy[T, P]}
	for _, k := range required {
		t.required |= t.bit(k)
	}
	_, t.checked = any(P(new(T))).(checker)
	return t
}

// ---- Task ----

var taskFields = handTable[Task](
	[]string{"ns", "tid", "type", "payload", "schedule", "retry", "timeout_ns", "misfire", "version", "durability", "partition", "exclusive",
		"concurrency_key", "concurrency_limit", "traceparent", "tracestate", "depends_on", "on_parent_failure", "shards", "broadcast"},
	"tid", "type", "schedule", "durability")

func (t *Task) fields() *fieldTable { return &taskFields }

func (t *Task) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		t.Namespace, err = d.name(task.MaxNamespaceLen)
	case 1:
		// A view of the body until checkFields copies it out with the payload.
		var b []byte
		if b, err = d.r.strBytes(task.MaxIDLen); len(b) > 0 {
			t.ID = unsafe.String(&b[0], len(b))
		}
	case 2:
		t.Type, err = d.name(task.MaxTypeLen)
	case 3:
		t.Payload, err = d.binView(maxPayload) // a view of the body, as the ID
	case 4:
		err = d.sub(&t.Schedule)
	case 5:
		err = d.sub(&t.Retry)
	case 6:
		t.Timeout, err = d.r.int()
	case 7:
		t.Misfire, err = enum[task.MisfirePolicy](d, misfireNames[:])
	case 8:
		t.Version, err = d.r.uint()
	case 9:
		t.Durability, err = enum[Durability](d, durNames[:])
	case 10:
		t.Partition, err = d.r.uint()
	case 11:
		t.Exclusive, err = d.r.bool()
	case 12:
		t.ConcurrencyKey, err = d.name(task.MaxConcurrencyKeyLen) // keys repeat: interned
	case 13:
		t.ConcurrencyLimit, err = d.r.uint()
	case 14:
		t.Traceparent, err = d.r.str(MaxTraceparentLen)
	case 15:
		t.Tracestate, err = d.r.str(MaxTracestateLen)
	case 16:
		t.deps().On, err = readEach(d, MaxDependsOn, taskIDs)
	case 17:
		t.deps().OnParentFailure, err = enum[task.ParentPolicy](d, parentNames)
	case 18:
		var n uint64
		n, err = d.uintMax(task.MaxShards)
		t.Shards = uint16(n)
	case 19:
		t.Broadcast, err = d.r.bool()
	}
	return err
}

// sharedPayloadMax is the largest payload decoded into one buffer with its task's ID.
// It bounds what a task ID kept after its payload was dropped (a dead letter's, which
// copies the payload; a key in a map) can keep alive; a larger payload gets a buffer
// of its own.
const sharedPayloadMax = 256

// checkFields copies the ID and the payload, read as views of the body (set), out of it:
// into one buffer, the ID's bytes then the payload's, when the payload is at most
// sharedPayloadMax bytes (a SUBMIT_BATCH then allocates one object a task for both, not
// two), else each into its own. The payload's capacity is cut to its length, so an
// append never writes over another value; nothing writes the buffer again.
func (t *Task) checkFields(*dec, uint64) *Error {
	id, p := t.ID, t.Payload
	if len(p) > sharedPayloadMax {
		t.ID, t.Payload = strings.Clone(id), slices.Clone(p)
		return nil
	}
	if len(id)+len(p) == 0 {
		t.Payload = nil
		return nil
	}
	buf := make([]byte, len(id)+len(p))
	copy(buf, id)
	copy(buf[len(id):], p)
	t.ID = unsafe.String(&buf[0], len(id))
	if t.Payload = nil; len(p) > 0 {
		t.Payload = buf[len(id):len(buf):len(buf)]
	}
	return nil
}

// taskIDs reads one task ID of a "depends_on" (not interned: IDs rarely repeat).
func taskIDs(d *dec, id *string) (err *Error) {
	*id, err = d.str(task.MaxIDLen)
	return err
}

func (t *Task) encode(c *enc) {
	c.mapLen(4 + count(t.Namespace != "", len(t.Payload) > 0, t.Retry != Retry{}, t.Timeout != 0,
		t.Misfire != task.MisfireFireOnce, t.Version != 0, t.Partition != 0, t.Exclusive, t.ConcurrencyKey != "", t.ConcurrencyLimit != 0,
		t.Traceparent != "", t.Tracestate != "", len(t.Parents()) > 0, t.DependsOn != nil && t.DependsOn.OnParentFailure != task.ParentCancel,
		t.Shards != 0, t.Broadcast))
	if t.Namespace != "" {
		c.kStr("ns", t.Namespace)
	}
	c.kStr("tid", t.ID)
	c.kStr("type", t.Type)
	if len(t.Payload) > 0 {
		c.str("payload")
		c.bin(t.Payload)
	}
	c.str("schedule")
	t.Schedule.encode(c)
	if t.Retry != (Retry{}) {
		c.str("retry")
		t.Retry.encode(c)
	}
	if t.Timeout != 0 {
		c.kInt("timeout_ns", t.Timeout)
	}
	if t.Misfire != task.MisfireFireOnce {
		putEnum(c, "misfire", misfireNames[:], t.Misfire)
	}
	if t.Version != 0 {
		c.kUint("version", t.Version)
	}
	putEnum(c, "durability", durNames[:], t.Durability)
	if t.Partition != 0 {
		c.kUint("partition", t.Partition)
	}
	if t.Exclusive {
		c.str("exclusive")
		c.bool(true)
	}
	if t.ConcurrencyKey != "" {
		c.kStr("concurrency_key", t.ConcurrencyKey)
	}
	if t.ConcurrencyLimit != 0 {
		c.kUint("concurrency_limit", t.ConcurrencyLimit)
	}
	if t.Traceparent != "" {
		c.kStr("traceparent", t.Traceparent)
	}
	if t.Tracestate != "" {
		c.kStr("tracestate", t.Tracestate)
	}
	if d := t.DependsOn; d != nil {
		if len(d.On) > 0 {
			if len(d.On) > MaxDependsOn {
				c.fail("depends_on", strconv.Itoa(len(d.On))+" elements exceed the limit of "+strconv.Itoa(MaxDependsOn))
			}
			c.str("depends_on")
			c.arrayLen(len(d.On))
			for _, id := range d.On {
				c.str(id)
			}
		}
		if d.OnParentFailure != task.ParentCancel {
			putEnum(c, "on_parent_failure", parentNames, d.OnParentFailure)
		}
	}
	if t.Shards != 0 {
		c.kUint("shards", uint64(t.Shards))
	}
	if t.Broadcast {
		c.str("broadcast")
		c.bool(true)
	}
}

// ---- Schedule ----

var scheduleFields = handTable[Schedule]([]string{"kind", "at", "delay", "interval", "anchor", "cron", "tz"}, "kind")

func (s *Schedule) fields() *fieldTable { return &scheduleFields }

func (s *Schedule) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		s.Kind, err = enum[task.Kind](d, kindNames[:])
	case 1:
		s.At, err = d.r.int()
	case 2:
		s.Delay, err = d.r.int()
	case 3:
		s.Interval, err = d.r.int()
	case 4:
		s.Anchor, err = enum[task.Anchor](d, anchorNames[:])
	case 5:
		s.Cron, err = d.r.str(MaxCronLen)
	case 6:
		s.TZ, err = d.r.str(MaxTZLen)
	}
	return err
}

// kindKey is the key that carries each kind's time, and kindBit its presence bit.
var (
	kindKey = [...]string{task.KindAt: "at", task.KindAfter: "delay", task.KindEvery: "interval", task.KindCron: "cron"}
	kindBit = func() (bits [len(kindKey)]uint64) {
		for k, key := range kindKey {
			if key != "" {
				bits[k] = scheduleFields.bit(key)
			}
		}
		return bits
	}()
)

// checkFields requires the key of the schedule's kind and refuses non-zero values in
// the keys of other kinds (a client that sent "after" with an "at" is confused).
func (s *Schedule) checkFields(d *dec, present uint64) *Error {
	if present&kindBit[s.Kind] == 0 {
		return d.at(d.r.badField("required for kind %q", kindNames[s.Kind]), kindKey[s.Kind])
	}
	if f := s.strayField(); f != "" {
		return d.at(d.r.badField("not used by kind %q", kindNames[s.Kind]), f)
	}
	return nil
}

// strayField names a non-zero field that s's Kind does not use, or returns "".
func (s *Schedule) strayField() string {
	switch {
	case s.At != 0 && s.Kind != task.KindAt:
		return "at"
	case s.Delay != 0 && s.Kind != task.KindAfter:
		return "delay"
	case s.Interval != 0 && s.Kind != task.KindEvery:
		return "interval"
	case s.Anchor != task.FixedRate && s.Kind != task.KindEvery:
		return "anchor"
	case s.Cron != "" && s.Kind != task.KindCron:
		return "cron"
	case s.TZ != "" && s.Kind != task.KindCron:
		return "tz"
	}
	return ""
}

func (s *Schedule) encode(c *enc) {
	anchor := s.Kind == task.KindEvery && s.Anchor != task.FixedRate
	tz := s.Kind == task.KindCron && s.TZ != ""
	c.mapLen(2 + count(anchor, tz))
	putEnum(c, "kind", kindNames[:], s.Kind)
	switch s.Kind {
	case task.KindAt:
		c.kInt("at", s.At)
	case task.KindAfter:
		c.kInt("delay", s.Delay)
	case task.KindEvery:
		c.kInt("interval", s.Interval)
	case task.KindCron:
		c.kStr("cron", s.Cron)
	default:
		c.kInt("at", 0) // keeps the map's length right; the kind has already failed
	}
	if anchor {
		putEnum(c, "anchor", anchorNames[:], s.Anchor)
	}
	if tz {
		c.kStr("tz", s.TZ)
	}
	if f := s.strayField(); f != "" {
		c.fail("schedule."+f, "not used by kind "+s.Kind.String())
	}
}

// ---- Retry ----

var retryFields = handTable[Retry]([]string{"max_attempts", "initial_backoff_ns", "max_backoff_ns", "multiplier", "jitter", "max_retry_ns"})

func (r *Retry) fields() *fieldTable { return &retryFields }

func (r *Retry) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		r.MaxAttempts, err = d.uintMax(1<<31 - 1)
	case 1:
		r.InitialBackoff, err = d.r.int()
	case 2:
		r.MaxBackoff, err = d.r.int()
	case 3:
		r.Multiplier, err = d.r.float()
	case 4:
		r.Jitter, err = d.r.float()
	case 5:
		r.MaxRetry, err = d.r.int()
	}
	return err
}

func (r *Retry) encode(c *enc) {
	c.mapLen(count(r.MaxAttempts != 0, r.InitialBackoff != 0, r.MaxBackoff != 0, r.Multiplier != 0, r.Jitter != 0, r.MaxRetry != 0))
	if r.MaxAttempts != 0 {
		c.kUint("max_attempts", r.MaxAttempts)
	}
	if r.InitialBackoff != 0 {
		c.kInt("initial_backoff_ns", r.InitialBackoff)
	}
	if r.MaxBackoff != 0 {
		c.kInt("max_backoff_ns", r.MaxBackoff)
	}
	if r.Multiplier != 0 {
		c.str("multiplier")
		c.float(r.Multiplier)
	}
	if r.Jitter != 0 {
		c.str("jitter")
		c.float(r.Jitter)
	}
	if r.MaxRetry != 0 {
		c.kInt("max_retry_ns", r.MaxRetry)
	}
}

// ---- snapshots and dead letters: GET, LIST and DLQ_LIST replies, made from specs ----

var attemptSpec = newMapSpec(false,
	uintField("attempt", func(a *AttemptRecord) *uint64 { return &a.Attempt }).req(),
	intField("start", func(a *AttemptRecord) *int64 { return &a.Start }).req(),
	intField("end", func(a *AttemptRecord) *int64 { return &a.End }),
	strField("err", MaxTextLen, func(a *AttemptRecord) *string { return &a.Err }),
)

// attempts is an attempt list: a snapshot's history, a dead letter's attempts.
func attempts[M any](key string, p func(*M) *[]AttemptRecord) field[M] {
	return arrayField(key, task.MaxAttemptsLimit, specMaps(attemptSpec), p)
}

// cut is the keys of a Cut (got by p), which end a snapshot and a dead letter.
func cut[M any](p func(*M) *Cut) []field[M] {
	return within(p,
		uintField("payload_len", func(ct *Cut) *uint64 { return &ct.PayloadLen }),
		boolField("truncated", func(ct *Cut) *bool { return &ct.Truncated }),
	)
}

var infoSpec = newMapSpec(false, append([]field[Info]{
	subField("task", wireMaps[Task](), func(in *Info) *Task { return &in.Task }).req(),
	stateField("state", func(in *Info) *task.State { return &in.State }).req(),
	uintField("attempts", func(in *Info) *uint64 { return &in.Attempts }),
	strField("last_error", MaxTextLen, func(in *Info) *string { return &in.LastError }),
	intField("next_run", func(in *Info) *int64 { return &in.NextRun }),
	uintField("runs", func(in *Info) *uint64 { return &in.Runs }),
	attempts("history", func(in *Info) *[]AttemptRecord { return &in.History }),
}, cut(func(in *Info) *Cut { return &in.Cut })...)...)

var deadLetterSpec = newMapSpec(false, append([]field[DeadLetter]{
	subField("task", wireMaps[Task](), func(dl *DeadLetter) *Task { return &dl.Task }).req(),
	attempts("attempts", func(dl *DeadLetter) *[]AttemptRecord { return &dl.Attempts }),
	intField("died_at", func(dl *DeadLetter) *int64 { return &dl.DiedAt }).req(),
	strField("reason", MaxTextLen, func(dl *DeadLetter) *string { return &dl.Reason }),
}, cut(func(dl *DeadLetter) *Cut { return &dl.Cut })...)...)

// ---- ItemResult ----

var itemResultFields = handTable[ItemResult](
	[]string{"ns", "tid", "durability", "state", "next_run", "version", "code", "msg", "field"},
	"tid", "durability")

// itemState is the presence bit of a result's "state".
var itemState = itemResultFields.bit("state")

func (r *ItemResult) fields() *fieldTable { return &itemResultFields }

func (r *ItemResult) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		r.Namespace, err = d.name(task.MaxNamespaceLen)
	case 1:
		r.ID, err = d.r.str(task.MaxIDLen)
	case 2:
		r.Durability, err = enum[Durability](d, durNames[:])
	case 3:
		r.State, err = d.state()
	case 4:
		r.NextRun, err = d.r.int()
	case 5:
		r.Version, err = d.r.uint()
	case 6:
		r.Code, err = d.errCode()
	case 7:
		r.Message, err = d.r.str(MaxTextLen)
	case 8:
		r.Field, err = d.r.str(MaxNameLen)
	}
	return err
}

// checkFields: a success names the state it left the task in.
func (r *ItemResult) checkFields(d *dec, present uint64) *Error {
	if r.Code == 0 && present&itemState == 0 {
		return d.at(d.r.badField("required when code is absent (success)"), "state")
	}
	return nil
}

const math16 = 1<<16 - 1

func (r *ItemResult) encode(c *enc) {
	ok := r.Code == 0
	c.mapLen(2 + count(r.Namespace != "", ok, ok && r.NextRun != 0, ok && r.Version != 0, !ok, !ok && r.Message != "", !ok && r.Field != ""))
	if r.Namespace != "" {
		c.kStr("ns", r.Namespace)
	}
	c.kStr("tid", r.ID)
	putEnum(c, "durability", durNames[:], r.Durability)
	if ok {
		putState(c, "state", r.State)
		if r.NextRun != 0 {
			c.kInt("next_run", r.NextRun)
		}
		if r.Version != 0 {
			c.kUint("version", r.Version)
		}
		return
	}
	c.kUint("code", uint64(r.Code))
	if r.Message != "" {
		c.kStr("msg", r.Message)
	}
	if r.Field != "" {
		c.kStr("field", r.Field)
	}
}
