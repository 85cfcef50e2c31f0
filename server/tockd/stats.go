package tockd

import "github.com/tock-sched/tock/core/task"

// Stats is a snapshot of the server: the engine's counters, gauges and histograms, and
// the server's own. It is what STATS answers and what the admin port's /metrics
// publishes; taking one costs a pass over the engine's shards (no task is visited).
type Stats struct {
	Engine task.Stats

	Connections int   // connections served now (clients and workers)
	Workers     int64 // connections whose HELLO said role "worker"
	Waiting     int   // due runs waiting for a worker with a credit (or a paused type)
	// PendingDeletes is the records of finished durable tasks not yet deleted from etcd:
	// the ACKs waiting for their answer. It grows when etcd cannot keep up, and each of
	// them runs again if this node dies now.
	PendingDeletes int
	// QueuedReplyBytes is the replies (and FIREs) queued on all connections and not yet
	// written, counted as the upper bound of their frames' size that
	// MaxQueuedReplyBytes bounds per connection.
	QueuedReplyBytes int64

	Fired       uint64 // runs queued to workers (in FIRE frames, or in FIRES)
	FiresFrames uint64 // FIRES frames written to workers: Fired / FiresFrames is the runs a frame, for workers that ask for FIRES
	Acked       uint64 // ACKs accepted
	Nacked      uint64 // NACKs accepted
	Redelivered uint64 // runs failed because their worker disconnected
	ReplyStalls uint64 // times a connection's reader stopped reading: over MaxQueuedReplyBytes
	Carried     uint64 // carried outcomes (CARRY) accepted: runs not run again after a failover
	Adopted     uint64 // runs handed in still running (ADOPT) and taken over: not FIREd again
	// CarryRefused counts the carried outcomes refused, by reason: each is a run that
	// runs again if its task still owes one.
	CarryRefused [NumCarryRefusals]uint64
	// DurableCommits is the etcd writes of durable records made, each shared by the
	// submits that were waiting when it started (commit.go).
	DurableCommits uint64

	IsLeader      bool   // this node dispatches
	Epoch         uint64 // the leader epoch FIREs carry while IsLeader
	LeaderChanges uint64 // times this node gained or lost leadership

	// Partitions is the stored partition map as this node follows it
	// (Server.Partitions): not yet routed by. Node is this node's NodeName in it.
	Partitions PartitionMap
	Node       string

	// ConfigChanges counts, by key, the times a runtime setting's value in effect on this
	// node changed (the settings read at start included); a copy.
	ConfigChanges map[string]uint64
}

// Stats returns a snapshot of the server's counters and gauges.
func (s *Server) Stats() Stats {
	leading, epoch := s.leadership()
	pendingDeletes := 0
	var commits uint64
	if s.replica != nil {
		pendingDeletes = s.replica.dur.pending()
		commits = s.replica.committer.commits.Load()
	}
	var refused [NumCarryRefusals]uint64
	for r := range refused {
		refused[r] = s.router.hold.refused[r].Load()
	}
	return Stats{
		Engine:           s.engine.Stats(),
		Connections:      s.conns.numConns(),
		Workers:          s.conns.workers.Load(),
		Waiting:          s.router.waitingLen(),
		PendingDeletes:   pendingDeletes,
		QueuedReplyBytes: s.conns.queuedReplyBytes(),
		Fired:            s.router.fired.Load(),
		FiresFrames:      s.conns.firesFrames.Load(),
		Acked:            s.runs.acked.Load(),
		Nacked:           s.runs.nacked.Load(),
		Redelivered:      s.router.redelivered.Load(),
		ReplyStalls:      s.conns.replyStalls.Load(),
		Carried:          s.runs.carried.Load(),
		Adopted:          s.runs.adopted.Load(),
		CarryRefused:     refused,
		DurableCommits:   commits,
		IsLeader:         leading,
		Epoch:            epoch,
		LeaderChanges:    s.router.changes.Load(),
		Partitions:       s.Partitions(),
		Node:             s.opts.NodeName,
		ConfigChanges:    s.config.changeCounts(),
	}
}
