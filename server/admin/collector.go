package admin

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/tockd"
)

// Namespace is the prefix of every metric the Collector emits.
const Namespace = "tock"

// metric is one exported metric: its descriptor, its type, and how to read it from a
// snapshot. Histograms read through hist instead of value.
type metric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*tockd.Stats) float64
	hist  func(*tockd.Stats) *task.Histogram
}

func counter(name, help string, value func(*tockd.Stats) float64) metric {
	return metric{desc: prometheus.NewDesc(Namespace+"_"+name, help, nil, nil), kind: prometheus.CounterValue, value: value}
}

// counterWith is counter with constant labels: one metric of a family whose members
// share name and help and differ in the labels' values.
func counterWith(name, help string, labels prometheus.Labels, value func(*tockd.Stats) float64) metric {
	return metric{desc: prometheus.NewDesc(Namespace+"_"+name, help, nil, labels), kind: prometheus.CounterValue, value: value}
}

// carryRefusedMetrics is runs_carry_refused_total, one member per reason.
func carryRefusedMetrics() []metric {
	ms := make([]metric, tockd.NumCarryRefusals)
	for r := range tockd.NumCarryRefusals {
		ms[r] = counterWith("runs_carry_refused_total",
			"Carried outcomes (CARRY) and runs handed in still running (ADOPT) this leader refused, by reason: each such run runs again if its task still owes one.",
			prometheus.Labels{"reason": r.String()}, func(s *tockd.Stats) float64 { return float64(s.CarryRefused[r]) })
	}
	return ms
}

func gauge(name, help string, value func(*tockd.Stats) float64) metric {
	return metric{desc: prometheus.NewDesc(Namespace+"_"+name, help, nil, nil), kind: prometheus.GaugeValue, value: value}
}

func histogram(name, help string, hist func(*tockd.Stats) *task.Histogram) metric {
	return metric{desc: prometheus.NewDesc(Namespace+"_"+name, help, nil, nil), hist: hist}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metrics is every metric, in exposition order. The names are a public interface
// (dashboards and alerts.yml use them): rename one only with the alerts, and the test
// that checks alerts.yml against a scrape will say so.
var metrics = slices.Concat([]metric{
	// Engine counters.
	counter("tasks_submitted_total", "Tasks accepted by the engine.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Submitted) }),
	counter("tasks_started_total", "Attempts started: handed to a handler (for a worker's task type, FIREd at a worker).",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Started) }),
	counter("tasks_succeeded_total", "Attempts that succeeded (handler returned nil, or the worker ACKed).",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Succeeded) }),
	counter("tasks_failed_total", "Attempts that failed: an error or NACK, a panic, a timeout, no handler or no worker. Each may be retried.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Failed) }),
	counter("tasks_retried_total", "Retries scheduled after a failed attempt.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Retried) }),
	counter("tasks_dead_total", "Occurrences given up on after their last failed attempt, each added to the dead-letter queue.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Dead) }),
	counter("tasks_cancelled_total", "Tasks cancelled by a client.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Cancelled) }),
	counter("tasks_timed_out_total", "Attempts that outlived their timeout (a worker's run: not ACKed within its time-to-run).",
		func(s *tockd.Stats) float64 { return float64(s.Engine.TimedOut) }),
	counter("tasks_misfired_total", "Occurrences of recurring tasks skipped or merged by their misfire policy.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Misfired) }),
	counter("handler_panics_total", "Panics recovered from in-process handlers.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Panics) }),
	counter("late_results_total", "Results ignored because their attempt had already timed out or its task been cancelled.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.LateResults) }),
	counter("dead_letters_evicted_total", "Dead letters dropped, oldest first, because the dead-letter queue was full.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.DLQEvicted) }),
	counter("limit_waits_total", "Times a due run was held back by a concurrency key's limit (or an engine rate limit).",
		func(s *tockd.Stats) float64 { return float64(s.Engine.LimitWaits) }),

	// Engine gauges.
	gauge("tasks", "Task records held by the engine (pending, due, running, retained).",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Tasks) }),
	gauge("queue_depth", "Due runs not yet on a worker: waiting for an engine worker plus waiting for a worker connection with a credit.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Queued) + float64(s.Waiting) }),
	gauge("running", "Attempts in progress (in a handler, or FIREd at a worker and not yet ACKed or NACKed).",
		func(s *tockd.Stats) float64 { return float64(s.Engine.Running) }),
	gauge("hung_workers", "Engine workers still in a handler past its attempt's timeout.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.HungWorkers) }),
	gauge("dead_letters", "Entries in the dead-letter queue.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.DeadLetters) }),
	gauge("waiting_on_limit", "Due runs held back by a concurrency key's limit (or an engine rate limit) now.",
		func(s *tockd.Stats) float64 { return float64(s.Engine.WaitingOnLimit) }),

	// Server.
	gauge("connections", "Connections served now, clients and workers.",
		func(s *tockd.Stats) float64 { return float64(s.Connections) }),
	gauge("workers_connected", "Connections whose HELLO said role worker.",
		func(s *tockd.Stats) float64 { return float64(s.Workers) }),
	gauge("durable_pending_deletes", "Records of finished durable tasks not yet deleted from etcd (ACKs awaiting their answer); each would run again if this node died now.",
		func(s *tockd.Stats) float64 { return float64(s.PendingDeletes) }),
	gauge("queued_reply_bytes", "Bytes of replies and FIREs queued on all connections and not yet written (each frame counted at its upper bound); one connection holds at most -max-queued-reply-bytes.",
		func(s *tockd.Stats) float64 { return float64(s.QueuedReplyBytes) }),
	counter("reply_stalls_total", "Times a connection's reader stopped reading requests because its queued replies reached -max-queued-reply-bytes (a client that pipelines without reading).",
		func(s *tockd.Stats) float64 { return float64(s.ReplyStalls) }),
	counter("runs_fired_total", "Runs queued to workers, in FIRE frames or in FIRES.",
		func(s *tockd.Stats) float64 { return float64(s.Fired) }),
	counter("fires_frames_total", "FIRES frames written to workers that asked for them: runs_fired_total over it is the runs a frame.",
		func(s *tockd.Stats) float64 { return float64(s.FiresFrames) }),
	counter("runs_acked_total", "ACKs accepted from workers.",
		func(s *tockd.Stats) float64 { return float64(s.Acked) }),
	counter("runs_nacked_total", "NACKs accepted from workers.",
		func(s *tockd.Stats) float64 { return float64(s.Nacked) }),
	counter("runs_redelivered_total", "Runs failed because their worker disconnected, to be retried on another.",
		func(s *tockd.Stats) float64 { return float64(s.Redelivered) }),
	counter("runs_carried_total", "Outcomes of runs a worker carried (CARRY) from the previous leader and this one accepted: runs not run again after a failover.",
		func(s *tockd.Stats) float64 { return float64(s.Carried) }),
	counter("runs_adopted_total", "Runs a worker handed in still running (ADOPT) after losing its connection, and this leader took over: runs not FIREd again.",
		func(s *tockd.Stats) float64 { return float64(s.Adopted) }),
	counter("durable_commits_total", "etcd writes of durable records, each shared by the submits waiting when it started: submits per commit is the batching.",
		func(s *tockd.Stats) float64 { return float64(s.DurableCommits) }),
}, carryRefusedMetrics(), []metric{

	// Leadership.
	gauge("is_leader", "1 while this node is the leader and dispatches, else 0. Exactly one node of a cluster should report 1.",
		func(s *tockd.Stats) float64 { return b2f(s.IsLeader) }),
	gauge("leader_epoch", "The leader epoch this node's FIREs carry while it leads.",
		func(s *tockd.Stats) float64 { return float64(s.Epoch) }),
	counter("leader_changes_total", "Times this node gained or lost leadership.",
		func(s *tockd.Stats) float64 { return float64(s.LeaderChanges) }),

	// Partitions (stored in etcd, not yet routed by).
	gauge("partitions", "The cluster's partition count P.",
		func(s *tockd.Stats) float64 { return float64(s.Partitions.Count) }),
	gauge("partitions_without_owner", "Partitions with no live owner in the partition map this node follows: all of them before it has read a stored map, an owner's partitions from its leaving until the map is rewritten, else 0.",
		func(s *tockd.Stats) float64 {
			unowned := s.Partitions.Count
			for _, n := range s.Partitions.Nodes {
				if n.Live {
					unowned -= n.Owned
				}
			}
			return float64(unowned)
		}),
	gauge("partitions_without_holder", "Partitions of the map this node follows whose owner does not hold them (its partition lease is not there): for a moment at each handoff, between the old owner's release and the new owner's lease, and from an owner's death until its lease ends and the map is rewritten; 0 without etcd.",
		func(s *tockd.Stats) float64 { return float64(s.Partitions.Unheld()) }),
	gauge("partitions_held", "Partitions this node holds: owned by it in the map, under its own partition lease.",
		func(s *tockd.Stats) float64 { return float64(s.Partitions.HeldBy(s.Node)) }),
	gauge("partition_map_revision", "The etcd revision of the stored partition map this node follows; every node of a settled cluster reports the same.",
		func(s *tockd.Stats) float64 { return float64(s.Partitions.Rev) }),

	// Histograms.
	histogram("lateness_seconds", "Lateness of attempts: the time an attempt started (for a worker's task, was FIREd) minus the time it was due, in seconds.",
		func(s *tockd.Stats) *task.Histogram { return &s.Engine.Lateness }),
	histogram("execution_duration_seconds", "Run time of attempts, in seconds: in a handler, or for a worker's task from its FIRE to its ACK or NACK.",
		func(s *tockd.Stats) *task.Histogram { return &s.Engine.Duration }),
})

// partitionsOwned is partitions_owned, one series per node of the partition map, labelled
// with the node's name: the map is the same on every node, so any node's scrape shows
// the whole cluster's split.
var partitionsOwned = prometheus.NewDesc(Namespace+"_partitions_owned",
	"Partitions each node owns in the partition map this node follows (stored in etcd, not yet routed by), by node.",
	[]string{"node"}, nil)

// partitionEpoch is partition_epoch, one series per partition the map gives this node,
// labelled with its number: the epoch it holds it at (its partition lease's create
// revision), 0 while it does not hold it yet. Without etcd there is none.
var partitionEpoch = prometheus.NewDesc(Namespace+"_partition_epoch",
	"The epoch at which this node holds each partition the map gives it (its partition lease's etcd create revision; 0 while not held yet), by partition.",
	[]string{"partition"}, nil)

// configChanges is config_changes_total, one series per runtime setting (server/
// settings) whose value in effect on this node has changed, labelled with its key.
var configChanges = prometheus.NewDesc(Namespace+"_config_changes_total",
	"Times a runtime setting's value in effect on this node changed (tockctl config set or reset, the settings read at start included), by key.",
	[]string{"key"}, nil)

// Collector is a prometheus.Collector over a snapshot function. Each Collect takes
// exactly one snapshot and turns it into constant metrics, so every value of one scrape
// comes from the same instant and the server's hot path carries no metric code at all:
// the counters it keeps for its own STATS are the metrics. Cost per Collect: one
// snapshot plus O(metrics + histogram buckets) allocations.
type Collector struct {
	snapshot func() tockd.Stats
}

// errNoSnapshot is what a Collector without a snapshot function reports for each of its
// metrics, as a gathering error.
var errNoSnapshot = errors.New("admin: Collector has no snapshot function")

// NewCollector returns a Collector reading snapshot, typically (*tockd.Server).Stats.
// With a nil snapshot it does not panic: every scrape reports a gathering error instead.
func NewCollector(snapshot func() tockd.Stats) *Collector {
	return &Collector{snapshot: snapshot}
}

// Describe sends the descriptor of every metric Collect emits.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for i := range metrics {
		ch <- metrics[i].desc
	}
	ch <- partitionsOwned
	ch <- partitionEpoch
	ch <- configChanges
}

// Collect takes one snapshot and emits every metric from it.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.snapshot == nil {
		for i := range metrics {
			ch <- prometheus.NewInvalidMetric(metrics[i].desc, errNoSnapshot)
		}
		ch <- prometheus.NewInvalidMetric(partitionsOwned, errNoSnapshot)
		ch <- prometheus.NewInvalidMetric(partitionEpoch, errNoSnapshot)
		ch <- prometheus.NewInvalidMetric(configChanges, errNoSnapshot)
		return
	}
	s := c.snapshot()
	for i := range metrics {
		m := &metrics[i]
		if m.hist != nil {
			ch <- constHistogram(m.desc, m.hist(&s))
			continue
		}
		v, err := prometheus.NewConstMetric(m.desc, m.kind, m.value(&s))
		if err != nil { // only for a malformed Desc, which the registry refused already
			v = prometheus.NewInvalidMetric(m.desc, err)
		}
		ch <- v
	}
	for _, n := range s.Partitions.Nodes {
		ch <- prometheus.MustNewConstMetric(partitionsOwned, prometheus.GaugeValue, float64(n.Owned), n.Name)
	}
	if m := s.Partitions; len(m.Epochs) == len(m.Owners) {
		for p, i := range m.Owners {
			if m.Nodes[i].Name == s.Node {
				ch <- prometheus.MustNewConstMetric(partitionEpoch, prometheus.GaugeValue, float64(m.Epochs[p]), strconv.Itoa(p))
			}
		}
	}
	for k, n := range s.ConfigChanges {
		ch <- prometheus.MustNewConstMetric(configChanges, prometheus.CounterValue, float64(n), k)
	}
}

// constHistogram converts a task.Histogram (durations, cumulative counts) into a
// Prometheus histogram in seconds. A malformed one (counts not matching bounds) becomes
// an invalid metric, which the registry reports as a gathering error, rather than a
// panic in the scrape.
func constHistogram(desc *prometheus.Desc, h *task.Histogram) prometheus.Metric {
	if len(h.Counts) != len(h.Bounds) {
		return prometheus.NewInvalidMetric(desc, fmt.Errorf("admin: histogram with %d bounds and %d counts", len(h.Bounds), len(h.Counts)))
	}
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b.Seconds()] = h.Counts[i]
	}
	m, err := prometheus.NewConstHistogram(desc, h.Count, h.Sum.Seconds(), buckets)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}

// NewRegistry returns a private registry holding a Collector over snapshot and the Go
// runtime and process collectors (go_* and process_* metrics). It never touches
// prometheus.DefaultRegisterer.
func NewRegistry(snapshot func() tockd.Stats) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewCollector(snapshot),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}
