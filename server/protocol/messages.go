package protocol

import (
	"strconv"

	"github.com/tock-sched/tock/core/task"
)

// Version is the protocol version this package speaks (HELLO and WELCOME "v").
const Version = 1

// Type is a message type: the "t" of every message. Numbers never change meaning.
type Type uint8

// Message types, grouped by ranges: 1-15 connection, 16-31 tasks, 32-47 dead letters and
// administration, 48-63 workers. "->" is client to server, "<-" server to client.
const (
	TypeHello       Type = 1  // -> first frame: version, name, token, role
	TypeWelcome     Type = 2  // <- reply to HELLO
	TypeError       Type = 3  // <- reply to any request that failed
	TypeOK          Type = 4  // <- reply to requests with nothing else to say
	TypePing        Type = 5  // -> liveness
	TypePong        Type = 6  // <- reply to PING
	TypeSubmit      Type = 16 // -> one task; reply TASK_STATUS
	TypeSubmitBatch Type = 17 // -> up to MaxBatch tasks; reply BATCH_RESULT
	TypeCancel      Type = 18 // -> reply TASK_STATUS
	TypeGet         Type = 19 // -> reply TASK_INFO
	TypeList        Type = 20 // -> reply TASK_PAGE
	TypeTaskStatus  Type = 21 // <- what a submit, cancel or requeue left the task as
	TypeBatchResult Type = 22 // <- one result per submitted task
	TypeTaskInfo    Type = 23 // <- one task's snapshot
	TypeTaskPage    Type = 24 // <- a page of snapshots
	TypeDLQList     Type = 32 // -> reply DLQ_PAGE
	TypeDLQPage     Type = 33 // <- a page of dead letters
	TypeDLQRequeue  Type = 34 // -> reply TASK_STATUS
	TypeDLQPurge    Type = 35 // -> reply PURGED
	TypePurged      Type = 36 // <- how many dead letters were removed
	TypePause       Type = 37 // -> stop dispatching a task type; reply OK
	TypeResume      Type = 38 // -> dispatch it again; reply OK
	TypeStats       Type = 39 // -> reply STATS_REPLY
	TypeStatsReply  Type = 40 // <- counters and gauges
	TypeSubscribe   Type = 48 // -> worker: the types it serves and its credits; reply OK
	TypeCredit      Type = 49 // -> worker: more credits; reply OK
	TypeFire        Type = 50 // <- push (id 0): run this task now
	TypeAck         Type = 51 // -> worker: the run succeeded; reply OK
	TypeNack        Type = 52 // -> worker: the run failed; reply OK
	TypeAcks        Type = 53 // -> worker: up to MaxBatch runs succeeded; reply ACKED
	TypeAcked       Type = 54 // <- reply to ACKS and CARRY: the runs that could not be acknowledged
	TypeCarry       Type = 55 // -> worker: outcomes of runs an earlier connection never confirmed; reply ACKED

	numTypes = TypeCarry + 1
)

var typeNames = [numTypes]string{
	TypeHello: "HELLO", TypeWelcome: "WELCOME", TypeError: "ERROR", TypeOK: "OK", TypePing: "PING", TypePong: "PONG",
	TypeSubmit: "SUBMIT", TypeSubmitBatch: "SUBMIT_BATCH", TypeCancel: "CANCEL", TypeGet: "GET", TypeList: "LIST",
	TypeTaskStatus: "TASK_STATUS", TypeBatchResult: "BATCH_RESULT", TypeTaskInfo: "TASK_INFO", TypeTaskPage: "TASK_PAGE",
	TypeDLQList: "DLQ_LIST", TypeDLQPage: "DLQ_PAGE", TypeDLQRequeue: "DLQ_REQUEUE", TypeDLQPurge: "DLQ_PURGE",
	TypePurged: "PURGED", TypePause: "PAUSE", TypeResume: "RESUME", TypeStats: "STATS", TypeStatsReply: "STATS_REPLY",
	TypeSubscribe: "SUBSCRIBE", TypeCredit: "CREDIT", TypeFire: "FIRE", TypeAck: "ACK", TypeNack: "NACK",
	TypeAcks: "ACKS", TypeAcked: "ACKED", TypeCarry: "CARRY",
}

// String returns the type's protocol name, or "Type(n)".
func (t Type) String() string {
	if t < numTypes && typeNames[t] != "" {
		return typeNames[t]
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// Message is one protocol message: a pointer to one of the types below (*Hello, *Ack,
// ...). The set is closed.
type Message interface {
	Type() Type
	// RequestID is the envelope's "id": chosen by the client, echoed in the reply; 0 in
	// server pushes (FIRE).
	RequestID() uint64
	setID(uint64)
	decodable
	encode(c *enc)
}

// newMessage returns a zero message of type t, or nil for a type this version does not know.
func newMessage(t uint64) Message {
	switch Type(t) {
	case TypeHello:
		return new(Hello)
	case TypeWelcome:
		return new(Welcome)
	case TypeError:
		return new(Error)
	case TypeOK:
		return new(OK)
	case TypePing:
		return new(Ping)
	case TypePong:
		return new(Pong)
	case TypeSubmit:
		return new(Submit)
	case TypeSubmitBatch:
		return new(SubmitBatch)
	case TypeCancel:
		return new(Cancel)
	case TypeGet:
		return new(Get)
	case TypeList:
		return new(List)
	case TypeTaskStatus:
		return new(TaskStatus)
	case TypeBatchResult:
		return new(BatchResult)
	case TypeTaskInfo:
		return new(TaskInfo)
	case TypeTaskPage:
		return new(TaskPage)
	case TypeDLQList:
		return new(DLQList)
	case TypeDLQPage:
		return new(DLQPage)
	case TypeDLQRequeue:
		return new(DLQRequeue)
	case TypeDLQPurge:
		return new(DLQPurge)
	case TypePurged:
		return new(Purged)
	case TypePause:
		return new(Pause)
	case TypeResume:
		return new(Resume)
	case TypeStats:
		return new(Stats)
	case TypeStatsReply:
		return new(StatsReply)
	case TypeSubscribe:
		return new(Subscribe)
	case TypeCredit:
		return new(Credit)
	case TypeFire:
		return new(Fire)
	case TypeAck:
		return new(Ack)
	case TypeNack:
		return new(Nack)
	case TypeAcks:
		return new(Acks)
	case TypeAcked:
		return new(Acked)
	case TypeCarry:
		return new(Carry)
	}
	return nil
}

var noFields = fieldTable{}

// ---- connection ----

// Hello opens a connection: the client's first frame.
type Hello struct {
	ID      uint64
	Version uint64 // "v": Version
	Name    string // "name": the client's name, for logs
	Token   string // "token": the shared token, if the server requires one
	Role    Role   // "role"
}

var helloFields = fieldTable{keys: []string{"v", "name", "token", "role"}, required: 1 | 2 | 8}

func (m *Hello) Type() Type          { return TypeHello }
func (m *Hello) RequestID() uint64   { return m.ID }
func (m *Hello) setID(id uint64)     { m.ID = id }
func (m *Hello) fields() *fieldTable { return &helloFields }
func (m *Hello) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		m.Version, err = d.uint()
	case 1:
		m.Name, err = d.str(MaxNameLen)
	case 2:
		m.Token, err = d.str(MaxTokenLen)
	case 3:
		m.Role, err = enum[Role](d, roleNames[:])
	}
	return err
}
func (m *Hello) encode(c *enc) {
	c.envelope(TypeHello, m.ID, 3+count(m.Token != ""))
	c.kUint("v", m.Version)
	c.kStr("name", m.Name)
	if m.Token != "" {
		c.kStr("token", m.Token)
	}
	putEnum(c, "role", roleNames[:], m.Role)
}

// Welcome accepts a HELLO.
type Welcome struct {
	ID       uint64
	Version  uint64 // "v": the version the server will speak
	Name     string // "name": the server's software name and version
	Node     string // "node": this node's ID
	Epoch    uint64 // "epoch": the leader epoch now
	MaxFrame uint64 // "max_frame": the largest frame body the server accepts
	// Heartbeat ("heartbeat_ns", optional) is the interval, in ns, at which the client
	// should PING while nothing arrives; 0 (absent) states none. A client declares the
	// connection dead when nothing at all arrives for HeartbeatMisses intervals.
	Heartbeat int64
}

// HeartbeatMisses is how many heartbeat intervals (WELCOME "heartbeat_ns") may pass with
// nothing at all arriving before a client declares the connection dead (PROTOCOL.md).
const HeartbeatMisses = 3

var welcomeFields = fieldTable{keys: []string{"v", "name", "node", "epoch", "max_frame", "heartbeat_ns"}, required: 31}

func (m *Welcome) Type() Type          { return TypeWelcome }
func (m *Welcome) RequestID() uint64   { return m.ID }
func (m *Welcome) setID(id uint64)     { m.ID = id }
func (m *Welcome) fields() *fieldTable { return &welcomeFields }
func (m *Welcome) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		m.Version, err = d.uint()
	case 1:
		m.Name, err = d.str(MaxNameLen)
	case 2:
		m.Node, err = d.str(MaxNameLen)
	case 3:
		m.Epoch, err = d.uint()
	case 4:
		m.MaxFrame, err = d.uintMax(MaxFrameLimit)
	case 5:
		if m.Heartbeat, err = d.int(); err == nil && m.Heartbeat < 0 {
			err = d.badField("negative heartbeat")
		}
	}
	return err
}
func (m *Welcome) encode(c *enc) {
	c.envelope(TypeWelcome, m.ID, 5+count(m.Heartbeat > 0))
	c.kUint("v", m.Version)
	c.kStr("name", m.Name)
	c.kStr("node", m.Node)
	c.kUint("epoch", m.Epoch)
	c.kUint("max_frame", m.MaxFrame)
	if m.Heartbeat > 0 {
		c.kInt("heartbeat_ns", m.Heartbeat)
	}
}

// Error (the ERROR message) is defined in errors.go.

var errorFields = fieldTable{keys: []string{"code", "msg", "field", "leader", "run"}, required: 1}

func (m *Error) Type() Type          { return TypeError }
func (m *Error) RequestID() uint64   { return m.ID }
func (m *Error) setID(id uint64)     { m.ID = id }
func (m *Error) fields() *fieldTable { return &errorFields }
func (m *Error) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		m.Code, err = d.errCode()
	case 1:
		m.Message, err = d.str(MaxTextLen)
	case 2:
		m.Field, err = d.str(MaxNameLen)
	case 3:
		m.Leader, err = d.str(maxLeaderLen)
	case 4:
		m.RunID, err = d.uint()
	}
	return err
}
func (m *Error) encode(c *enc) {
	c.envelope(TypeError, m.ID, 1+count(m.Message != "", m.Field != "", m.Leader != "", m.RunID != 0))
	c.kUint("code", uint64(m.Code))
	if m.Message != "" {
		c.kStr("msg", m.Message)
	}
	if m.Field != "" {
		c.kStr("field", m.Field)
	}
	if m.Leader != "" {
		c.kStr("leader", m.Leader)
	}
	if m.RunID != 0 {
		c.kUint("run", m.RunID)
	}
}

// OK answers a request that succeeded with nothing more to say (PAUSE, RESUME,
// SUBSCRIBE, CREDIT, ACK, NACK).
type OK struct{ ID uint64 }

func (m *OK) Type() Type               { return TypeOK }
func (m *OK) RequestID() uint64        { return m.ID }
func (m *OK) setID(id uint64)          { m.ID = id }
func (m *OK) fields() *fieldTable      { return &noFields }
func (m *OK) set(d *dec, i int) *Error { return nil }
func (m *OK) encode(c *enc)            { c.envelope(TypeOK, m.ID, 0) }

// Ping asks for a PONG.
type Ping struct{ ID uint64 }

func (m *Ping) Type() Type               { return TypePing }
func (m *Ping) RequestID() uint64        { return m.ID }
func (m *Ping) setID(id uint64)          { m.ID = id }
func (m *Ping) fields() *fieldTable      { return &noFields }
func (m *Ping) set(d *dec, i int) *Error { return nil }
func (m *Ping) encode(c *enc)            { c.envelope(TypePing, m.ID, 0) }

// Pong answers a PING.
type Pong struct{ ID uint64 }

func (m *Pong) Type() Type               { return TypePong }
func (m *Pong) RequestID() uint64        { return m.ID }
func (m *Pong) setID(id uint64)          { m.ID = id }
func (m *Pong) fields() *fieldTable      { return &noFields }
func (m *Pong) set(d *dec, i int) *Error { return nil }
func (m *Pong) encode(c *enc)            { c.envelope(TypePong, m.ID, 0) }

// ---- tasks ----

// Submit submits one task.
type Submit struct {
	ID   uint64
	Task Task // "task"
}

var submitFields = fieldTable{keys: []string{"task"}, required: 1}

func (m *Submit) Type() Type          { return TypeSubmit }
func (m *Submit) RequestID() uint64   { return m.ID }
func (m *Submit) setID(id uint64)     { m.ID = id }
func (m *Submit) fields() *fieldTable { return &submitFields }
func (m *Submit) set(d *dec, i int) *Error {
	return d.sub(&m.Task)
}
func (m *Submit) encode(c *enc) {
	c.envelope(TypeSubmit, m.ID, 1)
	c.str("task")
	m.Task.encode(c)
}

// SubmitBatch submits up to MaxBatch tasks; each gets its own result.
type SubmitBatch struct {
	ID    uint64
	Tasks []Task // "tasks"
}

var submitBatchFields = fieldTable{keys: []string{"tasks"}, required: 1}

func (m *SubmitBatch) Type() Type          { return TypeSubmitBatch }
func (m *SubmitBatch) RequestID() uint64   { return m.ID }
func (m *SubmitBatch) setID(id uint64)     { m.ID = id }
func (m *SubmitBatch) fields() *fieldTable { return &submitBatchFields }
func (m *SubmitBatch) set(d *dec, i int) (err *Error) {
	m.Tasks, err = readArray[Task](d, MaxBatch)
	return err
}
func (m *SubmitBatch) encode(c *enc) {
	c.envelope(TypeSubmitBatch, m.ID, 1)
	if len(m.Tasks) > MaxBatch {
		c.fail("tasks", "more than MaxBatch tasks")
	}
	writeArray(c, "tasks", m.Tasks)
}

// TaskRef names a task: the body of CANCEL, GET and DLQ_REQUEUE.
type TaskRef struct {
	Namespace string // "ns"; empty means task.DefaultNamespace
	TaskID    string // "tid"
}

var taskRefFields = fieldTable{keys: []string{"ns", "tid"}, required: 2}

func (r *TaskRef) set(d *dec, i int) (err *Error) {
	if i == 0 {
		r.Namespace, err = d.name(task.MaxNamespaceLen)
	} else {
		r.TaskID, err = d.str(task.MaxIDLen)
	}
	return err
}

func (r *TaskRef) encode(c *enc, t Type, id uint64) {
	c.envelope(t, id, 1+count(r.Namespace != ""))
	if r.Namespace != "" {
		c.kStr("ns", r.Namespace)
	}
	c.kStr("tid", r.TaskID)
}

// Cancel cancels a task.
type Cancel struct {
	ID uint64
	TaskRef
}

func (m *Cancel) Type() Type               { return TypeCancel }
func (m *Cancel) RequestID() uint64        { return m.ID }
func (m *Cancel) setID(id uint64)          { m.ID = id }
func (m *Cancel) fields() *fieldTable      { return &taskRefFields }
func (m *Cancel) set(d *dec, i int) *Error { return m.TaskRef.set(d, i) }
func (m *Cancel) encode(c *enc)            { m.TaskRef.encode(c, TypeCancel, m.ID) }

// Get asks for one task's snapshot.
type Get struct {
	ID uint64
	TaskRef
	OmitPayload bool // "omit_payload": leave the payload out (the snapshot's PayloadLen says its length)
}

var getFields = fieldTable{keys: []string{"ns", "tid", "omit_payload"}, required: 2}

func (m *Get) Type() Type          { return TypeGet }
func (m *Get) RequestID() uint64   { return m.ID }
func (m *Get) setID(id uint64)     { m.ID = id }
func (m *Get) fields() *fieldTable { return &getFields }
func (m *Get) set(d *dec, i int) (err *Error) {
	if i == 2 {
		m.OmitPayload, err = d.bool()
		return err
	}
	return m.TaskRef.set(d, i)
}
func (m *Get) encode(c *enc) {
	if !m.OmitPayload {
		m.TaskRef.encode(c, TypeGet, m.ID)
		return
	}
	c.envelope(TypeGet, m.ID, 2+count(m.Namespace != ""))
	if m.Namespace != "" {
		c.kStr("ns", m.Namespace)
	}
	c.kStr("tid", m.TaskID)
	c.str("omit_payload")
	c.bool(true)
}

// DLQRequeue resubmits a dead letter's task and removes the dead letter.
type DLQRequeue struct {
	ID uint64
	TaskRef
}

func (m *DLQRequeue) Type() Type               { return TypeDLQRequeue }
func (m *DLQRequeue) RequestID() uint64        { return m.ID }
func (m *DLQRequeue) setID(id uint64)          { m.ID = id }
func (m *DLQRequeue) fields() *fieldTable      { return &taskRefFields }
func (m *DLQRequeue) set(d *dec, i int) *Error { return m.TaskRef.set(d, i) }
func (m *DLQRequeue) encode(c *enc)            { m.TaskRef.encode(c, TypeDLQRequeue, m.ID) }

// List asks for a page of task snapshots, in (namespace, ID) order.
type List struct {
	ID     uint64
	State  task.State // "state": only tasks in this state; 0 (absent) means all
	Cursor string     // "cursor": the previous page's "next"; empty for the first page
	Limit  uint64     // "limit": page size; 0 means the server's default
	// OmitPayload ("omit_payload") leaves every payload out (each snapshot's PayloadLen
	// says its length), so that a page holds many tasks with large payloads.
	OmitPayload bool
}

var listFields = fieldTable{keys: []string{"state", "cursor", "limit", "omit_payload"}}

func (m *List) Type() Type          { return TypeList }
func (m *List) RequestID() uint64   { return m.ID }
func (m *List) setID(id uint64)     { m.ID = id }
func (m *List) fields() *fieldTable { return &listFields }
func (m *List) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		m.State, err = d.state()
	case 1:
		m.Cursor, err = d.str(MaxCursorLen)
	case 2:
		m.Limit, err = d.uintMax(MaxPageItems)
	case 3:
		m.OmitPayload, err = d.bool()
	}
	return err
}
func (m *List) encode(c *enc) {
	c.envelope(TypeList, m.ID, count(m.State != 0, m.Cursor != "", m.Limit != 0, m.OmitPayload))
	if m.State != 0 {
		putState(c, "state", m.State)
	}
	if m.Cursor != "" {
		c.kStr("cursor", m.Cursor)
	}
	if m.Limit != 0 {
		c.kUint("limit", m.Limit)
	}
	if m.OmitPayload {
		c.str("omit_payload")
		c.bool(true)
	}
}

// TaskStatus answers SUBMIT, CANCEL and DLQ_REQUEUE: the task's state afterwards.
type TaskStatus struct {
	ID         uint64
	Namespace  string
	TaskID     string
	Durability Durability
	State      task.State
	NextRun    int64 // Unix ns; 0 when none is scheduled
	Version    uint64
}

var taskStatusFields = fieldTable{keys: []string{"ns", "tid", "durability", "state", "next_run", "version"}, required: 2 | 4 | 8}

func (m *TaskStatus) Type() Type          { return TypeTaskStatus }
func (m *TaskStatus) RequestID() uint64   { return m.ID }
func (m *TaskStatus) setID(id uint64)     { m.ID = id }
func (m *TaskStatus) fields() *fieldTable { return &taskStatusFields }
func (m *TaskStatus) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		m.Namespace, err = d.name(task.MaxNamespaceLen)
	case 1:
		m.TaskID, err = d.str(task.MaxIDLen)
	case 2:
		m.Durability, err = enum[Durability](d, durNames[:])
	case 3:
		m.State, err = d.state()
	case 4:
		m.NextRun, err = d.int()
	case 5:
		m.Version, err = d.uint()
	}
	return err
}
func (m *TaskStatus) encode(c *enc) {
	c.envelope(TypeTaskStatus, m.ID, 3+count(m.Namespace != "", m.NextRun != 0, m.Version != 0))
	if m.Namespace != "" {
		c.kStr("ns", m.Namespace)
	}
	c.kStr("tid", m.TaskID)
	putEnum(c, "durability", durNames[:], m.Durability)
	putState(c, "state", m.State)
	if m.NextRun != 0 {
		c.kInt("next_run", m.NextRun)
	}
	if m.Version != 0 {
		c.kUint("version", m.Version)
	}
}

// BatchResult answers SUBMIT_BATCH: one result per task, in order.
type BatchResult struct {
	ID      uint64
	Results []ItemResult // "results"
}

var batchResultFields = fieldTable{keys: []string{"results"}, required: 1}

func (m *BatchResult) Type() Type          { return TypeBatchResult }
func (m *BatchResult) RequestID() uint64   { return m.ID }
func (m *BatchResult) setID(id uint64)     { m.ID = id }
func (m *BatchResult) fields() *fieldTable { return &batchResultFields }
func (m *BatchResult) set(d *dec, i int) (err *Error) {
	m.Results, err = readArray[ItemResult](d, MaxBatch)
	return err
}
func (m *BatchResult) encode(c *enc) {
	c.envelope(TypeBatchResult, m.ID, 1)
	writeArray(c, "results", m.Results)
}

// TaskInfo answers GET.
type TaskInfo struct {
	ID   uint64
	Info Info // "info"
}

var taskInfoFields = fieldTable{keys: []string{"info"}, required: 1}

func (m *TaskInfo) Type() Type               { return TypeTaskInfo }
func (m *TaskInfo) RequestID() uint64        { return m.ID }
func (m *TaskInfo) setID(id uint64)          { m.ID = id }
func (m *TaskInfo) fields() *fieldTable      { return &taskInfoFields }
func (m *TaskInfo) set(d *dec, i int) *Error { return d.sub(&m.Info) }
func (m *TaskInfo) encode(c *enc) {
	c.envelope(TypeTaskInfo, m.ID, 1)
	c.str("info")
	m.Info.encode(c)
}

// TaskPage answers LIST.
type TaskPage struct {
	ID    uint64
	Items []Info // "items"
	Next  string // "next": the cursor of the next page; empty on the last
}

var taskPageFields = fieldTable{keys: []string{"items", "next"}, required: 1}

func (m *TaskPage) Type() Type          { return TypeTaskPage }
func (m *TaskPage) RequestID() uint64   { return m.ID }
func (m *TaskPage) setID(id uint64)     { m.ID = id }
func (m *TaskPage) fields() *fieldTable { return &taskPageFields }
func (m *TaskPage) set(d *dec, i int) (err *Error) {
	if i == 1 {
		m.Next, err = d.str(MaxCursorLen)
	} else {
		m.Items, err = readArray[Info](d, MaxPageItems)
	}
	return err
}
func (m *TaskPage) encode(c *enc) {
	c.envelope(TypeTaskPage, m.ID, 1+count(m.Next != ""))
	writeArray(c, "items", m.Items)
	if m.Next != "" {
		c.kStr("next", m.Next)
	}
}

// ---- dead letters and administration ----

// DLQList asks for a page of dead letters, oldest first.
type DLQList struct {
	ID     uint64
	Cursor string // "cursor"
	Limit  uint64 // "limit"; 0 means the server's default
	// OmitPayload ("omit_payload") leaves every payload out, as List's does.
	OmitPayload bool
}

var dlqListFields = fieldTable{keys: []string{"cursor", "limit", "omit_payload"}}

func (m *DLQList) Type() Type          { return TypeDLQList }
func (m *DLQList) RequestID() uint64   { return m.ID }
func (m *DLQList) setID(id uint64)     { m.ID = id }
func (m *DLQList) fields() *fieldTable { return &dlqListFields }
func (m *DLQList) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		m.Cursor, err = d.str(MaxCursorLen)
	case 1:
		m.Limit, err = d.uintMax(MaxPageItems)
	case 2:
		m.OmitPayload, err = d.bool()
	}
	return err
}
func (m *DLQList) encode(c *enc) {
	c.envelope(TypeDLQList, m.ID, count(m.Cursor != "", m.Limit != 0, m.OmitPayload))
	if m.Cursor != "" {
		c.kStr("cursor", m.Cursor)
	}
	if m.Limit != 0 {
		c.kUint("limit", m.Limit)
	}
	if m.OmitPayload {
		c.str("omit_payload")
		c.bool(true)
	}
}

// DLQPage answers DLQ_LIST.
type DLQPage struct {
	ID    uint64
	Items []DeadLetter // "items"
	Next  string       // "next"
}

var dlqPageFields = fieldTable{keys: []string{"items", "next"}, required: 1}

func (m *DLQPage) Type() Type          { return TypeDLQPage }
func (m *DLQPage) RequestID() uint64   { return m.ID }
func (m *DLQPage) setID(id uint64)     { m.ID = id }
func (m *DLQPage) fields() *fieldTable { return &dlqPageFields }
func (m *DLQPage) set(d *dec, i int) (err *Error) {
	if i == 1 {
		m.Next, err = d.str(MaxCursorLen)
	} else {
		m.Items, err = readArray[DeadLetter](d, MaxPageItems)
	}
	return err
}
func (m *DLQPage) encode(c *enc) {
	c.envelope(TypeDLQPage, m.ID, 1+count(m.Next != ""))
	writeArray(c, "items", m.Items)
	if m.Next != "" {
		c.kStr("next", m.Next)
	}
}

// DLQPurge removes one dead letter (TaskID set) or all of them (All); exactly one of
// the two.
type DLQPurge struct {
	ID        uint64
	Namespace string // "ns"
	TaskID    string // "tid"
	All       bool   // "all"
}

var dlqPurgeFields = fieldTable{keys: []string{"ns", "tid", "all"}}

func (m *DLQPurge) Type() Type          { return TypeDLQPurge }
func (m *DLQPurge) RequestID() uint64   { return m.ID }
func (m *DLQPurge) setID(id uint64)     { m.ID = id }
func (m *DLQPurge) fields() *fieldTable { return &dlqPurgeFields }
func (m *DLQPurge) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		m.Namespace, err = d.name(task.MaxNamespaceLen)
	case 1:
		m.TaskID, err = d.str(task.MaxIDLen)
	case 2:
		m.All, err = d.bool()
	}
	return err
}

// checkFields: exactly one of "tid" and "all": true.
func (m *DLQPurge) checkFields(d *dec, present uint64) *Error {
	if (present&2 != 0) == m.All {
		return d.at(d.badField(`give exactly one of "tid" and "all": true`), "tid")
	}
	return nil
}
func (m *DLQPurge) encode(c *enc) {
	c.envelope(TypeDLQPurge, m.ID, count(m.Namespace != "", !m.All, m.All))
	if m.Namespace != "" {
		c.kStr("ns", m.Namespace)
	}
	if m.All {
		c.str("all")
		c.bool(true)
		if m.TaskID != "" {
			c.fail("tid", `give exactly one of "tid" and "all": true`)
		}
	} else {
		c.kStr("tid", m.TaskID)
	}
}

// Purged answers DLQ_PURGE.
type Purged struct {
	ID    uint64
	Count uint64 // "count": dead letters removed
}

var purgedFields = fieldTable{keys: []string{"count"}, required: 1}

func (m *Purged) Type() Type          { return TypePurged }
func (m *Purged) RequestID() uint64   { return m.ID }
func (m *Purged) setID(id uint64)     { m.ID = id }
func (m *Purged) fields() *fieldTable { return &purgedFields }
func (m *Purged) set(d *dec, i int) (err *Error) {
	m.Count, err = d.uint()
	return err
}
func (m *Purged) encode(c *enc) {
	c.envelope(TypePurged, m.ID, 1)
	c.kUint("count", m.Count)
}

var typeFields = fieldTable{keys: []string{"type"}, required: 1}

// Pause stops dispatching tasks of one type; they stay due until RESUME.
type Pause struct {
	ID       uint64
	TaskType string // "type"
}

func (m *Pause) Type() Type          { return TypePause }
func (m *Pause) RequestID() uint64   { return m.ID }
func (m *Pause) setID(id uint64)     { m.ID = id }
func (m *Pause) fields() *fieldTable { return &typeFields }
func (m *Pause) set(d *dec, i int) (err *Error) {
	m.TaskType, err = d.name(task.MaxTypeLen)
	return err
}
func (m *Pause) encode(c *enc) {
	c.envelope(TypePause, m.ID, 1)
	c.kStr("type", m.TaskType)
}

// Resume undoes Pause.
type Resume struct {
	ID       uint64
	TaskType string // "type"
}

func (m *Resume) Type() Type          { return TypeResume }
func (m *Resume) RequestID() uint64   { return m.ID }
func (m *Resume) setID(id uint64)     { m.ID = id }
func (m *Resume) fields() *fieldTable { return &typeFields }
func (m *Resume) set(d *dec, i int) (err *Error) {
	m.TaskType, err = d.name(task.MaxTypeLen)
	return err
}
func (m *Resume) encode(c *enc) {
	c.envelope(TypeResume, m.ID, 1)
	c.kStr("type", m.TaskType)
}

// Stats asks for the server's counters and gauges.
type Stats struct{ ID uint64 }

func (m *Stats) Type() Type               { return TypeStats }
func (m *Stats) RequestID() uint64        { return m.ID }
func (m *Stats) setID(id uint64)          { m.ID = id }
func (m *Stats) fields() *fieldTable      { return &noFields }
func (m *Stats) set(d *dec, i int) *Error { return nil }
func (m *Stats) encode(c *enc)            { c.envelope(TypeStats, m.ID, 0) }

// StatsReply answers STATS. The names are documented in PROTOCOL.md; a client ignores
// names it does not know.
type StatsReply struct {
	ID       uint64
	Counters map[string]uint64 // "counters": monotonic totals
	Gauges   map[string]int64  // "gauges": levels now
}

var statsReplyFields = fieldTable{keys: []string{"counters", "gauges"}}

func (m *StatsReply) Type() Type          { return TypeStatsReply }
func (m *StatsReply) RequestID() uint64   { return m.ID }
func (m *StatsReply) setID(id uint64)     { m.ID = id }
func (m *StatsReply) fields() *fieldTable { return &statsReplyFields }
func (m *StatsReply) set(d *dec, i int) *Error {
	n, err := d.mapLen()
	if err != nil {
		return err
	}
	if n > MaxStats {
		return d.badField("%d entries exceed the limit of %d", n, MaxStats)
	}
	if i == 0 {
		m.Counters = make(map[string]uint64, n)
	} else {
		m.Gauges = make(map[string]int64, n)
	}
	for range n {
		k, err := d.str(MaxNameLen)
		if err != nil {
			return err
		}
		if i == 0 {
			if m.Counters[k], err = d.uint(); err != nil {
				return err
			}
		} else if m.Gauges[k], err = d.int(); err != nil {
			return err
		}
	}
	return nil
}
func (m *StatsReply) encode(c *enc) {
	c.envelope(TypeStatsReply, m.ID, count(m.Counters != nil, m.Gauges != nil))
	if m.Counters != nil {
		c.str("counters")
		c.mapLen(len(m.Counters))
		for _, k := range sortedKeys(m.Counters) {
			c.kUint(k, m.Counters[k])
		}
	}
	if m.Gauges != nil {
		c.str("gauges")
		c.mapLen(len(m.Gauges))
		for _, k := range sortedKeys(m.Gauges) {
			c.kInt(k, m.Gauges[k])
		}
	}
}

// ---- workers ----

// Subscribe makes a worker connection receive FIRE for the given task types, up to
// Credits runs outstanding at once. A second SUBSCRIBE replaces the first.
type Subscribe struct {
	ID      uint64
	Types   []string // "types"
	Credits uint64   // "credits"
}

var subscribeFields = fieldTable{keys: []string{"types", "credits"}, required: 3}

func (m *Subscribe) Type() Type          { return TypeSubscribe }
func (m *Subscribe) RequestID() uint64   { return m.ID }
func (m *Subscribe) setID(id uint64)     { m.ID = id }
func (m *Subscribe) fields() *fieldTable { return &subscribeFields }
func (m *Subscribe) set(d *dec, i int) (err *Error) {
	if i == 1 {
		m.Credits, err = d.uintMax(1<<32 - 1)
		return err
	}
	n, err := d.arrayLen(MaxTypes)
	if err != nil {
		return err
	}
	m.Types = make([]string, n)
	for j := range m.Types {
		if m.Types[j], err = d.name(task.MaxTypeLen); err != nil {
			return d.atIdx(err, j)
		}
	}
	return nil
}
func (m *Subscribe) encode(c *enc) {
	c.envelope(TypeSubscribe, m.ID, 2)
	c.str("types")
	c.arrayLen(len(m.Types))
	for _, t := range m.Types {
		c.str(t)
	}
	c.kUint("credits", m.Credits)
}

// Credit grants a worker connection more credits (added to what it has).
type Credit struct {
	ID      uint64
	Credits uint64 // "credits"
}

var creditFields = fieldTable{keys: []string{"credits"}, required: 1}

func (m *Credit) Type() Type          { return TypeCredit }
func (m *Credit) RequestID() uint64   { return m.ID }
func (m *Credit) setID(id uint64)     { m.ID = id }
func (m *Credit) fields() *fieldTable { return &creditFields }
func (m *Credit) set(d *dec, i int) (err *Error) {
	m.Credits, err = d.uintMax(1<<32 - 1)
	return err
}
func (m *Credit) encode(c *enc) {
	c.envelope(TypeCredit, m.ID, 1)
	c.kUint("credits", m.Credits)
}

// Fire is pushed to a worker (ID 0): run this task now, and ACK or NACK within TTR.
type Fire struct {
	ID         uint64 // always 0: a push answers no request
	Namespace  string // "ns"
	TaskID     string // "tid"
	TaskType   string // "type"
	Payload    []byte // "payload"
	RunID      uint64 // "run": unique per attempt; ACK and NACK name it
	Attempt    uint64 // "attempt": 1 for an occurrence's first attempt
	Due        int64  // "due": Unix ns, the nominal due time of this occurrence or retry
	Epoch      uint64 // "epoch": the leader epoch that fired it; ACK and NACK echo it
	TTR        int64  // "ttr": ns the worker has before the run is redelivered elsewhere
	Durability Durability
	Version    uint64 // "version" (optional, absent is 0): the task's version; a CARRY names it
}

var fireFields = fieldTable{
	keys:     []string{"ns", "tid", "type", "payload", "run", "attempt", "due", "epoch", "ttr", "durability", "version"},
	required: 1 | 2 | 4 | 16 | 32 | 64 | 128 | 256 | 512,
}

func (m *Fire) Type() Type          { return TypeFire }
func (m *Fire) RequestID() uint64   { return m.ID }
func (m *Fire) setID(id uint64)     { m.ID = id }
func (m *Fire) fields() *fieldTable { return &fireFields }
func (m *Fire) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		m.Namespace, err = d.name(task.MaxNamespaceLen)
	case 1:
		m.TaskID, err = d.str(task.MaxIDLen)
	case 2:
		m.TaskType, err = d.name(task.MaxTypeLen)
	case 3:
		m.Payload, err = d.bin(maxPayload)
	case 4:
		m.RunID, err = d.uint()
	case 5:
		m.Attempt, err = d.uint()
	case 6:
		m.Due, err = d.int()
	case 7:
		m.Epoch, err = d.uint()
	case 8:
		m.TTR, err = d.int()
	case 9:
		m.Durability, err = enum[Durability](d, durNames[:])
	case 10:
		m.Version, err = d.uint()
	}
	return err
}
func (m *Fire) encode(c *enc) {
	c.envelope(TypeFire, m.ID, 9+count(len(m.Payload) > 0)+count(m.Version != 0))
	c.kStr("ns", m.Namespace)
	c.kStr("tid", m.TaskID)
	c.kStr("type", m.TaskType)
	if len(m.Payload) > 0 {
		c.str("payload")
		c.bin(m.Payload)
	}
	c.kUint("run", m.RunID)
	c.kUint("attempt", m.Attempt)
	c.kInt("due", m.Due)
	c.kUint("epoch", m.Epoch)
	c.kInt("ttr", m.TTR)
	putEnum(c, "durability", durNames[:], m.Durability)
	if m.Version != 0 {
		c.kUint("version", m.Version)
	}
}

// Ack reports a run's success.
type Ack struct {
	ID    uint64
	RunID uint64 // "run"
	Epoch uint64 // "epoch": the FIRE's
}

var ackFields = fieldTable{keys: []string{"run", "epoch"}, required: 3}

func (m *Ack) Type() Type          { return TypeAck }
func (m *Ack) RequestID() uint64   { return m.ID }
func (m *Ack) setID(id uint64)     { m.ID = id }
func (m *Ack) fields() *fieldTable { return &ackFields }
func (m *Ack) set(d *dec, i int) (err *Error) {
	if i == 0 {
		m.RunID, err = d.uint()
	} else {
		m.Epoch, err = d.uint()
	}
	return err
}
func (m *Ack) encode(c *enc) {
	c.envelope(TypeAck, m.ID, 2)
	c.kUint("run", m.RunID)
	c.kUint("epoch", m.Epoch)
}

// Nack reports a run's failure.
type Nack struct {
	ID        uint64
	RunID     uint64 // "run"
	Epoch     uint64 // "epoch"
	Err       string // "err": the error, for people and the dead letter
	Retryable bool   // "retryable": false sends the task to the dead-letter queue now
}

var nackFields = fieldTable{keys: []string{"run", "epoch", "err", "retryable"}, required: 1 | 2 | 8}

func (m *Nack) Type() Type          { return TypeNack }
func (m *Nack) RequestID() uint64   { return m.ID }
func (m *Nack) setID(id uint64)     { m.ID = id }
func (m *Nack) fields() *fieldTable { return &nackFields }
func (m *Nack) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		m.RunID, err = d.uint()
	case 1:
		m.Epoch, err = d.uint()
	case 2:
		m.Err, err = d.str(MaxTextLen)
	case 3:
		m.Retryable, err = d.bool()
	}
	return err
}
func (m *Nack) encode(c *enc) {
	c.envelope(TypeNack, m.ID, 3+count(m.Err != ""))
	c.kUint("run", m.RunID)
	c.kUint("epoch", m.Epoch)
	if m.Err != "" {
		c.kStr("err", m.Err)
	}
	c.str("retryable")
	c.bool(m.Retryable)
}

// Acks reports the success of many runs in one frame, all fired at one epoch: ACK for
// each, with one frame and one reply for all of them. It may grant credits too, as a
// CREDIT would (a worker returns one per finished run: sending them here saves a frame).
type Acks struct {
	ID      uint64
	RunIDs  []uint64 // "runs": at most MaxBatch
	Epoch   uint64   // "epoch": the FIREs'
	Credits uint64   // "credits": optional, < 2^32
}

var acksFields = fieldTable{keys: []string{"runs", "epoch", "credits"}, required: 3}

func (m *Acks) Type() Type          { return TypeAcks }
func (m *Acks) RequestID() uint64   { return m.ID }
func (m *Acks) setID(id uint64)     { m.ID = id }
func (m *Acks) fields() *fieldTable { return &acksFields }
func (m *Acks) set(d *dec, i int) (err *Error) {
	switch i {
	case 1:
		m.Epoch, err = d.uint()
		return err
	case 2:
		m.Credits, err = d.uintMax(1<<32 - 1)
		return err
	}
	n, err := d.arrayLen(MaxBatch)
	if err != nil {
		return err
	}
	m.RunIDs = make([]uint64, n)
	for j := range m.RunIDs {
		if m.RunIDs[j], err = d.uint(); err != nil {
			return d.atIdx(err, j)
		}
	}
	return nil
}
func (m *Acks) encode(c *enc) {
	c.envelope(TypeAcks, m.ID, 2+count(m.Credits != 0))
	if len(m.RunIDs) > MaxBatch {
		c.fail("runs", "more than MaxBatch runs")
	}
	c.str("runs")
	c.arrayLen(len(m.RunIDs))
	for _, r := range m.RunIDs {
		c.uint(r)
	}
	c.kUint("epoch", m.Epoch)
	if m.Credits != 0 {
		c.kUint("credits", m.Credits)
	}
}

// Acked answers ACKS (and CARRY): every run it does not list was acknowledged, as an ACK
// answered OK would have been; each one it lists was refused, with the code and message
// an ACK of that run alone would have got (STALE_EPOCH, UNKNOWN_RUN, INTERNAL).
type Acked struct {
	ID     uint64
	Failed []AckFailure // "failed": absent when every run was acknowledged
}

// AckFailure is one run an ACKS could not acknowledge.
type AckFailure struct {
	RunID   uint64 // "run"
	Code    Code   // "code"
	Message string // "msg"
}

var (
	ackedFields      = fieldTable{keys: []string{"failed"}}
	ackFailureFields = fieldTable{keys: []string{"run", "code", "msg"}, required: 1 | 2}
)

func (m *Acked) Type() Type          { return TypeAcked }
func (m *Acked) RequestID() uint64   { return m.ID }
func (m *Acked) setID(id uint64)     { m.ID = id }
func (m *Acked) fields() *fieldTable { return &ackedFields }
func (m *Acked) set(d *dec, i int) (err *Error) {
	m.Failed, err = readArray[AckFailure](d, MaxBatch)
	return err
}
func (m *Acked) encode(c *enc) {
	c.envelope(TypeAcked, m.ID, count(len(m.Failed) > 0))
	if len(m.Failed) > MaxBatch {
		c.fail("failed", "more than MaxBatch runs")
	}
	if len(m.Failed) > 0 {
		writeArray(c, "failed", m.Failed)
	}
}

func (f *AckFailure) fields() *fieldTable { return &ackFailureFields }
func (f *AckFailure) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		f.RunID, err = d.uint()
	case 1:
		f.Code, err = d.errCode()
	case 2:
		f.Message, err = d.str(MaxTextLen)
	}
	return err
}
func (f *AckFailure) encode(c *enc) {
	c.mapLen(2 + count(f.Message != ""))
	c.kUint("run", f.RunID)
	c.kUint("code", uint64(f.Code))
	if f.Message != "" {
		c.kStr("msg", f.Message)
	}
}

// Carry hands in, on a worker's new connection (before it grants credits), the outcomes
// of runs it finished whose ACK or NACK an earlier connection never confirmed (the
// leader died or stepped down first). The leader accepts each outcome whose task it
// holds unchanged (namespace, ID, version) with that attempt due at that time, instead
// of running it again; ACKED lists those it refused.
type Carry struct {
	ID       uint64
	Outcomes []Outcome // "outcomes": at most MaxBatch
}

// Outcome is one carried run: what its FIRE said of it, and how it ended.
type Outcome struct {
	RunID     uint64 // "run": the FIRE's run ID; ACKED names it
	Epoch     uint64 // "epoch": the FIRE's epoch
	Namespace string // "ns"
	TaskID    string // "tid"
	Version   uint64 // "version": the FIRE's (absent is 0)
	Attempt   uint64 // "attempt": the FIRE's
	Due       int64  // "due": the FIRE's
	Failed    bool   // "failed": the run failed (a NACK); absent or false: it succeeded
	Err       string // "err": a failure's error
	Retryable bool   // "retryable": a failure may be retried (as NACK's)
}

var (
	carryFields   = fieldTable{keys: []string{"outcomes"}, required: 1}
	outcomeFields = fieldTable{
		keys:     []string{"run", "epoch", "ns", "tid", "version", "attempt", "due", "failed", "err", "retryable"},
		required: 1 | 2 | 8 | 32 | 64,
	}
)

func (m *Carry) Type() Type          { return TypeCarry }
func (m *Carry) RequestID() uint64   { return m.ID }
func (m *Carry) setID(id uint64)     { m.ID = id }
func (m *Carry) fields() *fieldTable { return &carryFields }
func (m *Carry) set(d *dec, i int) (err *Error) {
	m.Outcomes, err = readArray[Outcome](d, MaxBatch)
	return err
}
func (m *Carry) encode(c *enc) {
	c.envelope(TypeCarry, m.ID, 1)
	if len(m.Outcomes) > MaxBatch {
		c.fail("outcomes", "more than MaxBatch outcomes")
	}
	writeArray(c, "outcomes", m.Outcomes)
}

func (o *Outcome) fields() *fieldTable { return &outcomeFields }
func (o *Outcome) set(d *dec, i int) (err *Error) {
	switch i {
	case 0:
		o.RunID, err = d.uint()
	case 1:
		o.Epoch, err = d.uint()
	case 2:
		o.Namespace, err = d.name(task.MaxNamespaceLen)
	case 3:
		o.TaskID, err = d.str(task.MaxIDLen)
	case 4:
		o.Version, err = d.uint()
	case 5:
		o.Attempt, err = d.uint()
	case 6:
		o.Due, err = d.int()
	case 7:
		o.Failed, err = d.bool()
	case 8:
		o.Err, err = d.str(MaxTextLen)
	case 9:
		o.Retryable, err = d.bool()
	}
	return err
}
func (o *Outcome) encode(c *enc) {
	c.mapLen(5 + count(o.Namespace != "") + count(o.Version != 0) + 3*count(o.Failed))
	c.kUint("run", o.RunID)
	c.kUint("epoch", o.Epoch)
	if o.Namespace != "" {
		c.kStr("ns", o.Namespace)
	}
	c.kStr("tid", o.TaskID)
	if o.Version != 0 {
		c.kUint("version", o.Version)
	}
	c.kUint("attempt", o.Attempt)
	c.kInt("due", o.Due)
	if o.Failed {
		c.str("failed")
		c.bool(true)
		c.kStr("err", o.Err)
		c.str("retryable")
		c.bool(o.Retryable)
	}
}
