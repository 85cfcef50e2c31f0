// Command loadgen drives a workload of one-shot tasks through tock and accounts for every
// one of them: fired, lost (never run by the last deadline plus -grace), early (run before
// its due time: must be 0), duplicates, and lateness percentiles from an HDR histogram.
//
//	go run ./loadgen -target core -tasks 1000000
//	go run ./loadgen -target server -addr 127.0.0.1:7450 -tasks 100000
//
// Every task carries its index and due time in its payload. The core target submits to an
// in-process task.Engine with a registered handler; the server target submits through
// client.Dial (SUBMIT_BATCH) from -producers connections and runs the tasks on -workers
// client.Workers of -concurrency credits each. A live line goes to stderr every second;
// the summary goes to stdout (JSON with -json). The exit status is 1 when any task was
// lost, early or rejected.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// config is the workload the command line describes.
type config struct {
	target      string
	tasks       int
	rate        float64
	delay       time.Duration
	window      time.Duration
	payload     int
	producers   int
	batch       int
	workers     int
	concurrency int
	addr        string
	durable     bool
	grace       time.Duration
	attempts    int
	backoff     time.Duration
	json        bool
	progress    io.Writer // nil: no live line
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	cfg.progress = os.Stderr
	res, err := run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	if cfg.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	} else {
		res.print(os.Stdout)
	}
	if res.Counts.Failed() {
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var c config
	fs.StringVar(&c.target, "target", "core", "core (in-process engine) or server (a tockd at -addr)")
	fs.IntVar(&c.tasks, "tasks", 100_000, "one-shot tasks to submit")
	fs.Float64Var(&c.rate, "rate", 0, "submits per second over all producers (0: open loop, as fast as possible)")
	fs.DurationVar(&c.delay, "delay", 0, "the first task is due this long after the start")
	fs.DurationVar(&c.window, "window", 0, "due times are spread uniformly over this window after -delay (0: all at once)")
	fs.IntVar(&c.payload, "payload", minPayload, fmt.Sprintf("payload bytes per task (at least %d: index and due time)", minPayload))
	fs.IntVar(&c.producers, "producers", 2, "concurrent producers (server: one connection each)")
	fs.IntVar(&c.batch, "batch", 500, "server: tasks per SUBMIT_BATCH (1: plain SUBMIT)")
	fs.IntVar(&c.workers, "workers", 1, "server: Worker connections")
	fs.IntVar(&c.concurrency, "concurrency", 8192, "server: concurrent runs (credits) per Worker")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:7450", "server: tockd's address")
	fs.BoolVar(&c.durable, "durable", false, "server: submit durable tasks (tockd needs -data-dir or -etcd)")
	fs.DurationVar(&c.grace, "grace", 5*time.Second, "wait this long after the last deadline before counting a task lost")
	fs.IntVar(&c.attempts, "attempts", task.MaxAttemptsLimit, "server: attempts per task (tockd fails an attempt at once when no worker has a free credit)")
	fs.DurationVar(&c.backoff, "backoff", 50*time.Millisecond, "first retry delay (then x1.5, jittered, capped at 20x)")
	fs.BoolVar(&c.json, "json", false, "print the summary as JSON")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch {
	case c.target != "core" && c.target != "server":
		return fmt.Errorf("-target %q: want core or server", c.target)
	case c.tasks < 1:
		return fmt.Errorf("-tasks %d must be positive", c.tasks)
	case c.rate < 0:
		return fmt.Errorf("-rate %v must not be negative", c.rate)
	case c.delay < 0 || c.window < 0 || c.grace < 0:
		return errors.New("-delay, -window and -grace must not be negative")
	case c.payload < minPayload:
		return fmt.Errorf("-payload %d is below %d", c.payload, minPayload)
	case c.producers < 1 || c.workers < 1 || c.concurrency < 1:
		return errors.New("-producers, -workers and -concurrency must be positive")
	case c.batch < 1 || c.batch > maxBatch:
		return fmt.Errorf("-batch %d outside [1, %d]", c.batch, maxBatch)
	case c.attempts < 1 || c.attempts > task.MaxAttemptsLimit:
		return fmt.Errorf("-attempts %d outside [1, %d]", c.attempts, task.MaxAttemptsLimit)
	case c.backoff <= 0:
		return fmt.Errorf("-backoff %v must be positive", c.backoff)
	case c.durable && c.target != "server":
		return errors.New("-durable needs -target server")
	}
	return nil
}

// result is the summary of one run.
type result struct {
	Target     string  `json:"target"`
	Durable    bool    `json:"durable"`
	Submitted  int64   `json:"submitted"`
	SubmitSecs float64 `json:"submit_seconds"`
	SubmitRate float64 `json:"submit_per_second"`
	// RunSecs is from the first submit to the last first run (or the end of the wait).
	RunSecs    float64 `json:"run_seconds"`
	EndToEnd   float64 `json:"end_to_end_per_second"`
	TimedOut   bool    `json:"timed_out"`
	SubmitErr  string  `json:"submit_error,omitempty"`
	Foreign    int64   `json:"foreign"` // runs of another loadgen run's tasks (acked, ignored)
	Counts     Counts  `json:"counts"`
	Throughput []tick  `json:"per_second"`
}

// tick is one second of the run: tasks submitted and runs fired in it.
type tick struct {
	Second    int   `json:"second"`
	Submitted int64 `json:"submitted"`
	Fired     int64 `json:"fired"`
}

func (r *result) print(w io.Writer) {
	c := r.Counts
	d := func(ns int64) time.Duration { return time.Duration(ns).Round(time.Microsecond) }
	mode := ""
	if r.Target == "server" {
		mode = " (ephemeral)"
		if r.Durable {
			mode = " (durable)"
		}
	}
	fmt.Fprintf(w, "loadgen -target %s%s: %d tasks\n", r.Target, mode, c.Tasks)
	fmt.Fprintf(w, "  submitted %d in %.3fs (%.0f/s), rejected %d\n", r.Submitted, r.SubmitSecs, r.SubmitRate, c.Rejected)
	fmt.Fprintf(w, "  fired %d (unique %d) in %.3fs (%.0f/s end to end)\n", c.Fired, c.Unique, r.RunSecs, r.EndToEnd)
	fmt.Fprintf(w, "  lost %d  early %d  duplicates %d  strays %d  foreign %d\n", c.Lost, c.Early, c.Duplicates, c.Strays, r.Foreign)
	fmt.Fprintf(w, "  lateness p50 %v  p90 %v  p99 %v  p99.9 %v  max %v\n",
		d(c.Lateness.P50), d(c.Lateness.P90), d(c.Lateness.P99), d(c.Lateness.P999), d(c.Lateness.Max))
	if r.SubmitErr != "" {
		fmt.Fprintf(w, "  first submit error: %s\n", r.SubmitErr)
	}
	if r.TimedOut {
		fmt.Fprintln(w, "  timed out waiting for runs (last deadline + grace)")
	}
	if c.Failed() {
		fmt.Fprintln(w, "  FAILED: lost, early, rejected or unknown runs")
	} else {
		fmt.Fprintln(w, "  OK")
	}
}
