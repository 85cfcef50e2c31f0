// Command loadgen drives a workload of one-shot tasks through tock, or through a peer
// (beanstalkd), and accounts for every one of them: fired, lost (never run by the last
// deadline plus -grace, with no run seen for -grace), early (run before its due time: must be 0), duplicates, and
// lateness percentiles from an HDR histogram.
//
//	go run ./loadgen -target core -tasks 1000000
//	go run ./loadgen -target server -addr 127.0.0.1:7450 -tasks 100000
//	go run ./loadgen -target server,beanstalkd -tasks 200000
//
// Every task carries its run tag, index and due time in its payload, whatever the
// target, so one Recorder accounts for them all. The core target submits to an
// in-process task.Engine with a registered handler; the server target submits through
// client.Dial (SUBMIT_BATCH) from -producers connections and runs the tasks on -workers
// client.Workers of -concurrency credits each; the beanstalkd target puts jobs from
// -producers connections (-beanstalkd-pipeline puts in flight on each) and reserves and
// deletes them on -beanstalkd-workers connections. Several comma-separated targets run
// one after another with the same workload, and a ratio line compares each tock target
// with the peer. A live line goes to stderr every second; the summary goes to stdout
// (JSON with -json). With -dag, the tasks are workflows (a root, children, a sink) and a
// child run before a parent ended is counted (early children). The exit status is 1 when
// any task was lost, early or rejected, a child ran early, or a requested profile could
// not be written.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// targets are the -target values; peers are those that are not tock.
var (
	targets = []string{"core", "server", "beanstalkd"}
	peers   = []string{"beanstalkd"}
)

// config is the workload the command line describes.
type config struct {
	targetList  []string // every -target, in order
	target      string   // the one this run drives
	tasks       int
	rate        float64
	delay       time.Duration
	window      time.Duration
	payload     int
	producers   int
	batch       int
	workers     int
	concurrency int
	concKey     string        // -concurrency-key: every task under it ("" none)
	concLimit   int           // -concurrency-limit: the key's limit
	dagFlag     string        // -dag as given ("" none)
	dag         dagSpec       // parsed from dagFlag
	work        time.Duration // -work: each run's time in its handler
	addr        string
	durable     bool
	grace       time.Duration
	attempts    int
	backoff     time.Duration
	json        bool
	progress    io.Writer // nil: no live line

	bsAddr     string        // beanstalkd: a running one; "" starts one
	bsWorkers  int           // beanstalkd: reserve/delete connections
	bsPipeline int           // beanstalkd: puts in flight per producer connection
	bsTTR      time.Duration // beanstalkd: time to run of each job

	cpuProfile        string
	memProfile        string
	serverProfile     string
	serverProfileSecs int
	admin             string

	chaos       string        // -chaos as given ("" off)
	chaosSpec   chaosSpec     // parsed from chaos
	clusterDir  string        // cluster.sh's run dir
	chaosRevive string        // revive command template ("" cluster.sh restart)
	chaosKills  int           // kills at most (0: no limit)
	submitRetry time.Duration // server: resubmit window of a failed submit (0: none)
}

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

// mainErr is main without the exit: it returns the exit status.
func mainErr(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	cfg.progress = stderr
	stopCPU, err := startCPUProfile(cfg.cpuProfile)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	var results []*result
	status := 0
	for _, t := range cfg.targetList {
		c := cfg
		c.target = t
		res, err := run(context.Background(), c)
		if err != nil {
			fmt.Fprintf(stderr, "loadgen: -target %s: %v\n", t, err)
			status = 1
			continue
		}
		if res.failed() {
			status = 1
		}
		results = append(results, res)
	}
	if err := stopCPU(); err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		status = 1
	}
	if err := writeMemProfile(cfg.memProfile); err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		status = 1
	}
	if err := report(stdout, cfg.json, results); err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		status = 1
	}
	return status
}

// report prints the results: one summary per target, then a ratio line per tock target
// and peer pair. JSON is one result object for one target, else {runs, ratios}.
func report(w io.Writer, asJSON bool, results []*result) error {
	ratios := compare(results)
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if len(results) == 1 {
			return enc.Encode(results[0])
		}
		return enc.Encode(struct {
			Runs   []*result `json:"runs"`
			Ratios []ratio   `json:"ratios"`
		}{results, ratios})
	}
	for i, r := range results {
		if i > 0 {
			fmt.Fprintln(w)
		}
		r.print(w)
	}
	if len(ratios) > 0 {
		fmt.Fprintln(w)
	}
	for _, r := range ratios {
		r.print(w)
	}
	return nil
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var c config
	var target string
	fs.StringVar(&target, "target", "core", "comma-separated, run in order: core (in-process engine), server (a tockd at -addr), beanstalkd (the peer)")
	fs.IntVar(&c.tasks, "tasks", 100_000, "one-shot tasks to submit")
	fs.Float64Var(&c.rate, "rate", 0, "submits per second over all producers (0: open loop, as fast as possible)")
	fs.DurationVar(&c.delay, "delay", 0, "the first task is due this long after the start")
	fs.DurationVar(&c.window, "window", 0, "due times are spread uniformly over this window after -delay (0: all at once)")
	fs.IntVar(&c.payload, "payload", minPayload, fmt.Sprintf("payload bytes per task (at least %d: index and due time; at most %d)", minPayload, maxPayload))
	fs.IntVar(&c.producers, "producers", 2, "concurrent producers (server, beanstalkd: one connection each)")
	fs.IntVar(&c.batch, "batch", 500, "tasks per submit call (server: per SUBMIT_BATCH, 1: plain SUBMIT; beanstalkd: puts pipelined together)")
	fs.IntVar(&c.workers, "workers", 1, "server: Worker connections")
	fs.IntVar(&c.concurrency, "concurrency", 8192, "server: concurrent runs (credits) per Worker")
	fs.StringVar(&c.concKey, "concurrency-key", "", "core, server: every task under this concurrency key (the summary gives the most runs its handlers saw at once)")
	fs.IntVar(&c.concLimit, "concurrency-limit", 0, "with -concurrency-key: the key's limit (0: the key's own, 1 for a new key)")
	fs.StringVar(&c.dagFlag, "dag", "", "core, server: submit workflows: fan:N (a root, N-2 children depending on it, a sink depending on every child) or diamond (fan:4); counts children run before a parent ended")
	fs.DurationVar(&c.work, "work", 0, "each run sleeps this long in its handler (0: returns at once)")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:7450", "server: tockd's address")
	fs.BoolVar(&c.durable, "durable", false, "server: durable tasks (tockd needs -data-dir or -etcd); beanstalkd: started with a binlog fsynced on every write")
	fs.DurationVar(&c.grace, "grace", 5*time.Second, "count a task lost once this long has passed since the last deadline and since the last run seen")
	fs.IntVar(&c.attempts, "attempts", task.MaxAttemptsLimit, "server: attempts per task (a run whose worker disconnects or outlives its time to run is retried)")
	fs.DurationVar(&c.backoff, "backoff", 50*time.Millisecond, "first retry delay (then x1.5, jittered, capped at 20x)")
	fs.BoolVar(&c.json, "json", false, "print the summary as JSON")
	fs.StringVar(&c.bsAddr, "beanstalkd-addr", "", "beanstalkd: address of a running beanstalkd (empty: start the beanstalkd on PATH on 127.0.0.1, killed at the end)")
	fs.IntVar(&c.bsWorkers, "beanstalkd-workers", defaultBeanstalkdWorkers, "beanstalkd: reserve/delete connections (one job each at a time)")
	fs.IntVar(&c.bsPipeline, "beanstalkd-pipeline", 64, "beanstalkd: puts in flight on each producer connection")
	fs.DurationVar(&c.bsTTR, "beanstalkd-ttr", time.Minute, "beanstalkd: time to run of each job (whole seconds, at least 1s)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write loadgen's own CPU profile (every target) to this file")
	fs.StringVar(&c.memProfile, "memprofile", "", "write loadgen's heap profile at the end to this file")
	fs.StringVar(&c.serverProfile, "server-profile", "", "server: fetch tockd's CPU profile from -admin during the run into this file")
	fs.IntVar(&c.serverProfileSecs, "server-profile-seconds", 10, fmt.Sprintf("server: seconds of the run the server profile covers, from its start (at most %d)", maxServerProfileSecs))
	fs.StringVar(&c.admin, "admin", "", "server: tockd's admin HTTP address (host:port): its CPU over the run (per task, in the summary), and -server-profile")
	fs.StringVar(&c.chaos, "chaos", "", "server: "+chaosKillLeader+":EVERY SIGKILLs the leading node of the cluster at -addr every EVERY (at least 1s), measures the failover and revives it; needs several -addr and -durable")
	fs.StringVar(&c.clusterDir, "cluster-dir", defaultClusterDir(), "chaos: run dir of the cluster (make cluster): its pids and cmd/ name the nodes' processes")
	fs.StringVar(&c.chaosRevive, "chaos-revive", "", "chaos: sh command that revives a killed node, {name} its name (n1); empty: server/internal/clustertest/cluster.sh restart {name}, found above the working directory")
	fs.IntVar(&c.chaosKills, "chaos-kills", 0, "chaos: kills at most (0: every EVERY until the load ends)")
	fs.DurationVar(&c.submitRetry, "submit-retry", 0, fmt.Sprintf("server: resubmit, for up to this long, tasks whose submit got no definite answer (a lost connection, no leader; with -chaos default %v; 0: count them rejected)", defaultChaosSubmitRetry))
	err := fs.Parse(args)
	if err != nil {
		return c, err
	}
	retrySet, batchSet := false, false
	fs.Visit(func(f *flag.Flag) {
		retrySet = retrySet || f.Name == "submit-retry"
		batchSet = batchSet || f.Name == "batch"
	})
	if c.chaos != "" && !retrySet {
		c.submitRetry = defaultChaosSubmitRetry
	}
	if c.dag, err = parseDAG(c.dagFlag); err != nil {
		return c, err
	}
	if u := c.dag.unit(); !batchSet && c.batch%u != 0 {
		c.batch = max(u, c.batch/u*u) // the default, in whole workflows
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for t := range strings.SplitSeq(target, ",") {
		c.targetList = append(c.targetList, strings.TrimSpace(t))
	}
	c.target = c.targetList[0]
	return c, c.validate()
}

func (c *config) validate() error {
	for i, t := range c.targetList {
		if !slices.Contains(targets, t) {
			return fmt.Errorf("-target %q: want a comma-separated list of %s", t, strings.Join(targets, ", "))
		}
		if slices.Contains(c.targetList[:i], t) {
			return fmt.Errorf("-target %s given twice", t)
		}
	}
	has := func(t string) bool { return slices.Contains(c.targetList, t) }
	switch {
	case c.tasks < 1:
		return fmt.Errorf("-tasks %d must be positive", c.tasks)
	case c.rate < 0:
		return fmt.Errorf("-rate %v must not be negative", c.rate)
	case c.delay < 0 || c.window < 0:
		return errors.New("-delay and -window must not be negative")
	case c.grace <= 0:
		return fmt.Errorf("-grace %v must be positive", c.grace)
	case c.payload < minPayload || c.payload > maxPayload:
		return fmt.Errorf("-payload %d outside [%d, %d]", c.payload, minPayload, maxPayload)
	case c.producers < 1 || c.workers < 1 || c.concurrency < 1:
		return errors.New("-producers, -workers and -concurrency must be positive")
	case c.batch < 1 || c.batch > maxBatch:
		return fmt.Errorf("-batch %d outside [1, %d]", c.batch, maxBatch)
	case c.attempts < 1 || c.attempts > task.MaxAttemptsLimit:
		return fmt.Errorf("-attempts %d outside [1, %d]", c.attempts, task.MaxAttemptsLimit)
	case c.backoff <= 0:
		return fmt.Errorf("-backoff %v must be positive", c.backoff)
	case c.durable && has("core"):
		return errors.New("-durable needs -target server or beanstalkd (core is in memory only)")
	case c.bsWorkers < 1 || c.bsWorkers > maxBeanstalkdConns:
		return fmt.Errorf("-beanstalkd-workers %d outside [1, %d]", c.bsWorkers, maxBeanstalkdConns)
	case c.bsPipeline < 1 || c.bsPipeline > maxBatch:
		return fmt.Errorf("-beanstalkd-pipeline %d outside [1, %d]", c.bsPipeline, maxBatch)
	case c.bsTTR < time.Second || c.bsTTR%time.Second != 0:
		return fmt.Errorf("-beanstalkd-ttr %v must be whole seconds, at least 1s", c.bsTTR)
	case c.durable && c.bsAddr != "" && has("beanstalkd"):
		return errors.New("-durable with -beanstalkd-addr: loadgen cannot make a running beanstalkd durable; leave -beanstalkd-addr empty")
	case c.serverProfile != "" && (c.admin == "" || !has("server")):
		return errors.New("-server-profile needs -admin and -target server")
	case c.serverProfileSecs < 1 || c.serverProfileSecs > maxServerProfileSecs:
		return fmt.Errorf("-server-profile-seconds %d outside [1, %d]", c.serverProfileSecs, maxServerProfileSecs)
	case c.submitRetry < 0:
		return fmt.Errorf("-submit-retry %v must not be negative", c.submitRetry)
	case c.work < 0:
		return fmt.Errorf("-work %v must not be negative", c.work)
	case c.concLimit != 0 && c.concKey == "":
		return errors.New("-concurrency-limit goes with -concurrency-key")
	case c.concLimit < 0 || c.concLimit > task.MaxConcurrencyLimit:
		return fmt.Errorf("-concurrency-limit %d outside [0, %d]", c.concLimit, task.MaxConcurrencyLimit)
	case c.concKey != "" && has("beanstalkd"):
		return errors.New("-concurrency-key needs -target core or server (beanstalkd has no concurrency keys)")
	case c.chaosKills < 0:
		return fmt.Errorf("-chaos-kills %d must not be negative", c.chaosKills)
	}
	if err := c.validateDAG(); err != nil {
		return err
	}
	if c.chaos == "" {
		return nil
	}
	spec, err := parseChaos(c.chaos)
	if err != nil {
		return err
	}
	c.chaosSpec = spec
	switch {
	case len(c.targetList) != 1 || c.targetList[0] != "server":
		return fmt.Errorf("-chaos needs -target server alone (got %q)", strings.Join(c.targetList, ","))
	case !c.durable:
		return errors.New("-chaos needs -durable: ephemeral tasks live in their leader's memory only and die with it by design, so every kill would lose them")
	case len(splitAddrs(c.addr)) < 2:
		return fmt.Errorf("-chaos needs the cluster's nodes in -addr, comma-separated (got %q): with one node, no other can take over", c.addr)
	case c.clusterDir == "":
		return errors.New("-chaos needs -cluster-dir")
	}
	return nil
}

// validateDAG checks -dag against the rest of the workload.
func (c *config) validateDAG() error {
	if !c.dag.on() {
		return nil
	}
	n := c.dag.size
	switch {
	case slices.Contains(c.targetList, "beanstalkd"):
		return fmt.Errorf("-dag %s needs -target core or server (beanstalkd has no dependencies)", c.dagFlag)
	case c.tasks%n != 0:
		return fmt.Errorf("-dag %s: -tasks %d must be a multiple of the workflow's %d tasks", c.dagFlag, c.tasks, n)
	case c.batch%n != 0:
		return fmt.Errorf("-dag %s: -batch %d must be a multiple of the workflow's %d tasks (a submit carries whole workflows)", c.dagFlag, c.batch, n)
	case c.chaos != "" || c.submitRetry > 0:
		return fmt.Errorf("-dag %s with -chaos or -submit-retry: a retry resubmits only the tasks not yet run, a part of a workflow whose parents' records may be gone", c.dagFlag)
	}
	return nil
}

// result is the summary of one run.
type result struct {
	Target     string  `json:"target"`
	DAG        string  `json:"dag,omitempty"`       // -dag's shape (fan:N), if any
	Workflows  int     `json:"workflows,omitempty"` // with -dag: -tasks over the workflow's size
	Durable    bool    `json:"durable"`
	Submitted  int64   `json:"submitted"`
	SubmitSecs float64 `json:"submit_seconds"`
	SubmitRate float64 `json:"submit_per_second"`
	// RunSecs is from the first submit to the last first run (or the end of the wait).
	RunSecs          float64  `json:"run_seconds"`
	EndToEnd         float64  `json:"end_to_end_per_second"`
	TimedOut         bool     `json:"timed_out"`
	SubmitErr        string   `json:"submit_error,omitempty"`
	Foreign          int64    `json:"foreign"` // runs of another loadgen run's tasks (acked, ignored)
	Counts           Counts   `json:"counts"`
	Peaks            peak     `json:"peak_per_second"` // the busiest whole second of each series
	Throughput       []tick   `json:"per_second"`
	Notes            []string `json:"notes,omitempty"`
	ServerProfile    string   `json:"server_profile,omitempty"`
	ServerProfileErr string   `json:"server_profile_error,omitempty"`
	// ServerCPU is the CPU tockd spent over the run, with -admin (nil without, or when a
	// scrape failed: ServerCPUErr says why).
	ServerCPU    *cpuUse      `json:"server_cpu,omitempty"`
	ServerCPUErr string       `json:"server_cpu_error,omitempty"`
	Chaos        *chaosReport `json:"chaos,omitempty"`
	// MostAtOnce is the most runs the target's handlers were in at once (a handler is in
	// a run from its start to its return, when the ACK goes out).
	MostAtOnce int64 `json:"most_runs_at_once"`
	// Unconfirmed is, for a durable server run, the tasks with no confirmed ACK at the end
	// (after waiting a grace for them): each one's end was recorded before the answer was
	// lost, or the cluster still owes it a run (its record is still in etcd).
	Unconfirmed int64 `json:"unconfirmed_at_end,omitempty"`
}

// tick is one second of the run (the last one may be shorter: Seconds says how long):
// tasks submitted, runs fired (the handler began) and runs acked (the handler returned,
// so the ACK went out; beanstalkd: the delete was confirmed) in it.
type tick struct {
	Second    int     `json:"second"`
	Seconds   float64 `json:"seconds"`
	Submitted int64   `json:"submitted"`
	Fired     int64   `json:"fired"`
	Acked     int64   `json:"acked"`
}

// peak is the largest count of each series over the run's whole seconds.
type peak struct {
	Submitted int64 `json:"submitted"`
	Fired     int64 `json:"fired"`
	Acked     int64 `json:"acked"`
}

// peaks returns the peak of each series over the whole seconds; a run shorter than a
// second has none, and its one partial second is scaled to a rate instead.
func peaks(ticks []tick) peak {
	var p peak
	if len(ticks) == 1 && ticks[0].Seconds > 0 && ticks[0].Seconds < 1 {
		t, f := ticks[0], 1/ticks[0].Seconds
		return peak{int64(float64(t.Submitted) * f), int64(float64(t.Fired) * f), int64(float64(t.Acked) * f)}
	}
	for i, t := range ticks {
		if i == len(ticks)-1 && t.Seconds < 0.999 {
			break // the partial last second
		}
		p.Submitted = max(p.Submitted, t.Submitted)
		p.Fired = max(p.Fired, t.Fired)
		p.Acked = max(p.Acked, t.Acked)
	}
	return p
}

// failed reports whether the run breaks loadgen's promise or lost a requested profile.
// A chaos run also fails when its chaos did (no leader, a failed kill or revive).
func (r *result) failed() bool {
	return r.Counts.Failed() || r.ServerProfileErr != "" || (r.Chaos != nil && r.Chaos.Err != "")
}

func (r *result) print(w io.Writer) {
	c := r.Counts
	d := func(ns int64) time.Duration { return time.Duration(ns).Round(time.Microsecond) }
	mode := ""
	if r.Target != "core" {
		mode = " (ephemeral)"
		if r.Durable {
			mode = " (durable)"
		}
	}
	fmt.Fprintf(w, "loadgen -target %s%s: %d tasks\n", r.Target, mode, c.Tasks)
	fmt.Fprintf(w, "  submitted %d in %.3fs (%.0f/s), rejected %d\n", r.Submitted, r.SubmitSecs, r.SubmitRate, c.Rejected)
	if r.Durable && r.Target == "server" {
		fmt.Fprintf(w, "  durable submits/s: %.0f\n", r.SubmitRate)
		fmt.Fprintf(w, "  tasks with no confirmed ACK at the end: %d (recorded done with the answer lost, or still owed a run)\n", r.Unconfirmed)
	}
	fmt.Fprintf(w, "  fired %d (unique %d) in %.3fs (%.0f/s end to end)\n", c.Fired, c.Unique, r.RunSecs, r.EndToEnd)
	fmt.Fprintf(w, "  most runs at once in the handlers: %d\n", r.MostAtOnce)
	fmt.Fprintf(w, "  lost %d  early %d  duplicates %d  strays %d  foreign %d  after grace %d\n",
		c.Lost, c.Early, c.Duplicates, c.Strays, r.Foreign, c.AfterGrace)
	if r.DAG != "" {
		fmt.Fprintf(w, "  workflows %d (-dag %s): early children %d (a child started before a parent's run ended: must be 0)\n",
			r.Workflows, r.DAG, c.EarlyChildren)
	}
	fmt.Fprintf(w, "  lateness p50 %v  p90 %v  p99 %v  p99.9 %v  max %v\n",
		d(c.Lateness.P50), d(c.Lateness.P90), d(c.Lateness.P99), d(c.Lateness.P999), d(c.Lateness.Max))
	var acked int64
	for _, t := range r.Throughput {
		acked += t.Acked
	}
	mean := func(n int64) float64 {
		if r.RunSecs <= 0 {
			return 0
		}
		return float64(n) / r.RunSecs
	}
	fmt.Fprintf(w, "  per second: submit peak %d mean %.0f  fire peak %d mean %.0f  ack peak %d mean %.0f\n",
		r.Peaks.Submitted, mean(r.Submitted), r.Peaks.Fired, mean(c.Fired), r.Peaks.Acked, mean(acked))
	if r.Chaos != nil {
		r.Chaos.print(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if u := r.ServerCPU; u != nil {
		fmt.Fprintf(w, "  server CPU: %.2fs, %.2f µs per task\n", u.Seconds, u.MicrosPerTask)
	}
	if r.ServerCPUErr != "" {
		fmt.Fprintf(w, "  server CPU not measured: %s\n", r.ServerCPUErr)
	}
	if r.ServerProfile != "" {
		fmt.Fprintf(w, "  server CPU profile: %s\n", r.ServerProfile)
	}
	if r.ServerProfileErr != "" {
		fmt.Fprintf(w, "  server CPU profile FAILED: %s\n", r.ServerProfileErr)
	}
	if r.SubmitErr != "" {
		fmt.Fprintf(w, "  first submit error: %s\n", r.SubmitErr)
	}
	if r.TimedOut {
		fmt.Fprintln(w, "  timed out waiting for runs (last deadline + grace, and no run for a grace)")
	}
	if r.failed() {
		fmt.Fprintln(w, "  FAILED: lost, early, rejected or unknown runs, a run after a confirmed ACK, or an early child")
	} else {
		fmt.Fprintln(w, "  OK")
	}
}
