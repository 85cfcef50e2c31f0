package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

func TestParseDAG(t *testing.T) {
	for s, want := range map[string]int{"": 0, "diamond": 4, "fan:3": 3, "fan:100": 100, "fan:1000": 1000} {
		d, err := parseDAG(s)
		if err != nil || d.size != want {
			t.Errorf("parseDAG(%q) = %d, %v; want %d", s, d.size, err, want)
		}
	}
	for _, s := range []string{"fan:2", "fan:1001", "fan:", "fan:x", "fan:-4", "chain:4", "Diamond", "fan:4 "} {
		if _, err := parseDAG(s); err == nil || !strings.Contains(err.Error(), "want fan:N") {
			t.Errorf("parseDAG(%q): error %v, want one saying what -dag takes", s, err)
		}
	}
}

// TestDAGParents checks the parents of each position of two fan:5 workflows: the
// root none, children the root, the sink every child.
func TestDAGParents(t *testing.T) {
	d := dagSpec{size: 5}
	want := [][2]int{{0, 0}, {0, 1}, {0, 1}, {0, 1}, {1, 4}, {0, 0}, {5, 6}, {5, 6}, {5, 6}, {6, 9}}
	for i, w := range want {
		if lo, hi := d.parents(i); lo != w[0] || hi != w[1] {
			t.Errorf("parents(%d) = [%d, %d), want [%d, %d)", i, lo, hi, w[0], w[1])
		}
	}
	if lo, hi := (dagSpec{}).parents(7); lo != hi {
		t.Errorf("no DAG: parents(7) = [%d, %d), want none", lo, hi)
	}
}

// TestRecorderEarlyChildren feeds the accounting diamonds (fan:4: root 0, children 1
// and 2, sink 3) by hand: in order they pass; a child started before its root ended, a
// sink started between its children's ends, and a child whose parent never ended are
// early children and fail the run.
func TestRecorderEarlyChildren(t *testing.T) {
	d := dagSpec{size: 4}
	// runs of one diamond from base: each task's [start, end], in ms.
	play := func(r *Recorder, base int, runs [4][2]int) {
		for k, se := range runs {
			r.Record(base+k, 0, ms(se[0]))
			if se[1] >= 0 {
				r.Ended(base+k, ms(se[1]))
			}
		}
	}
	inOrder := [4][2]int{{1, 2}, {3, 4}, {3, 5}, {6, 7}}

	r := NewDAGRecorder(8, d)
	play(r, 0, inOrder)
	play(r, 4, inOrder)
	r.Record(0, 0, ms(9)) // the root again, after its children: at-least-once, not early
	r.Ended(0, ms(10))
	if c := r.Summary(); c.EarlyChildren != 0 || c.Failed() {
		t.Fatalf("in order: counts %+v", c)
	}

	for name, tc := range map[string]struct {
		runs [4][2]int
		want int64
	}{
		"child before its root ended":      {[4][2]int{{1, 5}, {3, 4}, {6, 7}, {8, 9}}, 1},
		"sink between its children's ends": {[4][2]int{{1, 2}, {3, 4}, {3, 8}, {6, 9}}, 1},
		"child of a root never ended":      {[4][2]int{{1, -1}, {3, 4}, {3, 5}, {6, 7}}, 2},
		"all at once":                      {[4][2]int{{1, 9}, {1, 9}, {1, 9}, {1, 9}}, 3},
	} {
		r := NewDAGRecorder(8, d)
		play(r, 0, inOrder)
		play(r, 4, tc.runs)
		c := r.Summary()
		if c.EarlyChildren != tc.want || !c.Failed() {
			t.Errorf("%s: early children %d (failed %v), want %d and failed", name, c.EarlyChildren, c.Failed(), tc.want)
		}
		if c.Lost != 0 || c.Early != 0 {
			t.Errorf("%s: counts %+v", name, c)
		}
	}

	// Without a DAG, the same runs have no children.
	r = NewDAGRecorder(4, dagSpec{})
	play(r, 0, [4][2]int{{1, 9}, {1, 9}, {1, 9}, {1, 9}})
	if c := r.Summary(); c.EarlyChildren != 0 || c.Failed() {
		t.Fatalf("no DAG: counts %+v", c)
	}
}

// TestDAGProducerRanges: with -dag, each producer's range holds whole workflows, and
// producerOf finds the producer of each of them.
func TestDAGProducerRanges(t *testing.T) {
	c, err := parseFlags([]string{"-dag", "fan:10", "-tasks", "130", "-producers", "4", "-batch", "20"})
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	for p := range c.producers {
		lo, hi := producerRange(c, p)
		if lo != next || lo%10 != 0 || hi%10 != 0 || hi < lo {
			t.Fatalf("producer %d: [%d, %d) after %d", p, lo, hi, next)
		}
		for i := lo; i < hi; i += 10 {
			if q := producerOf(c, i); q != p {
				t.Fatalf("producerOf(%d) = %d, want %d", i, q, p)
			}
		}
		next = hi
	}
	if next != c.tasks {
		t.Fatalf("ranges end at %d of %d", next, c.tasks)
	}
}

func TestDAGFlags(t *testing.T) {
	c, err := parseFlags([]string{"-dag", "fan:3", "-tasks", "300"})
	if err != nil || c.batch != 498 {
		t.Fatalf("-dag fan:3: batch %d, %v; want the default 500 cut to whole workflows, 498", c.batch, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-dag", "fan:2"}, "want fan:N"},
		{[]string{"-dag", "diamond", "-target", "core,beanstalkd"}, "beanstalkd has no dependencies"},
		{[]string{"-dag", "fan:100", "-tasks", "150"}, "-tasks 150 must be a multiple"},
		{[]string{"-dag", "fan:100", "-batch", "150"}, "-batch 150 must be a multiple"},
		{[]string{"-dag", "diamond", "-target", "server", "-submit-retry", "5s"}, "-submit-retry"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

// TestDAGWorkload runs fan:50 workflows under a concurrency key of limit 8, with runs of
// 1 ms, through the core target and one tockd: every task runs once, no child before
// its parents ended, never more than 8 runs at once, and the summary says so.
func TestDAGWorkload(t *testing.T) {
	srv := tockdtest.Start(t)
	for _, target := range []string{"core", "server"} {
		for _, shape := range []string{"fan:50", "diamond"} {
			_, res, out := runClean(t, tockdtest.Limit, "-target", target, "-addr", srv.Addr, "-tasks", "1000", "-producers", "2",
				"-batch", "100", "-work", "1ms", "-dag", shape, "-concurrency-key", "k", "-concurrency-limit", "8")
			if res.Counts.EarlyChildren != 0 || res.MostAtOnce > 8 {
				t.Errorf("%s %s: early children %d, %d runs at once (limit 8)", target, shape, res.Counts.EarlyChildren, res.MostAtOnce)
			}
			if !strings.Contains(out, "early children 0") || res.Workflows == 0 {
				t.Errorf("%s %s: summary without the early children:\n%s", target, shape, out)
			}
		}
	}
}

// TestDAGWorkloadDurable: a durable run of diamonds through a tockd on an embedded etcd.
func TestDAGWorkloadDurable(t *testing.T) {
	d := tockdtest.Start(t, tockdtest.Etcd())
	tockdtest.Eventually(t, "the durable node leads", func() bool { return d.Stats().IsLeader })
	_, res, _ := runClean(t, tockdtest.Limit, "-target", "server", "-addr", d.Addr, "-durable", "-tasks", "200",
		"-batch", "100", "-dag", "diamond")
	if res.Counts.EarlyChildren != 0 {
		t.Fatalf("early children %d", res.Counts.EarlyChildren)
	}
}

// TestDAGWorkloadPaced: under -rate, a producer's steps (10 ms worth of tasks, here 16)
// are rounded up to whole workflows, so no submit splits one (a split one would name a
// parent not yet submitted, and be refused).
func TestDAGWorkloadPaced(t *testing.T) {
	_, res, _ := runClean(t, 30*time.Second, "-target", "core", "-tasks", "600", "-producers", "3", "-rate", "5000", "-dag", "fan:10")
	if res.Counts.EarlyChildren != 0 || res.Counts.Rejected != 0 {
		t.Fatalf("counts %+v", res.Counts)
	}
}
