package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/tock-sched/tock/bench
BenchmarkMemory/impl=tock/pending=1e6-2         	 10	 100 ns/op	 31.0 B/timer
BenchmarkMemory/impl=tock/pending=1e6-2         	 10	 100 ns/op	 33.0 B/timer
BenchmarkMemory/impl=tock/pending=1e6-2         	 10	 100 ns/op	 90.0 B/timer
BenchmarkMemory/impl=afterfunc/pending=1e6-2    	 4	 300 ns/op	 115.0 B/timer
BenchmarkMemory/impl=afterfunc/pending=1e6-2    	 4	 300 ns/op	 117.0 B/timer
`

func TestLoadAndVerdict(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Memory.txt"), []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := load(filepath.Join(dir, "Memory.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := d.median("pending=1e6", "tock", "B/timer"); m != 33 {
		t.Errorf("tock median = %v, want 33", m)
	}
	if m, _ := d.median("pending=1e6", "afterfunc", "B/timer"); m != 116 {
		t.Errorf("afterfunc median = %v, want 116 (mean of the middle two)", m)
	}
	if m, _ := d.median("pending=1e6", "tock", "ns/op"); m != 100 {
		t.Errorf("ns/op read as %v, want 100 (the unit as written)", m)
	}
	if len(d.gomaxprocs) != 1 || d.gomaxprocs[0] != "2" {
		t.Errorf("gomaxprocs = %v, want [2]", d.gomaxprocs)
	}
	var mem workload
	for _, w := range workloads {
		if w.bench == "Memory" {
			mem = w
		}
	}
	if v := verdict(d, mem.goals[0]); !strings.HasPrefix(v, "**met**") {
		t.Errorf("verdict = %q, want met (median 33 B <= 40 B)", v)
	}
	if v := verdict(d, goal{row: "pending=1e9", check: mem.goals[0].check}); !strings.HasPrefix(v, "not decided") {
		t.Errorf("verdict on a missing row = %q, want not decided", v)
	}
}

func TestCompareRows(t *testing.T) {
	if compareRows("pending=1e5", "pending=1e3") <= 0 || compareRows("rate=1e5", "rate=1.1e6") >= 0 {
		t.Error("rows must order by their numeric value")
	}
}

func TestWriteSkipsMissingResults(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	if err := write(&buf, dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "Not run yet") {
		t.Error("an empty results directory must say the benchmarks have not run")
	}
}

// A recorded system run is rendered with its title, command and whole output.
func TestWriteSystem(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"peer.cmd":      "go run ./loadgen -target server,beanstalkd\n",
		"peer.title":    "tockd vs beanstalkd\n",
		"peer.txt":      "date: 2026-11-30 05:00 UTC\nratio server/beanstalkd: 3.2x\n",
		"peer.notes.md": "Why the ratio falls short: the CPU per task.\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if err := writeSystem(&b, dir); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## System runs", "### tockd vs beanstalkd", "`go run ./loadgen -target server,beanstalkd`", "ratio server/beanstalkd: 3.2x", "```\n\nWhy the ratio falls short"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := writeSystem(&b, filepath.Join(dir, "none")); err != nil || b.Len() != 0 {
		t.Fatalf("no runs: %q, %v", b.String(), err)
	}
}

// The system goals are read from recorded outputs: met, not met, or not decided.
func TestSystemGoals(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"core-1e6.txt":          "  fired 1000000 (unique 1000000) in 0.9s (1100000/s end to end)\n  lost 0  early 0  duplicates 0\n",
		"make-loadgen-peer.txt": "ratio server/beanstalkd: end to end 60000/s / 15000/s = 4.00x (submit 1x); p99 lateness 66ms (server) vs 7s (beanstalkd)\nratio server/beanstalkd: end to end 3333/s / 3128/s = 1.07x (submit 3x); p99 lateness 3.9ms (server) vs 997ms (beanstalkd)\n",
		"make-chaos.txt": "    chaos_test.go:360: seed 7: ops: submit ok 10; faults: kill 1, stall 2, etcd-stop 3, cut 4, reelect 5, etcd changes replayed 9\n" +
			"    chaos_test.go:386: seed 7: 1 violations (recurring-lattice 1); replay the choices with TOCK_CHAOS_SEED=7\n" +
			"5 rounds: 10 acknowledged, 0 lost; first dispatches [1.5s 3.2s]\n" +
			"5 rounds, leader stalled: 12 acknowledged, 0 lost; first dispatches [2.2s 2.4s]\n",
		"cluster-durable.txt": "no figure here\n",
		"loadgen-dag.txt": "  lost 0  early 0  duplicates 0  strays 0\n  workflows 10 (-dag fan:100): early children 0 (...)\n" +
			"  lost 0  early 0  duplicates 0  strays 0\n  workflows 10 (-dag fan:100): early children 3 (...)\n  FAILED: ...\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	writeSystemGoals(&b, dir)
	for _, want := range []string{
		"**met** (1100000 tasks/s)",
		"**not met** (4.00x: 60000/s vs 15000/s)",
		"**met** (p99 3.9ms vs 997ms)",
		"**not met** (slowest first dispatch 3.2s; lost 0: true)",
		"**met** (slowest first dispatch 2.4s; lost 0: true)",
		"**not met** (1 violations: recurring-lattice 1; seed 7; faults: kill 1, stall 2, etcd-stop 3, cut 4, reelect 5)",
		"not decided: the recorded output has no figure for it",
		"**not met** (early children 0, 3)",
		"not run (no recorded run)", // make-loadgen
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("rows lack %q:\n%s", want, b.String())
		}
	}
}

// A history recorded before the reelect fault existed still reads, without it.
func TestHistoryOpsBeforeReelect(t *testing.T) {
	m := historyOps.FindStringSubmatch("seed 7: ops: submit ok 10; faults: kill 1, stall 2, etcd-stop 3, cut 4, etcd changes replayed 9")
	if m == nil || m[5] != "4" || m[6] != "" {
		t.Fatalf("match %q: want cut 4 and no reelect", m)
	}
}
