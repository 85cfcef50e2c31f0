package tockd

import "github.com/tock-sched/tock/server/protocol"

// The reply queue of a connection is bounded in bytes (Options.MaxQueuedReplyBytes) by
// what its frames will take once encoded. Encoding a reply twice (once to count, once to
// write) would cost the hot path a second encode of every FIRE and TASK_STATUS, so the
// reader counts replyCost instead: an upper bound of the frame's size computed from the
// lengths of the message's variable parts, O(items) and allocation-free. The writer
// subtracts the same replyCost once the frame is written, so a queued message must not
// be modified after it is queued (none is: every reply is built whole, then queued).
// TestReplyCostBoundsEncoding checks the bound against the encoder for every reply type
// the server sends, at the limits of every field.

// Fixed parts of the bound: the 4-byte length prefix, the envelope ("t", "id": at most
// 13 bytes) and map and array headers (at most 5 bytes each), keys (at most 19 bytes:
// "initial_backoff_ns"), integers (at most 9 bytes) and string headers (at most 5 bytes).
const (
	costFrame    = 4 + 5 + 13 // prefix, map header, envelope
	costString   = 5          // a string's or bin's header
	costKeyValue = 19 + 9     // a key and a fixed-size value (integer, bool, enum name)
	// costTask covers a task's keys and fixed-size values (12 keys, a schedule of 7, a
	// retry policy of 6) plus the headers of its six strings and its payload.
	costTask = 3*5 + (12+7+6)*costKeyValue + 7*costString
	// costAttempt covers an attempt record but its error text.
	costAttempt = 5 + 4*costKeyValue + costString
	// costItem covers the keys around a snapshot's or dead letter's task and attempts.
	costItem = 5 + 10*costKeyValue + 2*costString
	// costSmall is every reply without variable parts (OK, PONG, PURGED, and so on).
	costSmall = costFrame + 4*costKeyValue
	// costPartitionNode covers a PARTITION_MAP node but its two strings: a fixmap header,
	// the keys "name" and "addr", and their headers (a name of <= 128 bytes and an address
	// of <= 256 take at most 3). Kept tight: a map may list 4096 nodes.
	costPartitionNode = 1 + 2*5 + 2*3
	// costPartitionOwner is one owner index, below 4096: at most a uint16's 3 bytes.
	costPartitionOwner = 3
	// costPartitionEpoch is one epoch, an etcd revision: at most a uint64's 9 bytes.
	costPartitionEpoch = 9
)

// replyCost is an upper bound of the bytes m takes as a frame.
func replyCost(m protocol.Message) int {
	switch m := m.(type) {
	case *protocol.TaskPage:
		n := costFrame + 2*costKeyValue + len(m.Next)
		for i := range m.Items {
			n += infoCost(&m.Items[i])
		}
		return n
	case *protocol.DLQPage:
		n := costFrame + 2*costKeyValue + len(m.Next)
		for i := range m.Items {
			n += deadLetterCost(&m.Items[i])
		}
		return n
	case *protocol.TaskInfo:
		return costFrame + costKeyValue + infoCost(&m.Info)
	case *protocol.Fire:
		return costFrame + 11*costKeyValue + 4*costString +
			len(m.Namespace) + len(m.TaskID) + len(m.TaskType) + len(m.Payload) + traceCost(m.Traceparent, m.Tracestate)
	case *protocol.TaskStatus:
		return costFrame + 6*costKeyValue + 2*costString + len(m.Namespace) + len(m.TaskID)
	case *protocol.BatchResult:
		n := costFrame + costKeyValue
		for i := range m.Results {
			r := &m.Results[i]
			n += 5 + 9*costKeyValue + 4*costString + len(r.Namespace) + len(r.ID) + len(r.Message) + len(r.Field)
		}
		return n
	case *protocol.Acked:
		n := costFrame + costKeyValue
		for i := range m.Failed {
			n += 5 + 3*costKeyValue + costString + len(m.Failed[i].Message)
		}
		return n
	case *protocol.Error:
		return costFrame + 5*costKeyValue + 3*costString + len(m.Message) + len(m.Field) + len(m.Leader)
	case *protocol.StatsReply:
		n := costFrame + 2*costKeyValue
		for k := range m.Counters {
			n += costKeyValue + len(k)
		}
		for k := range m.Gauges {
			n += costKeyValue + len(k)
		}
		return n
	case *protocol.Welcome:
		return costFrame + 7*costKeyValue + 3*costString + len(m.Name) + len(m.Node) + len(m.Leader)
	case *protocol.PartitionMap:
		n := costFrame + 5*costKeyValue + costPartitionOwner*len(m.Owners) + costPartitionEpoch*len(m.Epochs)
		for _, nd := range m.Nodes {
			n += costPartitionNode + len(nd.Name) + len(nd.Addr)
		}
		return n
	}
	return costSmall
}

func taskCost(t *protocol.Task) int {
	return costTask + len(t.Namespace) + len(t.ID) + len(t.Type) + len(t.Payload) +
		len(t.Schedule.Cron) + len(t.Schedule.TZ) + len(t.ConcurrencyKey) + traceCost(t.Traceparent, t.Tracestate)
}

// traceCost bounds a task's or FIRE's trace context, "traceparent" and "tracestate":
// nothing when it has none, so that an untraced FIRE's bound (by which FIRES frames are
// packed) is what it was.
func traceCost(parent, state string) int {
	if parent == "" && state == "" {
		return 0
	}
	return 2*costKeyValue + 2*costString + len(parent) + len(state)
}

func attemptsCost(as []protocol.AttemptRecord) int {
	n := 0
	for i := range as {
		n += costAttempt + len(as[i].Err)
	}
	return n
}

func infoCost(in *protocol.Info) int {
	return costItem + taskCost(&in.Task) + len(in.LastError) + attemptsCost(in.History)
}

func deadLetterCost(dl *protocol.DeadLetter) int {
	return costItem + taskCost(&dl.Task) + len(dl.Reason) + attemptsCost(dl.Attempts)
}
