package tockd

import (
	"strings"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// fullTask is a task with every field set, every string at its longest.
func fullTask(payload int) protocol.Task {
	return protocol.Task{Namespace: strings.Repeat("n", task.MaxNamespaceLen), ID: strings.Repeat("i", task.MaxIDLen),
		Type: strings.Repeat("t", task.MaxTypeLen), Payload: make([]byte, payload),
		Schedule: protocol.Schedule{Kind: task.KindCron, Cron: strings.Repeat("*", protocol.MaxCronLen),
			TZ: strings.Repeat("z", protocol.MaxTZLen)},
		Retry: protocol.Retry{MaxAttempts: 1 << 60, InitialBackoff: 1 << 62, MaxBackoff: 1 << 62, Multiplier: 1.5,
			Jitter: 0.5, MaxRetry: 1 << 62},
		Timeout: 1 << 62, Misfire: task.MisfireSkip, Version: 1 << 63, Durability: protocol.Durable,
		Partition: 1 << 63, Exclusive: true, Shards: task.MaxShards,
		ConcurrencyKey: strings.Repeat("k", task.MaxConcurrencyKeyLen), ConcurrencyLimit: 1 << 63,
		Traceparent: strings.Repeat("p", protocol.MaxTraceparentLen), Tracestate: strings.Repeat("s", protocol.MaxTracestateLen)}
}

func fullAttempts(n int) []protocol.AttemptRecord {
	as := make([]protocol.AttemptRecord, n)
	for i := range as {
		as[i] = protocol.AttemptRecord{Attempt: 1 << 63, Start: -1 << 63, End: 1<<63 - 1, Err: strings.Repeat("e", 300)}
	}
	return as
}

func fullInfo(payload int) protocol.Info {
	return protocol.Info{Task: fullTask(payload), State: task.Cancelled, Attempts: 1 << 63,
		LastError: strings.Repeat("l", 1000), NextRun: -1 << 63, Runs: 1 << 63, History: fullAttempts(32)}
}

// fullPartitionMap is a PARTITION_MAP at its limits: 4096 partitions over 4096 nodes,
// every name and address at its longest.
func fullPartitionMap() *protocol.PartitionMap {
	m := &protocol.PartitionMap{ID: 1 << 63, Count: 4096, Rev: 1 << 63}
	for i := range 4096 {
		m.Nodes = append(m.Nodes, protocol.PartitionNode{Name: strings.Repeat("n", 128), Addr: strings.Repeat("a", 256)})
		m.Owners = append(m.Owners, uint64(i))
		m.Epochs = append(m.Epochs, 1<<63-1)
	}
	return m
}

// replyCost never counts less than the encoder writes, for every reply type tockd sends,
// at the limits of every field, and counts at most a fixed overhead per item more.
func TestReplyCostBoundsEncoding(t *testing.T) {
	long := strings.Repeat("m", 500)
	dl := protocol.DeadLetter{Task: fullTask(3000), Attempts: fullAttempts(32), DiedAt: -1 << 63, Reason: long}
	stats := &protocol.StatsReply{ID: 1 << 63, Counters: map[string]uint64{}, Gauges: map[string]int64{}}
	for i := range 40 {
		stats.Counters[strings.Repeat("c", i+90)] = 1 << 63
		stats.Gauges[strings.Repeat("g", i+90)] = -1 << 63
	}
	for _, m := range []protocol.Message{
		&protocol.OK{ID: 1 << 63}, &protocol.Pong{ID: 1 << 63}, &protocol.Purged{ID: 1 << 63, Count: 1 << 63},
		&protocol.Welcome{ID: 1 << 63, Version: 1 << 63, Name: strings.Repeat("n", 128), Node: strings.Repeat("d", 128),
			Epoch: 1 << 63, MaxFrame: 1 << 26, Heartbeat: 1 << 62, Follower: true, Leader: strings.Repeat("l", 256),
			Partitions: 4096, PartitionRev: 1 << 63},
		fullPartitionMap(),
		&protocol.Error{ID: 1 << 63, Code: protocol.CodeNotLeader, Message: long, Field: long, Leader: long, RunID: 1 << 63},
		&protocol.TaskStatus{ID: 1 << 63, Namespace: strings.Repeat("n", 128), TaskID: strings.Repeat("i", 256),
			Durability: protocol.Durable, State: task.Cancelled, NextRun: -1 << 63, Version: 1 << 63},
		&protocol.BatchResult{ID: 1 << 63, Results: []protocol.ItemResult{{Namespace: "n", ID: "i", Durability: protocol.Durable,
			State: task.Cancelled, NextRun: -1 << 63, Version: 1 << 63, Code: protocol.CodeInvalidTask, Message: long, Field: long}}},
		&protocol.Acked{ID: 1 << 63, Failed: []protocol.AckFailure{{RunID: 1 << 63, Code: protocol.CodeInternal, Message: long}}},
		&protocol.Fire{Namespace: "n", TaskID: "i", TaskType: "t", Payload: make([]byte, 5000), RunID: 1 << 63,
			Attempt: 1 << 63, Due: -1 << 63, Epoch: 1 << 63, TTR: 1 << 62, Durability: protocol.Durable, Version: 1 << 63,
			Traceparent: strings.Repeat("p", protocol.MaxTraceparentLen), Tracestate: strings.Repeat("s", protocol.MaxTracestateLen),
			Shard: protocol.ShardOf{Index: task.MaxShards - 1, Of: task.MaxShards}},
		&protocol.TaskInfo{ID: 1 << 63, Info: fullInfo(1000)},
		&protocol.TaskPage{ID: 1 << 63, Items: []protocol.Info{fullInfo(0), fullInfo(7000), {Task: wireTask("x", 0), State: task.Pending}},
			Next: strings.Repeat("c", protocol.MaxCursorLen)},
		&protocol.DLQPage{ID: 1 << 63, Items: []protocol.DeadLetter{dl, dl}, Next: "123456789"},
		stats,
	} {
		b, err := protocol.AppendFrame(nil, m, protocol.MaxFrameLimit)
		if err != nil {
			t.Fatalf("%v: %v", m.Type(), err)
		}
		cost := replyCost(m)
		if cost < len(b) {
			t.Errorf("%v: replyCost %d < encoded %d bytes", m.Type(), cost, len(b))
		}
		if slack := cost - len(b); slack > 32<<10 {
			t.Errorf("%v: replyCost %d overcounts %d encoded bytes by %d", m.Type(), cost, len(b), slack)
		}
	}
}

// TestFiresCostBoundsEncoding: a FIRES frame takes no more than costFires plus the
// replyCost of each of its runs as a FIRE, the bound the writer packs frames by
// (fires.go), at the limits of every field and with MaxFiresRuns runs.
func TestFiresCostBoundsEncoding(t *testing.T) {
	run := protocol.Fire{Namespace: strings.Repeat("n", task.MaxNamespaceLen), TaskID: strings.Repeat("i", task.MaxIDLen),
		TaskType: strings.Repeat("t", task.MaxTypeLen), Payload: make([]byte, 300), RunID: 1 << 63, Attempt: 1 << 63,
		Due: -1 << 63, Epoch: 1 << 63, TTR: -1 << 63, Durability: protocol.Durable, Version: 1 << 63,
		Traceparent: strings.Repeat("p", protocol.MaxTraceparentLen), Tracestate: strings.Repeat("s", protocol.MaxTracestateLen),
		Shard: protocol.ShardOf{Index: task.MaxShards - 1, Of: task.MaxShards}}
	for _, n := range []int{2, 15, 16, protocol.MaxFiresRuns} {
		m := &protocol.Fires{Runs: make([]protocol.Fire, n)}
		cost := costFires
		for i := range m.Runs {
			m.Runs[i] = run
			cost += replyCost(&run)
		}
		b, err := protocol.AppendFrame(nil, m, protocol.MaxFrameLimit)
		if err != nil {
			t.Fatal(err)
		}
		if cost < len(b) {
			t.Errorf("FIRES of %d runs: bound %d < encoded %d bytes", n, cost, len(b))
		}
	}
}
