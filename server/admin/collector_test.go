package admin

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/tockd"
)

// wantScalars is every counter and gauge with its value in fixedStats.
var wantScalars = map[string]struct {
	kind  dto.MetricType
	value float64
}{
	"tock_tasks_submitted_total":      {dto.MetricType_COUNTER, 1001},
	"tock_tasks_started_total":        {dto.MetricType_COUNTER, 1002},
	"tock_tasks_succeeded_total":      {dto.MetricType_COUNTER, 1003},
	"tock_tasks_failed_total":         {dto.MetricType_COUNTER, 1004},
	"tock_tasks_retried_total":        {dto.MetricType_COUNTER, 1005},
	"tock_tasks_dead_total":           {dto.MetricType_COUNTER, 1006},
	"tock_tasks_cancelled_total":      {dto.MetricType_COUNTER, 1007},
	"tock_tasks_timed_out_total":      {dto.MetricType_COUNTER, 1008},
	"tock_handler_panics_total":       {dto.MetricType_COUNTER, 1009},
	"tock_tasks_misfired_total":       {dto.MetricType_COUNTER, 1010},
	"tock_late_results_total":         {dto.MetricType_COUNTER, 1011},
	"tock_dead_letters_evicted_total": {dto.MetricType_COUNTER, 1012},
	"tock_limit_waits_total":          {dto.MetricType_COUNTER, 1013},
	"tock_waiting_on_limit":           {dto.MetricType_GAUGE, 2006},
	"tock_tasks":                      {dto.MetricType_GAUGE, 2001},
	"tock_queue_depth":                {dto.MetricType_GAUGE, 2002 + 3003}, // engine Queued + server Waiting
	"tock_running":                    {dto.MetricType_GAUGE, 2003},
	"tock_hung_workers":               {dto.MetricType_GAUGE, 2004},
	"tock_dead_letters":               {dto.MetricType_GAUGE, 2005},
	"tock_connections":                {dto.MetricType_GAUGE, 3001},
	"tock_workers_connected":          {dto.MetricType_GAUGE, 3002},
	"tock_durable_pending_deletes":    {dto.MetricType_GAUGE, 3010},
	"tock_queued_reply_bytes":         {dto.MetricType_GAUGE, 3011},
	"tock_reply_stalls_total":         {dto.MetricType_COUNTER, 3012},
	"tock_runs_carried_total":         {dto.MetricType_COUNTER, 3013},
	"tock_runs_adopted_total":         {dto.MetricType_COUNTER, 3016},
	"tock_durable_commits_total":      {dto.MetricType_COUNTER, 3014},
	"tock_runs_fired_total":           {dto.MetricType_COUNTER, 3004},
	"tock_fires_frames_total":         {dto.MetricType_COUNTER, 3015},
	"tock_runs_acked_total":           {dto.MetricType_COUNTER, 3005},
	"tock_runs_nacked_total":          {dto.MetricType_COUNTER, 3006},
	"tock_runs_redelivered_total":     {dto.MetricType_COUNTER, 3007},
	"tock_is_leader":                  {dto.MetricType_GAUGE, 1},
	"tock_leader_epoch":               {dto.MetricType_GAUGE, 3008},
	"tock_leader_changes_total":       {dto.MetricType_COUNTER, 3009},
	"tock_partitions":                 {dto.MetricType_GAUGE, 16},
	"tock_partition_map_revision":     {dto.MetricType_GAUGE, 3015},
	"tock_partitions_without_owner":   {dto.MetricType_GAUGE, 0},
	"tock_partitions_without_holder":  {dto.MetricType_GAUGE, 2},
	"tock_partitions_held":            {dto.MetricType_GAUGE, 6},
}

type wantHist struct {
	bounds []float64 // seconds
	counts []uint64  // cumulative
	count  uint64
	sum    float64 // seconds
}

var wantHists = map[string]wantHist{
	"tock_lateness_seconds":           {[]float64{0.00005, 0.001, 0.25, 1}, []uint64{3, 7, 9, 12}, 13, 2.5},
	"tock_execution_duration_seconds": {[]float64{0.01, 60}, []uint64{4, 5}, 6, 90},
}

// TestScrapeValues scrapes a real server fed fixedStats over loopback and checks every
// tock_* family: name, type, HELP, value; for histograms the bucket upper bounds in
// seconds, the cumulative counts, _sum and _count. It also checks that nothing else
// under tock_ appears and that the Go and process collectors are registered.
func TestScrapeValues(t *testing.T) {
	var snapshots atomic.Int64
	_, base := start(t, Options{Snapshot: func() tockd.Stats { snapshots.Add(1); return fixedStats() }})
	fams := scrape(t, base)
	if n := snapshots.Load(); n != 1 {
		t.Errorf("one scrape took %d snapshots, want 1", n)
	}

	for name, want := range wantScalars {
		f := fams[name]
		if f == nil {
			t.Errorf("%s: missing", name)
			continue
		}
		if f.GetType() != want.kind {
			t.Errorf("%s: type %v, want %v", name, f.GetType(), want.kind)
		}
		if len(f.GetHelp()) < 10 {
			t.Errorf("%s: HELP %q is too short to help", name, f.GetHelp())
		}
		if len(f.Metric) != 1 {
			t.Errorf("%s: %d series, want 1", name, len(f.Metric))
			continue
		}
		m := f.Metric[0]
		got := m.GetGauge().GetValue()
		if want.kind == dto.MetricType_COUNTER {
			got = m.GetCounter().GetValue()
		}
		if got != want.value {
			t.Errorf("%s = %v, want %v", name, got, want.value)
		}
	}
	checkCarryRefused(t, fams["tock_runs_carry_refused_total"])
	checkPartitionsOwned(t, fams["tock_partitions_owned"])
	checkPartitionEpochs(t, fams["tock_partition_epoch"])
	checkConfigChanges(t, fams["tock_config_changes_total"])
	for name, want := range wantHists {
		f := fams[name]
		if f == nil {
			t.Errorf("%s: missing", name)
			continue
		}
		if f.GetType() != dto.MetricType_HISTOGRAM || len(f.Metric) != 1 {
			t.Errorf("%s: type %v with %d series, want one histogram", name, f.GetType(), len(f.Metric))
			continue
		}
		checkHist(t, name, f.Metric[0].GetHistogram(), want)
	}
	for name := range fams {
		_, scalar := wantScalars[name]
		_, hist := wantHists[name]
		if strings.HasPrefix(name, "tock_") && !scalar && !hist && name != "tock_runs_carry_refused_total" &&
			name != "tock_partitions_owned" && name != "tock_partition_epoch" && name != "tock_config_changes_total" {
			t.Errorf("%s: emitted but not checked by this test", name)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("%s: missing (Go and process collectors not registered?)", name)
		}
	}
	// promhttp's own counters live in the private registry too.
	if fams["promhttp_metric_handler_requests_total"] == nil {
		t.Error("promhttp_metric_handler_requests_total: missing")
	}
}

// checkCarryRefused checks runs_carry_refused_total: a counter per reason, labelled
// with its name, valued as in fixedStats (3101 for the first reason, and on).
func checkCarryRefused(t *testing.T, f *dto.MetricFamily) {
	t.Helper()
	if f == nil || f.GetType() != dto.MetricType_COUNTER || len(f.Metric) != int(tockd.NumCarryRefusals) {
		t.Fatalf("tock_runs_carry_refused_total: %v, want a counter with %d series", f, tockd.NumCarryRefusals)
	}
	got := map[string]float64{}
	for _, m := range f.Metric {
		if lp := m.GetLabel(); len(lp) == 1 && lp[0].GetName() == "reason" {
			got[lp[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	for r := range tockd.NumCarryRefusals {
		if want := float64(3101 + int(r)); got[r.String()] != want {
			t.Errorf("tock_runs_carry_refused_total{reason=%q} = %v, want %v", r, got[r.String()], want)
		}
	}
}

// TestPartitionsWithoutOwner: a node that knows of no map reports every partition
// without an owner and without a holder; a map whose owner has left (not live), that
// owner's partitions without an owner (held or not); fixedStats' map, no partition
// without an owner and its 2 unheld without a holder; a lone node without etcd (no
// partition leases), none either way.
func TestPartitionsWithoutOwner(t *testing.T) {
	gone := fixedMap()
	gone.Nodes[1].Live = false
	lone := tockd.PartitionMap{Count: 4, Owners: make([]int, 4), Nodes: []tockd.PartitionNode{{Name: "a", Owned: 4, Live: true}}}
	for _, c := range []struct {
		m                     tockd.PartitionMap
		want, wantWithoutHold float64
	}{
		{tockd.PartitionMap{Count: 16, Rev: 7}, 16, 16},
		{gone, 10, 2},
		{fixedMap(), 0, 2},
		{lone, 0, 0},
	} {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(NewCollector(func() tockd.Stats { return tockd.Stats{Partitions: c.m} }))
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got, gotWithoutHold := -1.0, -1.0
		for _, f := range fams {
			switch f.GetName() {
			case "tock_partitions_without_owner":
				got = f.Metric[0].GetGauge().GetValue()
			case "tock_partitions_without_holder":
				gotWithoutHold = f.Metric[0].GetGauge().GetValue()
			}
		}
		if got != c.want || gotWithoutHold != c.wantWithoutHold {
			t.Errorf("map %+v: tock_partitions_without_owner %v, _without_holder %v; want %v and %v", c.m, got, gotWithoutHold, c.want, c.wantWithoutHold)
		}
	}
}

// checkPartitionsOwned checks partitions_owned: a gauge per node of the map, labelled
// with its name, valued as in fixedStats (node-a 6, node-b 10).
func checkPartitionsOwned(t *testing.T, f *dto.MetricFamily) {
	t.Helper()
	if f == nil || f.GetType() != dto.MetricType_GAUGE || len(f.Metric) != 2 {
		t.Fatalf("tock_partitions_owned: %v, want a gauge with 2 series", f)
	}
	got := map[string]float64{}
	for _, m := range f.Metric {
		if lp := m.GetLabel(); len(lp) == 1 && lp[0].GetName() == "node" {
			got[lp[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if got["node-a"] != 6 || got["node-b"] != 10 {
		t.Errorf("tock_partitions_owned = %v, want node-a 6, node-b 10", got)
	}
}

// checkPartitionEpochs checks partition_epoch: a gauge per partition this node (node-a)
// owns, labelled with its number, valued at its epoch as in fixedStats; none of
// node-b's.
func checkPartitionEpochs(t *testing.T, f *dto.MetricFamily) {
	t.Helper()
	if f == nil || f.GetType() != dto.MetricType_GAUGE || len(f.Metric) != 6 {
		t.Fatalf("tock_partition_epoch: %v, want a gauge with 6 series (node-a's partitions)", f)
	}
	for _, m := range f.Metric {
		lp := m.GetLabel()
		if len(lp) != 1 || lp[0].GetName() != "partition" {
			t.Fatalf("tock_partition_epoch labels %v, want partition", lp)
		}
		p, err := strconv.Atoi(lp[0].GetValue())
		if err != nil || p > 5 || m.GetGauge().GetValue() != float64(4000+p) {
			t.Errorf("tock_partition_epoch{partition=%q} = %v, want one of node-a's 0..5 at 4000+p", lp[0].GetValue(), m.GetGauge().GetValue())
		}
	}
}

// checkConfigChanges checks config_changes_total: a counter per key changed, labelled
// with the key, valued as in fixedStats.
func checkConfigChanges(t *testing.T, f *dto.MetricFamily) {
	t.Helper()
	if f == nil || f.GetType() != dto.MetricType_COUNTER || len(f.Metric) != 2 {
		t.Fatalf("tock_config_changes_total: %v, want a counter with 2 series", f)
	}
	got := map[string]float64{}
	for _, m := range f.Metric {
		if lp := m.GetLabel(); len(lp) == 1 && lp[0].GetName() == "key" {
			got[lp[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if got["max_waiting_runs"] != 3201 || got["rate_limit/email"] != 3202 {
		t.Errorf("tock_config_changes_total = %v, want max_waiting_runs 3201, rate_limit/email 3202", got)
	}
}

func checkHist(t *testing.T, name string, h *dto.Histogram, want wantHist) {
	t.Helper()
	if h.GetSampleCount() != want.count || h.GetSampleSum() != want.sum {
		t.Errorf("%s: _count %d _sum %v, want %d and %v", name, h.GetSampleCount(), h.GetSampleSum(), want.count, want.sum)
	}
	// The +Inf bucket is implied by _count, though the parser may list it.
	var got []*dto.Bucket
	for _, b := range h.Bucket {
		if !math.IsInf(b.GetUpperBound(), +1) {
			got = append(got, b)
		} else if b.GetCumulativeCount() != want.count {
			t.Errorf("%s: +Inf bucket %d, want _count %d", name, b.GetCumulativeCount(), want.count)
		}
	}
	if len(got) != len(want.bounds) {
		t.Fatalf("%s: %d buckets, want %d", name, len(got), len(want.bounds))
	}
	for i, b := range got {
		if b.GetUpperBound() != want.bounds[i] || b.GetCumulativeCount() != want.counts[i] {
			t.Errorf("%s: bucket %d le=%v count %d, want le=%v count %d", name, i,
				b.GetUpperBound(), b.GetCumulativeCount(), want.bounds[i], want.counts[i])
		}
	}
}

// TestEngineHistogramBounds converts a real engine's histograms: its bounds, 50 µs to
// 1 min, must come out as le="5e-05" ... le="60", in order, every count 0.
func TestEngineHistogramBounds(t *testing.T) {
	e, err := task.New(task.WithWorkers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	engineStats := e.Stats()
	snap := func() tockd.Stats { return tockd.Stats{Engine: engineStats} }

	reg := prometheus.NewPedanticRegistry() // also checks Describe against Collect
	reg.MustRegister(NewCollector(snap))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lateness *dto.MetricFamily
	for _, f := range fams {
		if f.GetName() == "tock_lateness_seconds" {
			lateness = f
		}
	}
	if lateness == nil {
		t.Fatal("tock_lateness_seconds: missing")
	}
	bounds := engineStats.Lateness.Bounds
	if len(bounds) == 0 {
		t.Fatal("the engine's Lateness histogram has no bounds")
	}
	want := wantHist{counts: make([]uint64, len(bounds))}
	for _, b := range bounds {
		want.bounds = append(want.bounds, b.Seconds())
	}
	if want.bounds[0] != 5e-05 || want.bounds[len(want.bounds)-1] != 60 {
		t.Errorf("engine bounds %v s, want 5e-05 ... 60 (core/task changed its buckets?)", want.bounds)
	}
	checkHist(t, "tock_lateness_seconds", lateness.Metric[0].GetHistogram(), want)
}

// TestCollectorLint runs client_golang's metric linter (naming, units, _total suffixes,
// HELP) over the Collector's output.
func TestCollectorLint(t *testing.T) {
	problems, err := testutil.CollectAndLint(NewCollector(fixedStats))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	// The fixed metrics, partitions_owned for each of fixedStats' two nodes,
	// partition_epoch for each of node-a's 6 partitions and config_changes_total for
	// each of its two keys.
	if n := testutil.CollectAndCount(NewCollector(fixedStats)); n != len(metrics)+10 {
		t.Errorf("collected %d metrics, want %d", n, len(metrics)+10)
	}
}

// TestCollectorBadInput: a nil snapshot function and a malformed histogram are gathering
// errors, not panics, and the well-formed metrics still come out.
func TestCollectorBadInput(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(nil))
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "no snapshot function") {
		t.Errorf("Gather with a nil snapshot: %v, want an error naming it", err)
	}

	bad := fixedStats()
	bad.Engine.Lateness.Counts = bad.Engine.Lateness.Counts[:1]
	reg = prometheus.NewRegistry()
	reg.MustRegister(NewCollector(func() tockd.Stats { return bad }))
	fams, err := reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "4 bounds and 1 counts") {
		t.Errorf("Gather with a malformed histogram: %v, want an error describing it", err)
	}
	// Every metric is a family of its own, but for runs_carry_refused_total's reasons;
	// partitions_owned, partition_epoch and config_changes_total are three more.
	want := len(metrics) - int(tockd.NumCarryRefusals-1) - 1 + 3
	if len(fams) != want {
		t.Errorf("gathered %d families beside the bad one, want %d", len(fams), want)
	}
}
