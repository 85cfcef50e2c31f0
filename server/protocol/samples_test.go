package protocol

import (
	"time"

	"github.com/tock-sched/tock/core/task"
)

// sampleTask uses every field of a task.
func sampleTask() Task {
	return Task{
		Namespace: "billing", ID: "invoice-42", Type: "send-invoice", Payload: []byte{0xde, 0xad, 0xbe, 0xef},
		Schedule: Schedule{Kind: task.KindCron, Cron: "0 30 2 * * *", TZ: "Europe/Berlin"},
		Retry: Retry{MaxAttempts: 5, InitialBackoff: int64(time.Second), MaxBackoff: int64(time.Minute),
			Multiplier: 2, Jitter: 0.25, MaxRetry: int64(time.Hour)},
		Timeout: int64(30 * time.Second), Misfire: task.MisfireSkip, Version: 3, Durability: Durable,
		Traceparent: sampleTraceparent, Tracestate: "congo=t61rcWkgMzE",
	}
}

// sampleTraceparent is the W3C Trace Context specification's example.
const sampleTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// samples holds one message of every type, with every field set where a field exists:
// the round-trip test, the stream test and the fuzz seeds all start here.
func samples() []Message {
	t := sampleTask()
	minimal := Task{ID: "t1", Type: "email", Schedule: Schedule{Kind: task.KindAfter, Delay: int64(time.Second)}, Durability: Ephemeral}
	every := Task{ID: "t2", Type: "poll", Schedule: Schedule{Kind: task.KindEvery, Interval: int64(time.Minute), Anchor: task.FixedDelay}, Durability: Ephemeral}
	at := Task{ID: "t3", Type: "poll", Schedule: Schedule{Kind: task.KindAt, At: 1_767_225_600_000_000_000}, Durability: Durable}
	child := Task{ID: "t4", Type: "report", Schedule: Schedule{Kind: task.KindAfter, Delay: 1}, Durability: Ephemeral,
		DependsOn: &task.Deps{On: []string{"t1", "t3"}, OnParentFailure: task.ParentRunAnyway}}
	hist := []AttemptRecord{{Attempt: 1, Start: 100, End: 200, Err: "boom"}, {Attempt: 2, Start: 300}}
	info := Info{Task: t, State: task.Failed, Attempts: 2, LastError: "boom", NextRun: 1_767_225_600_000_000_000, Runs: 9, History: hist}
	return []Message{
		&Hello{ID: 1, Version: Version, Name: "billing-svc", Token: "s3cret", Role: RoleClient},
		&Welcome{ID: 1, Version: Version, Name: "tockd 0.1", Node: "node-a", Epoch: 7, MaxFrame: DefaultMaxFrame, Heartbeat: int64(500 * time.Millisecond),
			Partitions: 16, PartitionRev: 42},
		&Error{ID: 9, Code: CodeNotLeader, Message: "not the leader", Field: "task.tid", Leader: "10.0.0.2:7070", RunID: 5, PartitionRev: 42},
		&OK{ID: 2},
		&Ping{ID: 3},
		&Pong{ID: 3},
		&Submit{ID: 4, Task: t},
		&SubmitBatch{ID: 5, Tasks: []Task{minimal, every, at, child}},
		&Cancel{ID: 6, TaskRef: TaskRef{Namespace: "billing", TaskID: "invoice-42"}},
		&Get{ID: 7, TaskRef: TaskRef{TaskID: "t1"}, OmitPayload: true},
		&List{ID: 8, State: task.Pending, Cursor: "abc", Limit: 100, OmitPayload: true},
		&TaskStatus{ID: 4, Namespace: "billing", TaskID: "invoice-42", Durability: Durable, State: task.Pending, NextRun: 1_767_225_600_000_000_000, Version: 3},
		&BatchResult{ID: 5, Results: []ItemResult{
			{ID: "t1", Durability: Ephemeral, State: task.Pending, NextRun: 1, Version: 1},
			{Namespace: "x", ID: "t2", Durability: Ephemeral, Code: CodeInvalidTask, Message: "bad cron", Field: "schedule.cron"},
		}},
		&TaskInfo{ID: 7, Info: info},
		&TaskPage{ID: 8, Items: []Info{info, {Task: minimal, State: task.Pending, Cut: Cut{PayloadLen: 1 << 20, Truncated: true}}, {Task: child, State: task.Waiting}}, Next: "cursor-2"},
		&DLQList{ID: 10, Cursor: "c", Limit: 50, OmitPayload: true},
		&DLQPage{ID: 10, Items: []DeadLetter{{Task: t, Attempts: hist, DiedAt: 500, Reason: "attempts exhausted (2 of 2)", Cut: Cut{PayloadLen: 4, Truncated: true}}}, Next: "n"},
		&DLQRequeue{ID: 11, TaskRef: TaskRef{Namespace: "billing", TaskID: "invoice-42"}},
		&DLQPurge{ID: 12, Namespace: "billing", TaskID: "invoice-42"},
		&Purged{ID: 12, Count: 1},
		&Pause{ID: 13, TaskType: "email"},
		&Resume{ID: 14, TaskType: "email"},
		&Stats{ID: 15},
		&StatsReply{ID: 15, Counters: map[string]uint64{"submitted": 10, "succeeded": 8}, Gauges: map[string]int64{"tasks": 2, "workers": 1}},
		&Partitions{ID: 22},
		&PartitionMap{ID: 22, Count: 4, Rev: 42, Nodes: []PartitionNode{{Name: "node-a", Addr: "10.0.0.1:7450"}, {Name: "node-b"}},
			Owners: []uint64{0, 1, 1, 0}, Epochs: []uint64{40, 41, 0, 40}},
		&ConfigGet{ID: 23, Key: "rate_limit/email"},
		&ConfigList{ID: 24},
		&ConfigSet{ID: 25, Key: "rate_limit/email", Value: "100:10"},
		&ConfigValues{ID: 25, Rev: 43, Values: []ConfigValue{{Key: "log_level", Value: "info"},
			{Key: "rate_limit/email", Value: "100:10", Set: true}}},
		&Subscribe{ID: 16, Types: []string{"email", "send-invoice"}, Credits: 64, BatchFires: 100},
		&Credit{ID: 17, Credits: 8},
		&Fire{Namespace: "billing", TaskID: "invoice-42", TaskType: "send-invoice", Payload: []byte("hi"), RunID: 77, Attempt: 1,
			Due: 1_767_225_600_000_000_000, Epoch: 7, TTR: int64(30 * time.Second), Durability: Durable, Version: 3,
			Traceparent: sampleTraceparent, Tracestate: "congo=t61rcWkgMzE"},
		&Fires{Runs: []Fire{
			{Namespace: "billing", TaskID: "invoice-42", TaskType: "send-invoice", Payload: []byte("hi"), RunID: 81, Attempt: 2,
				Due: 1_767_225_600_000_000_000, Epoch: 7, TTR: int64(30 * time.Second), Durability: Durable, Version: 3,
				Traceparent: sampleTraceparent},
			{Namespace: "default", TaskID: "t1", TaskType: "email", RunID: 82, Attempt: 1, Due: 5, Epoch: 7, TTR: 1, Durability: Ephemeral},
		}},
		&Ack{ID: 18, RunID: 77, Epoch: 7},
		&Nack{ID: 19, RunID: 78, Epoch: 7, Err: "smtp down", Retryable: true},
		&Acks{ID: 20, RunIDs: []uint64{79, 80, 1 << 40}, Epoch: 7, Credits: 3},
		&Acked{ID: 20, Failed: []AckFailure{{RunID: 80, Code: CodeUnknownRun, Message: "run 80 is not outstanding"}, {RunID: 1 << 40, Code: CodeStaleEpoch}}},
		&Carry{ID: 21, Outcomes: []Outcome{
			{RunID: 77, Epoch: 7, Namespace: "billing", TaskID: "invoice-42", Version: 3, Attempt: 1, Due: 1_767_225_600_000_000_000},
			{RunID: 78, Epoch: 6, TaskID: "t1", Attempt: 2, Due: 5, Failed: true, Err: "smtp down", Retryable: true},
		}},
		&Adopt{ID: 22, Runs: []Outcome{
			{RunID: 79, Epoch: 7, Namespace: "billing", TaskID: "invoice-43", Version: 3, Attempt: 1, Due: 1_767_225_600_000_000_000},
			{RunID: 80, Epoch: 6, TaskID: "t2", Attempt: 2, Due: 5},
		}},
		&Acked{ID: 22, Failed: []AckFailure{{RunID: 80, Code: CodeUnknownRun, Message: "task default/t2 is not held here"}},
			Adopted: []Adoption{{RunID: 79, As: 91, Epoch: 8}}},
	}
}
