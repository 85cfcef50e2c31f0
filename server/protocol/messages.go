package protocol

import (
	"fmt"
	"strconv"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/partition"
)

// Version is the protocol version this package speaks (HELLO and WELCOME "v").
const Version = 1

// Type is a message type: the "t" of every message. Numbers never change meaning.
type Type uint8

// Message types, grouped by ranges: 1-15 connection, 16-31 tasks, 32-47 dead letters and
// administration, 48-63 workers. "->" is client to server, "<-" server to client.
const (
	TypeHello        Type = 1  // -> first frame: version, name, token, role
	TypeWelcome      Type = 2  // <- reply to HELLO
	TypeError        Type = 3  // <- reply to any request that failed
	TypeOK           Type = 4  // <- reply to requests with nothing else to say
	TypePing         Type = 5  // -> liveness
	TypePong         Type = 6  // <- reply to PING
	TypeSubmit       Type = 16 // -> one task; reply TASK_STATUS
	TypeSubmitBatch  Type = 17 // -> up to MaxBatch tasks; reply BATCH_RESULT
	TypeCancel       Type = 18 // -> reply TASK_STATUS
	TypeGet          Type = 19 // -> reply TASK_INFO
	TypeList         Type = 20 // -> reply TASK_PAGE
	TypeTaskStatus   Type = 21 // <- what a submit, cancel or requeue left the task as
	TypeBatchResult  Type = 22 // <- one result per submitted task
	TypeTaskInfo     Type = 23 // <- one task's snapshot
	TypeTaskPage     Type = 24 // <- a page of snapshots
	TypeDLQList      Type = 32 // -> reply DLQ_PAGE
	TypeDLQPage      Type = 33 // <- a page of dead letters
	TypeDLQRequeue   Type = 34 // -> reply TASK_STATUS
	TypeDLQPurge     Type = 35 // -> reply PURGED
	TypePurged       Type = 36 // <- how many dead letters were removed
	TypePause        Type = 37 // -> stop dispatching a task type; reply OK
	TypeResume       Type = 38 // -> dispatch it again; reply OK
	TypeStats        Type = 39 // -> reply STATS_REPLY
	TypeStatsReply   Type = 40 // <- counters and gauges
	TypePartitions   Type = 41 // -> reply PARTITION_MAP
	TypePartitionMap Type = 42 // <- the partition count, map and its revision
	TypeConfigGet    Type = 43 // -> one runtime setting; reply CONFIG_VALUES (config.go)
	TypeConfigList   Type = 44 // -> every runtime setting; reply CONFIG_VALUES
	TypeConfigSet    Type = 45 // -> set or reset a runtime setting for the cluster; reply CONFIG_VALUES
	TypeConfigValues Type = 46 // <- runtime settings as the node applies them
	TypeSubscribe    Type = 48 // -> worker: the types it serves and its credits; reply OK
	TypeCredit       Type = 49 // -> worker: more credits; reply OK
	TypeFire         Type = 50 // <- push (id 0): run this task now
	TypeAck          Type = 51 // -> worker: the run succeeded; reply OK
	TypeNack         Type = 52 // -> worker: the run failed; reply OK
	TypeAcks         Type = 53 // -> worker: up to MaxBatch runs succeeded; reply ACKED
	TypeAcked        Type = 54 // <- reply to ACKS and CARRY: the runs that could not be acknowledged
	TypeCarry        Type = 55 // -> worker: outcomes of runs an earlier connection never confirmed; reply ACKED
	TypeFires        Type = 56 // <- push (id 0) to a worker that asked for it: run these tasks now
	TypeAdopt        Type = 57 // -> worker: runs an earlier connection FIREd that its handlers still run; reply ACKED

	numTypes = TypeAdopt + 1
)

var typeNames = [numTypes]string{
	TypeHello: "HELLO", TypeWelcome: "WELCOME", TypeError: "ERROR", TypeOK: "OK", TypePing: "PING", TypePong: "PONG",
	TypeSubmit: "SUBMIT", TypeSubmitBatch: "SUBMIT_BATCH", TypeCancel: "CANCEL", TypeGet: "GET", TypeList: "LIST",
	TypeTaskStatus: "TASK_STATUS", TypeBatchResult: "BATCH_RESULT", TypeTaskInfo: "TASK_INFO", TypeTaskPage: "TASK_PAGE",
	TypeDLQList: "DLQ_LIST", TypeDLQPage: "DLQ_PAGE", TypeDLQRequeue: "DLQ_REQUEUE", TypeDLQPurge: "DLQ_PURGE",
	TypePurged: "PURGED", TypePause: "PAUSE", TypeResume: "RESUME", TypeStats: "STATS", TypeStatsReply: "STATS_REPLY",
	TypePartitions: "PARTITIONS", TypePartitionMap: "PARTITION_MAP",
	TypeConfigGet: "CONFIG_GET", TypeConfigList: "CONFIG_LIST", TypeConfigSet: "CONFIG_SET", TypeConfigValues: "CONFIG_VALUES",
	TypeSubscribe: "SUBSCRIBE", TypeCredit: "CREDIT", TypeFire: "FIRE", TypeAck: "ACK", TypeNack: "NACK",
	TypeAcks: "ACKS", TypeAcked: "ACKED", TypeCarry: "CARRY", TypeFires: "FIRES", TypeAdopt: "ADOPT",
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
	// server pushes (FIRE, FIRES).
	RequestID() uint64
	setID(uint64)
}

// msgSpec defines a message type: who may send it, and its fields (after "t" and "id",
// which every message carries), from which its decoder table and its encoder come.
type msgSpec struct {
	from  senders
	table *fieldTable // the fields with "t" and "id" in front
	new   func() Message
	write func(m Message, c *enc) // the whole map, envelope included
}

// message defines the message type t of Go type M, sent by from, with the fields fs in
// the order the encoder writes them.
func message[M any, P interface {
	*M
	Message
}](t Type, from senders, fs ...field[M]) *msgSpec {
	s := newMapSpec(true, fs...)
	return &msgSpec{from: from, table: &s.table,
		new: func() Message { return P(new(M)) },
		write: func(x Message, c *enc) {
			m, ok := x.(P)
			if !ok { // another package's type that embeds one of these
				c.fail("t", fmt.Sprintf("%T is not this package's %v", x, t))
				return
			}
			// The header is a fixmap, its count patched in at the end; "t" comes first,
			// so that a decoder finds it without a second pass.
			at := len(c.buf)
			c.buf = append(c.buf, codeFixMap, codeFixStr|1, 't')
			c.uint(uint64(t))
			c.buf = append(c.buf, codeFixStr|2, 'i', 'd')
			c.uint(x.RequestID())
			patchMapLen(c, at, 2+s.writeFields(c, (*M)(m)))
		},
	}
}

// specs[t] defines message type t; nil for a number that is no type.
var specs = [numTypes]*msgSpec{
	TypeHello: helloSpec, TypeWelcome: welcomeSpec, TypeError: errorSpec, TypeOK: okSpec, TypePing: pingSpec,
	TypePong: pongSpec, TypeSubmit: submitSpec, TypeSubmitBatch: submitBatchSpec, TypeCancel: cancelSpec,
	TypeGet: getSpec, TypeList: listSpec, TypeTaskStatus: taskStatusSpec, TypeBatchResult: batchResultSpec,
	TypeTaskInfo: taskInfoSpec, TypeTaskPage: taskPageSpec, TypeDLQList: dlqListSpec, TypeDLQPage: dlqPageSpec,
	TypeDLQRequeue: dlqRequeueSpec, TypeDLQPurge: dlqPurgeSpec, TypePurged: purgedSpec, TypePause: pauseSpec,
	TypeResume: resumeSpec, TypeStats: statsSpec, TypeStatsReply: statsReplySpec, TypePartitions: partitionsSpec,
	TypePartitionMap: partitionMapSpec, TypeConfigGet: configGetSpec, TypeConfigList: configListSpec,
	TypeConfigSet: configSetSpec, TypeConfigValues: configValuesSpec, TypeSubscribe: subscribeSpec,
	TypeCredit: creditSpec, TypeFire: fireSpec, TypeAck: ackSpec, TypeNack: nackSpec, TypeAcks: acksSpec,
	TypeAcked: ackedSpec, TypeCarry: carrySpec, TypeFires: firesSpec, TypeAdopt: adoptSpec,
}

// bit returns key's presence bit as checkFields sees the mask ("t" and "id" shifted
// out). It panics for a key the type lacks: a programming error.
func (s *msgSpec) bit(key string) uint64 { return s.table.bit(key) >> 2 }

// specOf returns the spec of message type t, or nil for a type this version does not know.
func specOf(t uint64) *msgSpec {
	if t < uint64(numTypes) {
		return specs[t]
	}
	return nil
}

// ---- connection ----

// Hello opens a connection: the client's first frame.
type Hello struct {
	ID      uint64
	Version uint64 // "v": Version
	Name    string // "name": the client's name, for logs
	Token   string // "token": the shared token, if the server requires one
	Role    Role   // "role"
}

var helloSpec = message(TypeHello, byClient|byWorker,
	uintField("v", func(m *Hello) *uint64 { return &m.Version }).req(),
	strField("name", MaxNameLen, func(m *Hello) *string { return &m.Name }).req(),
	strField("token", MaxTokenLen, func(m *Hello) *string { return &m.Token }),
	enumField("role", roleNames[:], func(m *Hello) *Role { return &m.Role }).req(),
)

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
	// Follower ("follower", optional) says that this node does not lead at the
	// handshake, so that a worker goes to the leader before it sends anything, its
	// CARRY above all; false (absent) says nothing either way.
	Follower bool
	// Leader ("leader", optional) is the leader's client address as the node last read
	// it, with Follower; empty when it knows none.
	Leader string
	// Partitions ("partitions", optional) is the cluster's partition count P; 0
	// (absent) from a server that states none.
	Partitions uint64
	// PartitionRev ("partition_rev", optional) is the revision of the partition map the
	// node holds (PARTITION_MAP "rev"): a client holding a map of a lower one asks
	// PARTITIONS again.
	PartitionRev uint64
}

// HeartbeatMisses is how many heartbeat intervals (WELCOME "heartbeat_ns") may pass with
// nothing at all arriving before a client declares the connection dead (PROTOCOL.md).
const HeartbeatMisses = 3

var welcomeSpec = message(TypeWelcome, byServer,
	uintField("v", func(m *Welcome) *uint64 { return &m.Version }).req(),
	strField("name", MaxNameLen, func(m *Welcome) *string { return &m.Name }).req(),
	strField("node", MaxNameLen, func(m *Welcome) *string { return &m.Node }).req(),
	uintField("epoch", func(m *Welcome) *uint64 { return &m.Epoch }).req(),
	uintMaxField("max_frame", MaxFrameLimit, func(m *Welcome) *uint64 { return &m.MaxFrame }).req(),
	positiveField("heartbeat_ns", func(m *Welcome) *int64 { return &m.Heartbeat }),
	boolField("follower", func(m *Welcome) *bool { return &m.Follower }),
	strField("leader", maxLeaderLen, func(m *Welcome) *string { return &m.Leader }),
	uintMaxField("partitions", partition.MaxCount, func(m *Welcome) *uint64 { return &m.Partitions }),
	uintField("partition_rev", func(m *Welcome) *uint64 { return &m.PartitionRev }),
)

// Error (the ERROR message) is defined in errors.go. Anyone may send it: the server
// never answers one.
var errorSpec = message(TypeError, byAnyone,
	codeField("code", func(m *Error) *Code { return &m.Code }).req(),
	strField("msg", MaxTextLen, func(m *Error) *string { return &m.Message }),
	strField("field", MaxNameLen, func(m *Error) *string { return &m.Field }),
	strField("leader", maxLeaderLen, func(m *Error) *string { return &m.Leader }),
	uintField("run", func(m *Error) *uint64 { return &m.RunID }),
	uintField("partition_rev", func(m *Error) *uint64 { return &m.PartitionRev }),
)

// The messages with no field but "id".
type (
	// OK answers a request that succeeded with nothing more to say (PAUSE, RESUME,
	// SUBSCRIBE, CREDIT, ACK, NACK).
	OK struct{ ID uint64 }
	// Ping asks for a PONG.
	Ping struct{ ID uint64 }
	// Pong answers a PING.
	Pong struct{ ID uint64 }
	// Stats asks for the server's counters and gauges.
	Stats struct{ ID uint64 }
	// Partitions asks for the partition map (PARTITION_MAP).
	Partitions struct{ ID uint64 }
)

var (
	okSpec    = message[OK](TypeOK, byServer)
	pingSpec  = message[Ping](TypePing, byClient|byWorker)
	pongSpec  = message[Pong](TypePong, byServer)
	statsSpec = message[Stats](TypeStats, byClient|byWorker)
	// partitionsSpec is answered by any node, leading or not.
	partitionsSpec = message[Partitions](TypePartitions, byClient|byWorker)
)

// ---- tasks ----

// Submit submits one task.
type Submit struct {
	ID   uint64
	Task Task // "task"
}

var submitSpec = message(TypeSubmit, byClient|byWorker,
	subField("task", wireMaps[Task](), func(m *Submit) *Task { return &m.Task }).req())

// SubmitBatch submits up to MaxBatch tasks; each gets its own result.
type SubmitBatch struct {
	ID    uint64
	Tasks []Task // "tasks"
}

var submitBatchSpec = message(TypeSubmitBatch, byClient|byWorker,
	arrayField("tasks", MaxBatch, wireMaps[Task](), func(m *SubmitBatch) *[]Task { return &m.Tasks }).req())

// TaskRef names a task: the body of CANCEL, GET and DLQ_REQUEUE.
type TaskRef struct {
	Namespace string // "ns"; empty means task.DefaultNamespace
	TaskID    string // "tid"
}

var taskRefFields = []field[TaskRef]{
	nameField("ns", task.MaxNamespaceLen, func(r *TaskRef) *string { return &r.Namespace }),
	strField("tid", task.MaxIDLen, func(r *TaskRef) *string { return &r.TaskID }).req(),
}

// Cancel cancels a task.
type Cancel struct {
	ID uint64
	TaskRef
}

// refMessage defines a request whose body is a TaskRef (got by ref), then the fields more.
func refMessage[M any, P interface {
	*M
	Message
}](t Type, ref func(m *M) *TaskRef, more ...field[M]) *msgSpec {
	return message[M, P](t, byClient|byWorker, append(within(ref, taskRefFields...), more...)...)
}

var cancelSpec = refMessage(TypeCancel, func(m *Cancel) *TaskRef { return &m.TaskRef })

// Get asks for one task's snapshot.
type Get struct {
	ID uint64
	TaskRef
	OmitPayload bool // "omit_payload": leave the payload out (the snapshot's PayloadLen says its length)
}

var getSpec = refMessage(TypeGet, func(m *Get) *TaskRef { return &m.TaskRef },
	boolField("omit_payload", func(m *Get) *bool { return &m.OmitPayload }))

// DLQRequeue resubmits a dead letter's task and removes the dead letter.
type DLQRequeue struct {
	ID uint64
	TaskRef
}

var dlqRequeueSpec = refMessage(TypeDLQRequeue, func(m *DLQRequeue) *TaskRef { return &m.TaskRef })

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

var listSpec = message(TypeList, byClient|byWorker,
	stateField("state", func(m *List) *task.State { return &m.State }),
	strField("cursor", MaxCursorLen, func(m *List) *string { return &m.Cursor }),
	uintMaxField("limit", MaxPageItems, func(m *List) *uint64 { return &m.Limit }),
	boolField("omit_payload", func(m *List) *bool { return &m.OmitPayload }),
)

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

var taskStatusSpec = message(TypeTaskStatus, byServer,
	nameField("ns", task.MaxNamespaceLen, func(m *TaskStatus) *string { return &m.Namespace }),
	strField("tid", task.MaxIDLen, func(m *TaskStatus) *string { return &m.TaskID }).req(),
	enumField("durability", durNames[:], func(m *TaskStatus) *Durability { return &m.Durability }).req(),
	stateField("state", func(m *TaskStatus) *task.State { return &m.State }).req(),
	intField("next_run", func(m *TaskStatus) *int64 { return &m.NextRun }),
	uintField("version", func(m *TaskStatus) *uint64 { return &m.Version }),
)

// BatchResult answers SUBMIT_BATCH: one result per task, in order.
type BatchResult struct {
	ID      uint64
	Results []ItemResult // "results"
}

var batchResultSpec = message(TypeBatchResult, byServer,
	arrayField("results", MaxBatch, wireMaps[ItemResult](), func(m *BatchResult) *[]ItemResult { return &m.Results }).req())

// TaskInfo answers GET.
type TaskInfo struct {
	ID   uint64
	Info Info // "info"
}

var taskInfoSpec = message(TypeTaskInfo, byServer,
	subField("info", specMaps(infoSpec), func(m *TaskInfo) *Info { return &m.Info }).req())

// TaskPage answers LIST.
type TaskPage struct {
	ID    uint64
	Items []Info // "items"
	Next  string // "next": the cursor of the next page; empty on the last
}

// pageReply defines a page of at most MaxPageItems items and the cursor of the next.
func pageReply[M, T any, P interface {
	*M
	Message
}](t Type, item elems[T], items func(m *M) *[]T, next func(m *M) *string) *msgSpec {
	return message[M, P](t, byServer, arrayField("items", MaxPageItems, item, items).req(),
		strField("next", MaxCursorLen, next))
}

var taskPageSpec = pageReply(TypeTaskPage, specMaps(infoSpec),
	func(m *TaskPage) *[]Info { return &m.Items }, func(m *TaskPage) *string { return &m.Next })

// ---- dead letters and administration ----

// DLQList asks for a page of dead letters, oldest first.
type DLQList struct {
	ID     uint64
	Cursor string // "cursor"
	Limit  uint64 // "limit"; 0 means the server's default
	// OmitPayload ("omit_payload") leaves every payload out, as List's does.
	OmitPayload bool
}

var dlqListSpec = message(TypeDLQList, byClient|byWorker,
	strField("cursor", MaxCursorLen, func(m *DLQList) *string { return &m.Cursor }),
	uintMaxField("limit", MaxPageItems, func(m *DLQList) *uint64 { return &m.Limit }),
	boolField("omit_payload", func(m *DLQList) *bool { return &m.OmitPayload }),
)

// DLQPage answers DLQ_LIST.
type DLQPage struct {
	ID    uint64
	Items []DeadLetter // "items"
	Next  string       // "next"
}

var dlqPageSpec = pageReply(TypeDLQPage, specMaps(deadLetterSpec),
	func(m *DLQPage) *[]DeadLetter { return &m.Items }, func(m *DLQPage) *string { return &m.Next })

// DLQPurge removes one dead letter (TaskID set) or all of them (All); exactly one of
// the two.
type DLQPurge struct {
	ID        uint64
	Namespace string // "ns"
	TaskID    string // "tid"
	All       bool   // "all"
}

var dlqPurgeSpec = message(TypeDLQPurge, byClient|byWorker,
	nameField("ns", task.MaxNamespaceLen, func(m *DLQPurge) *string { return &m.Namespace }),
	strField("tid", task.MaxIDLen, func(m *DLQPurge) *string { return &m.TaskID }).
		omitIf(func(m *DLQPurge) bool { return m.All }), // written when not All, even empty
	boolField("all", func(m *DLQPurge) *bool { return &m.All }).
		refuse("tid", purgeOne, func(m *DLQPurge) bool { return m.TaskID != "" }),
)

// purgeTID is the presence bit of DLQ_PURGE's "tid".
var purgeTID = dlqPurgeSpec.bit("tid")

const purgeOne = `give exactly one of "tid" and "all": true`

// checkFields: exactly one of "tid" and "all": true.
func (m *DLQPurge) checkFields(d *dec, present uint64) *Error {
	if (present&purgeTID != 0) == m.All {
		return d.at(d.r.badField(purgeOne), "tid")
	}
	return nil
}

// Purged answers DLQ_PURGE.
type Purged struct {
	ID    uint64
	Count uint64 // "count": dead letters removed
}

var purgedSpec = message(TypePurged, byServer, uintField("count", func(m *Purged) *uint64 { return &m.Count }).req())

// Pause stops dispatching tasks of one type; they stay due until RESUME.
type Pause struct {
	ID       uint64
	TaskType string // "type"
}

// Resume undoes Pause.
type Resume struct {
	ID       uint64
	TaskType string // "type"
}

var (
	pauseSpec = message(TypePause, byClient|byWorker,
		nameField("type", task.MaxTypeLen, func(m *Pause) *string { return &m.TaskType }).req())
	resumeSpec = message(TypeResume, byClient|byWorker,
		nameField("type", task.MaxTypeLen, func(m *Resume) *string { return &m.TaskType }).req())
)

// StatsReply answers STATS. The names are documented in PROTOCOL.md; a client ignores
// names it does not know.
type StatsReply struct {
	ID       uint64
	Counters map[string]uint64 // "counters": monotonic totals
	Gauges   map[string]int64  // "gauges": levels now
}

var statsReplySpec = message(TypeStatsReply, byServer,
	statsField("counters", (*reader).uint, (*enc).uint, func(m *StatsReply) *map[string]uint64 { return &m.Counters }),
	statsField("gauges", (*reader).int, (*enc).int, func(m *StatsReply) *map[string]int64 { return &m.Gauges }),
)

// PartitionMap answers PARTITIONS: which node owns each of the cluster's partitions, in
// the map stored in etcd at revision Rev, as the answering node read it.
type PartitionMap struct {
	ID    uint64
	Count uint64          // "count": the partition count P
	Rev   uint64          // "rev": the etcd revision of the stored map; 0 without etcd
	Nodes []PartitionNode // "nodes": the live nodes and any owner gone since, by name
	// Owners ("owners") has Count entries: Owners[p] is the index in Nodes of partition
	// p's owner. Both Nodes and Owners are empty while the node knows of no stored map.
	Owners []uint64
	// Epochs ("epochs", optional) has as many entries as Owners, or none: Epochs[p] is
	// the epoch of partition p's owner's holding (its owner key's create revision), 0
	// while the owner does not hold it (held = Epochs[p] > 0).
	Epochs []uint64
}

// PartitionNode is one node of a PARTITION_MAP.
type PartitionNode struct {
	Name string // "name": its node ID (WELCOME "node")
	Addr string // "addr": its client address, host:port; empty when it registered none
}

var partitionNodeSpec = newMapSpec(false,
	strField("name", MaxNameLen, func(n *PartitionNode) *string { return &n.Name }).req(),
	strField("addr", maxLeaderLen, func(n *PartitionNode) *string { return &n.Addr }),
)

var partitionMapSpec = message(TypePartitionMap, byServer,
	uintMaxField("count", partition.MaxCount, func(m *PartitionMap) *uint64 { return &m.Count }).req(),
	uintField("rev", func(m *PartitionMap) *uint64 { return &m.Rev }).req(),
	arrayField("nodes", partition.MaxCount, specMaps(partitionNodeSpec), func(m *PartitionMap) *[]PartitionNode { return &m.Nodes }).req(),
	arrayField("owners", partition.MaxCount, uints(partition.MaxCount-1), func(m *PartitionMap) *[]uint64 { return &m.Owners }).req(),
	arrayField("epochs", partition.MaxCount, uints(1<<63-1), func(m *PartitionMap) *[]uint64 { return &m.Epochs }),
)

// checkFields: one owner per partition, each an index into nodes; or no owners, with no
// nodes.
func (m *PartitionMap) checkFields(d *dec, _ uint64) *Error {
	if uint64(len(m.Owners)) != m.Count && (len(m.Owners) > 0 || len(m.Nodes) > 0) {
		return d.at(d.r.badField("%d owners for %d partitions", len(m.Owners), m.Count), "owners")
	}
	for p, o := range m.Owners {
		if o >= uint64(len(m.Nodes)) {
			return d.at(d.r.badField("partition %d's owner is node %d of %d", p, o, len(m.Nodes)), "owners")
		}
	}
	if len(m.Epochs) > 0 && len(m.Epochs) != len(m.Owners) {
		return d.at(d.r.badField("%d epochs for %d owners", len(m.Epochs), len(m.Owners)), "epochs")
	}
	return nil
}

// ---- workers ----

// Subscribe makes a worker connection receive FIRE for the given task types, up to
// Credits runs outstanding at once. A second SUBSCRIBE replaces the first.
type Subscribe struct {
	ID      uint64
	Types   []string // "types"
	Credits uint64   // "credits"
	// BatchFires ("batch_fires", optional, at most MaxFiresRuns) asks for the runs that
	// are ready together as FIRES frames of at most this many runs each; 0 (absent):
	// FIRE frames only, as a worker that predates FIRES gets.
	BatchFires uint64
}

// maxCredits bounds a credit grant (SUBSCRIBE, CREDIT, ACKS): below 2^32.
const maxCredits = 1<<32 - 1

var subscribeSpec = message(TypeSubscribe, byWorker,
	arrayField("types", MaxTypes, names(task.MaxTypeLen), func(m *Subscribe) *[]string { return &m.Types }).req(),
	uintMaxField("credits", maxCredits, func(m *Subscribe) *uint64 { return &m.Credits }).req(),
	uintMaxField("batch_fires", MaxFiresRuns, func(m *Subscribe) *uint64 { return &m.BatchFires }),
)

// Credit grants a worker connection more credits (added to what it has).
type Credit struct {
	ID      uint64
	Credits uint64 // "credits"
}

var creditSpec = message(TypeCredit, byWorker,
	uintMaxField("credits", maxCredits, func(m *Credit) *uint64 { return &m.Credits }).req())

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
	// Traceparent ("traceparent") and Tracestate ("tracestate"), optional: the W3C Trace
	// Context of the server's span for this run, the parent of the worker's handler span;
	// absent for a task submitted without one.
	Traceparent string
	Tracestate  string
	// Shard ("shard"), optional: for a run of a sharded task, which shard it is; absent
	// (the zero ShardOf) otherwise.
	Shard ShardOf
}

// ShardOf is a run's shard: Index of Of, 0 <= Index < Of, 2 <= Of <= task.MaxShards.
// On the wire it is the array [index, of], one key where a FIRE has room for one more.
type ShardOf struct {
	Index, Of uint16
}

// readShardOf reads a ShardOf, refusing one that breaks its bounds.
func (d *dec) readShardOf() (ShardOf, *Error) {
	n, err := d.r.arrayLen(2)
	if err != nil {
		return ShardOf{}, err
	}
	if n != 2 {
		return ShardOf{}, d.r.badField("[index, of] has %d elements, not 2", n)
	}
	var v [2]uint64
	for i := range v {
		if v[i], err = d.uintMax(task.MaxShards); err != nil {
			return ShardOf{}, err
		}
	}
	if v[1] < 2 || v[0] >= v[1] {
		return ShardOf{}, d.r.badField("[%d, %d]: want 0 <= index < of, 2 <= of <= %d", v[0], v[1], task.MaxShards)
	}
	return ShardOf{Index: uint16(v[0]), Of: uint16(v[1])}, nil
}

func putShardOf(c *enc, key string, v ShardOf) {
	c.str(key)
	c.arrayLen(2)
	c.uint(uint64(v.Index))
	c.uint(uint64(v.Of))
}

// fireFields are FIRE's keys, which each run of a FIRES carries too.
func fireFields() []field[Fire] {
	return []field[Fire]{
		nameField("ns", task.MaxNamespaceLen, func(m *Fire) *string { return &m.Namespace }).req(),
		strField("tid", task.MaxIDLen, func(m *Fire) *string { return &m.TaskID }).req(),
		nameField("type", task.MaxTypeLen, func(m *Fire) *string { return &m.TaskType }).req(),
		binField("payload", maxPayload, func(m *Fire) *[]byte { return &m.Payload }),
		uintField("run", func(m *Fire) *uint64 { return &m.RunID }).req(),
		uintField("attempt", func(m *Fire) *uint64 { return &m.Attempt }).req(),
		intField("due", func(m *Fire) *int64 { return &m.Due }).req(),
		uintField("epoch", func(m *Fire) *uint64 { return &m.Epoch }).req(),
		intField("ttr", func(m *Fire) *int64 { return &m.TTR }).req(),
		enumField("durability", durNames[:], func(m *Fire) *Durability { return &m.Durability }).req(),
		uintField("version", func(m *Fire) *uint64 { return &m.Version }),
		strField("traceparent", MaxTraceparentLen, func(m *Fire) *string { return &m.Traceparent }),
		strField("tracestate", MaxTracestateLen, func(m *Fire) *string { return &m.Tracestate }),
		scalarField("shard", (*dec).readShardOf, putShardOf, func(m *Fire) *ShardOf { return &m.Shard }),
	}
}

var fireSpec = message(TypeFire, byServer, fireFields()...)

// Fires is pushed (ID 0) to a worker whose SUBSCRIBE asked for it (BatchFires): many
// runs in one frame, each exactly what its own FIRE would have carried, each spending
// one credit and ended by its own ACK or NACK (or an ACKS), as a FIRE is.
type Fires struct {
	ID   uint64 // always 0: a push answers no request
	Runs []Fire // "runs": 1 to MaxFiresRuns, each with FIRE's keys but "t" and "id"; a run's ID is 0
}

// MaxFiresRuns bounds the runs of one FIRES, and so SUBSCRIBE's "batch_fires".
const MaxFiresRuns = MaxBatch

// fireRunSpec is the map of one run of a FIRES.
var fireRunSpec = newMapSpec(false, fireFields()...)

// noRuns is the refusal of a FIRES without runs, by the encoder and the decoder.
var noRuns = "a FIRES carries 1 to " + strconv.Itoa(MaxFiresRuns) + " runs, not 0"

var firesSpec = message(TypeFires, byServer, runsField(func(m *Fires) *[]Fire { return &m.Runs }).req().
	refuse("runs", noRuns, func(m *Fires) bool { return len(m.Runs) == 0 }))

// checkFields: a FIRES carries at least one run.
func (m *Fires) checkFields(d *dec, _ uint64) *Error {
	if len(m.Runs) == 0 {
		return d.at(d.r.badField("%s", noRuns), "runs")
	}
	return nil
}

// Ack reports a run's success.
type Ack struct {
	ID    uint64
	RunID uint64 // "run"
	Epoch uint64 // "epoch": the FIRE's
}

var ackSpec = message(TypeAck, byWorker,
	uintField("run", func(m *Ack) *uint64 { return &m.RunID }).req(),
	uintField("epoch", func(m *Ack) *uint64 { return &m.Epoch }).req(),
)

// Nack reports a run's failure.
type Nack struct {
	ID        uint64
	RunID     uint64 // "run"
	Epoch     uint64 // "epoch"
	Err       string // "err": the error, for people and the dead letter
	Retryable bool   // "retryable": false sends the task to the dead-letter queue now
}

var nackSpec = message(TypeNack, byWorker,
	uintField("run", func(m *Nack) *uint64 { return &m.RunID }).req(),
	uintField("epoch", func(m *Nack) *uint64 { return &m.Epoch }).req(),
	strField("err", MaxTextLen, func(m *Nack) *string { return &m.Err }),
	boolField("retryable", func(m *Nack) *bool { return &m.Retryable }).req(),
)

// Acks reports the success of many runs in one frame, all fired at one epoch: ACK for
// each, with one frame and one reply for all of them. It may grant credits too, as a
// CREDIT would (a worker returns one per finished run: sending them here saves a frame).
type Acks struct {
	ID      uint64
	RunIDs  []uint64 // "runs": at most MaxBatch
	Epoch   uint64   // "epoch": the FIREs'
	Credits uint64   // "credits": optional, < 2^32
}

var acksSpec = message(TypeAcks, byWorker,
	arrayField("runs", MaxBatch, uints(1<<64-1), func(m *Acks) *[]uint64 { return &m.RunIDs }).req(),
	uintField("epoch", func(m *Acks) *uint64 { return &m.Epoch }).req(),
	uintMaxField("credits", maxCredits, func(m *Acks) *uint64 { return &m.Credits }),
)

// Acked answers ACKS (and CARRY): every run it does not list was acknowledged, as an ACK
// answered OK would have been; each one it lists was refused, with the code and message
// an ACK of that run alone would have got (STALE_EPOCH, UNKNOWN_RUN, INTERNAL). It also
// answers ADOPT: Failed lists the runs refused (not held: their outcome is to be
// dropped), Adopted the runs taken over, each under the run ID its ACK or NACK names.
type Acked struct {
	ID      uint64
	Failed  []AckFailure // "failed": absent when every run was acknowledged
	Adopted []Adoption   // "adopted": ADOPT's runs taken over; absent in any other answer
}

// Adoption is one run an ADOPT handed in that the leader took over: its ACK or NACK
// names run As at epoch Epoch.
type Adoption struct {
	RunID uint64 // "run": the ADOPT's run ID
	As    uint64 // "as": the run ID the leader holds it under (the same, for a run of its own term)
	Epoch uint64 // "epoch": the leader's epoch, which its ACK or NACK names
}

var adoptionSpec = newMapSpec(false,
	uintField("run", func(a *Adoption) *uint64 { return &a.RunID }).req(),
	uintField("as", func(a *Adoption) *uint64 { return &a.As }).req(),
	uintField("epoch", func(a *Adoption) *uint64 { return &a.Epoch }).req(),
)

// AckFailure is one run an ACKS could not acknowledge.
type AckFailure struct {
	RunID   uint64 // "run"
	Code    Code   // "code"
	Message string // "msg"
}

var ackFailureSpec = newMapSpec(false,
	uintField("run", func(f *AckFailure) *uint64 { return &f.RunID }).req(),
	codeField("code", func(f *AckFailure) *Code { return &f.Code }).req(),
	strField("msg", MaxTextLen, func(f *AckFailure) *string { return &f.Message }),
)

var ackedSpec = message(TypeAcked, byServer,
	arrayField("failed", MaxBatch, specMaps(ackFailureSpec), func(m *Acked) *[]AckFailure { return &m.Failed }),
	arrayField("adopted", MaxBatch, specMaps(adoptionSpec), func(m *Acked) *[]Adoption { return &m.Adopted }))

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

// succeeded: an outcome's "failed", "err" and "retryable" are written only for a failure.
func succeeded(o *Outcome) bool { return !o.Failed }

// runKeys are the keys that name a carried run, as its FIRE did: an outcome's (CARRY)
// and a running run's (ADOPT).
func runKeys() []field[Outcome] {
	return []field[Outcome]{
		uintField("run", func(o *Outcome) *uint64 { return &o.RunID }).req(),
		uintField("epoch", func(o *Outcome) *uint64 { return &o.Epoch }).req(),
		nameField("ns", task.MaxNamespaceLen, func(o *Outcome) *string { return &o.Namespace }),
		strField("tid", task.MaxIDLen, func(o *Outcome) *string { return &o.TaskID }).req(),
		uintField("version", func(o *Outcome) *uint64 { return &o.Version }),
		uintField("attempt", func(o *Outcome) *uint64 { return &o.Attempt }).req(),
		intField("due", func(o *Outcome) *int64 { return &o.Due }).req(),
	}
}

var outcomeSpec = newMapSpec(false, append(runKeys(),
	boolField("failed", func(o *Outcome) *bool { return &o.Failed }),
	strField("err", MaxTextLen, func(o *Outcome) *string { return &o.Err }).omitIf(succeeded),
	boolField("retryable", func(o *Outcome) *bool { return &o.Retryable }).omitIf(succeeded),
)...)

var carrySpec = message(TypeCarry, byWorker,
	arrayField("outcomes", MaxBatch, specMaps(outcomeSpec), func(m *Carry) *[]Outcome { return &m.Outcomes }).req())

// Adopt hands in, on a worker's new connection (after its CARRY frames, before it grants
// credits), the runs an earlier connection was FIREd that its handlers still run. The
// leader takes over each run it holds unchanged, as CARRY's rule matches an outcome
// (namespace, ID, version, attempt, and a recurring task's due time), or an orphan of its
// own term (the same run and epoch): it does not FIRE that run again, and the run is in
// flight on this connection, its time to run started anew. ACKED lists the runs taken
// over (Adopted, with the run ID their ACK or NACK names) and those refused (Failed).
// Only the keys that name a run are read: an entry's "failed", "err" and "retryable"
// are ignored.
type Adopt struct {
	ID   uint64
	Runs []Outcome // "runs": at most MaxBatch; Failed, Err and Retryable unused
}

var runSpec = newMapSpec(false, runKeys()...)

var adoptSpec = message(TypeAdopt, byWorker,
	arrayField("runs", MaxBatch, specMaps(runSpec), func(m *Adopt) *[]Outcome { return &m.Runs }).req())

// ---- the envelope ----
//
// Every message type's Type, and its "id" (a struct field, not an embedded header, so
// that a literal names it as ID: 1).

func (m *Hello) Type() Type               { return TypeHello }
func (m *Hello) RequestID() uint64        { return m.ID }
func (m *Hello) setID(id uint64)          { m.ID = id }
func (m *Welcome) Type() Type             { return TypeWelcome }
func (m *Welcome) RequestID() uint64      { return m.ID }
func (m *Welcome) setID(id uint64)        { m.ID = id }
func (m *Error) Type() Type               { return TypeError }
func (m *Error) RequestID() uint64        { return m.ID }
func (m *Error) setID(id uint64)          { m.ID = id }
func (m *OK) Type() Type                  { return TypeOK }
func (m *OK) RequestID() uint64           { return m.ID }
func (m *OK) setID(id uint64)             { m.ID = id }
func (m *Ping) Type() Type                { return TypePing }
func (m *Ping) RequestID() uint64         { return m.ID }
func (m *Ping) setID(id uint64)           { m.ID = id }
func (m *Pong) Type() Type                { return TypePong }
func (m *Pong) RequestID() uint64         { return m.ID }
func (m *Pong) setID(id uint64)           { m.ID = id }
func (m *Submit) Type() Type              { return TypeSubmit }
func (m *Submit) RequestID() uint64       { return m.ID }
func (m *Submit) setID(id uint64)         { m.ID = id }
func (m *SubmitBatch) Type() Type         { return TypeSubmitBatch }
func (m *SubmitBatch) RequestID() uint64  { return m.ID }
func (m *SubmitBatch) setID(id uint64)    { m.ID = id }
func (m *Cancel) Type() Type              { return TypeCancel }
func (m *Cancel) RequestID() uint64       { return m.ID }
func (m *Cancel) setID(id uint64)         { m.ID = id }
func (m *Get) Type() Type                 { return TypeGet }
func (m *Get) RequestID() uint64          { return m.ID }
func (m *Get) setID(id uint64)            { m.ID = id }
func (m *List) Type() Type                { return TypeList }
func (m *List) RequestID() uint64         { return m.ID }
func (m *List) setID(id uint64)           { m.ID = id }
func (m *TaskStatus) Type() Type          { return TypeTaskStatus }
func (m *TaskStatus) RequestID() uint64   { return m.ID }
func (m *TaskStatus) setID(id uint64)     { m.ID = id }
func (m *BatchResult) Type() Type         { return TypeBatchResult }
func (m *BatchResult) RequestID() uint64  { return m.ID }
func (m *BatchResult) setID(id uint64)    { m.ID = id }
func (m *TaskInfo) Type() Type            { return TypeTaskInfo }
func (m *TaskInfo) RequestID() uint64     { return m.ID }
func (m *TaskInfo) setID(id uint64)       { m.ID = id }
func (m *TaskPage) Type() Type            { return TypeTaskPage }
func (m *TaskPage) RequestID() uint64     { return m.ID }
func (m *TaskPage) setID(id uint64)       { m.ID = id }
func (m *DLQList) Type() Type             { return TypeDLQList }
func (m *DLQList) RequestID() uint64      { return m.ID }
func (m *DLQList) setID(id uint64)        { m.ID = id }
func (m *DLQPage) Type() Type             { return TypeDLQPage }
func (m *DLQPage) RequestID() uint64      { return m.ID }
func (m *DLQPage) setID(id uint64)        { m.ID = id }
func (m *DLQRequeue) Type() Type          { return TypeDLQRequeue }
func (m *DLQRequeue) RequestID() uint64   { return m.ID }
func (m *DLQRequeue) setID(id uint64)     { m.ID = id }
func (m *DLQPurge) Type() Type            { return TypeDLQPurge }
func (m *DLQPurge) RequestID() uint64     { return m.ID }
func (m *DLQPurge) setID(id uint64)       { m.ID = id }
func (m *Purged) Type() Type              { return TypePurged }
func (m *Purged) RequestID() uint64       { return m.ID }
func (m *Purged) setID(id uint64)         { m.ID = id }
func (m *Pause) Type() Type               { return TypePause }
func (m *Pause) RequestID() uint64        { return m.ID }
func (m *Pause) setID(id uint64)          { m.ID = id }
func (m *Resume) Type() Type              { return TypeResume }
func (m *Resume) RequestID() uint64       { return m.ID }
func (m *Resume) setID(id uint64)         { m.ID = id }
func (m *Stats) Type() Type               { return TypeStats }
func (m *Stats) RequestID() uint64        { return m.ID }
func (m *Stats) setID(id uint64)          { m.ID = id }
func (m *StatsReply) Type() Type          { return TypeStatsReply }
func (m *StatsReply) RequestID() uint64   { return m.ID }
func (m *StatsReply) setID(id uint64)     { m.ID = id }
func (m *Partitions) Type() Type          { return TypePartitions }
func (m *Partitions) RequestID() uint64   { return m.ID }
func (m *Partitions) setID(id uint64)     { m.ID = id }
func (m *PartitionMap) Type() Type        { return TypePartitionMap }
func (m *PartitionMap) RequestID() uint64 { return m.ID }
func (m *PartitionMap) setID(id uint64)   { m.ID = id }
func (m *Subscribe) Type() Type           { return TypeSubscribe }
func (m *Subscribe) RequestID() uint64    { return m.ID }
func (m *Subscribe) setID(id uint64)      { m.ID = id }
func (m *Credit) Type() Type              { return TypeCredit }
func (m *Credit) RequestID() uint64       { return m.ID }
func (m *Credit) setID(id uint64)         { m.ID = id }
func (m *Fire) Type() Type                { return TypeFire }
func (m *Fire) RequestID() uint64         { return m.ID }
func (m *Fire) setID(id uint64)           { m.ID = id }
func (m *Ack) Type() Type                 { return TypeAck }
func (m *Ack) RequestID() uint64          { return m.ID }
func (m *Ack) setID(id uint64)            { m.ID = id }
func (m *Nack) Type() Type                { return TypeNack }
func (m *Nack) RequestID() uint64         { return m.ID }
func (m *Nack) setID(id uint64)           { m.ID = id }
func (m *Acks) Type() Type                { return TypeAcks }
func (m *Acks) RequestID() uint64         { return m.ID }
func (m *Acks) setID(id uint64)           { m.ID = id }
func (m *Acked) Type() Type               { return TypeAcked }
func (m *Acked) RequestID() uint64        { return m.ID }
func (m *Acked) setID(id uint64)          { m.ID = id }
func (m *Carry) Type() Type               { return TypeCarry }
func (m *Carry) RequestID() uint64        { return m.ID }
func (m *Carry) setID(id uint64)          { m.ID = id }
func (m *Adopt) Type() Type               { return TypeAdopt }
func (m *Adopt) RequestID() uint64        { return m.ID }
func (m *Adopt) setID(id uint64)          { m.ID = id }
func (m *Fires) Type() Type               { return TypeFires }
func (m *Fires) RequestID() uint64        { return m.ID }
func (m *Fires) setID(id uint64)          { m.ID = id }
