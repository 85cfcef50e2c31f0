package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// runClean runs loadgen with args, bounded by limit, and checks that each of its -tasks
// ran exactly once, none early, nothing failed, and that the summary says so; it returns
// the configuration, the result and the summary.
func runClean(t *testing.T, limit time.Duration, args ...string) (config, *result, string) {
	t.Helper()
	c, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	res, err := run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	n := res.Counts
	if n.Lost != 0 || n.Early != 0 || n.Duplicates != 0 || n.Unique != int64(c.tasks) || res.TimedOut || res.failed() {
		t.Fatalf("result %+v", res)
	}
	var out bytes.Buffer
	res.print(&out)
	if !strings.Contains(out.String(), "lost 0  early 0") {
		t.Fatalf("summary:\n%s", out.String())
	}
	return c, res, out.String()
}

// TestCoreTargetSmall runs the core target in-process on a small workload and checks
// that every task ran once, none early.
func TestCoreTargetSmall(t *testing.T) {
	runClean(t, 30*time.Second, "-target", "core", "-tasks", "2000", "-window", "50ms", "-producers", "2", "-payload", "64")
}

// TestConcurrencyKeyWorkload: with every task under one concurrency key of limit 3 and
// runs of 1 ms, the core target and one tockd run every task once, and the handlers
// never see more than 3 runs at once, and see 3 (the slots are used); the summary says
// how many they saw.
func TestConcurrencyKeyWorkload(t *testing.T) {
	srv := tockdtest.Start(t)
	for _, target := range []string{"core", "server"} {
		_, res, out := runClean(t, 60*time.Second, "-target", target, "-addr", srv.Addr, "-tasks", "1500", "-producers", "2", "-payload", "64",
			"-work", "1ms", "-concurrency-key", "db", "-concurrency-limit", "3")
		if res.MostAtOnce != 3 {
			t.Errorf("%s: %d runs at once under a key of limit 3; want 3", target, res.MostAtOnce)
		}
		if !strings.Contains(out, "most runs at once") {
			t.Errorf("%s: summary without the runs at once:\n%s", target, out)
		}
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	p := make([]byte, minPayload)
	encodePayload(p, 99, 12345, -7)
	if run, i, due, ok := decodePayload(p); !ok || run != 99 || i != 12345 || due != -7 {
		t.Fatalf("decoded %d %d %d %v", run, i, due, ok)
	}
	if _, _, _, ok := decodePayload(p[:16]); ok {
		t.Fatal("a short payload decoded")
	}
}

func TestFlagsValidate(t *testing.T) {
	for _, args := range [][]string{
		{"-target", "nope"},
		{"-tasks", "0"},
		{"-payload", "16"},
		{"-batch", "1001"},
		{"-durable"},
		{"-rate", "-1"},
		{"-grace", "0s"},
		{"-target", "server,beanstalkd,server"},
		{"-target", "core,"},
		{"-target", "core,server", "-durable"},
		{"-payload", "2000000"},
		{"-concurrency-limit", "3"},
		{"-work", "-1s"},
		{"-target", "beanstalkd", "-concurrency-key", "k"},
		{"-concurrency-key", "k", "-concurrency-limit", "-1"},
		{"-beanstalkd-workers", "0"},
		{"-beanstalkd-pipeline", "0"},
		{"-beanstalkd-ttr", "1500ms"},
		{"-target", "beanstalkd", "-durable", "-beanstalkd-addr", "127.0.0.1:11300"},
		{"-target", "server", "-server-profile", "s.pprof"},
		{"-target", "core", "-server-profile", "s.pprof", "-admin", "127.0.0.1:1"},
		{"-target", "server", "-server-profile", "s.pprof", "-admin", "127.0.0.1:1", "-server-profile-seconds", "0"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func TestFlagsTargets(t *testing.T) {
	c, err := parseFlags([]string{"-target", "server, beanstalkd", "-durable"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.targetList) != 2 || c.targetList[0] != "server" || c.targetList[1] != "beanstalkd" || c.target != "server" {
		t.Fatalf("targets %q (%q)", c.targetList, c.target)
	}
}

// TestServerTargetSmall runs the server target against a tockd in the test process,
// ephemeral tasks and then durable ones through an embedded etcd: every task is
// submitted, fired to loadgen's workers and acknowledged.
func TestServerTargetSmall(t *testing.T) {
	s := tockdtest.Start(t)
	runClean(t, tockdtest.Limit, "-target", "server", "-addr", s.Addr, "-tasks", "2000", "-window", "50ms",
		"-producers", "2", "-payload", "64")

	d := tockdtest.Start(t, tockdtest.Etcd())
	tockdtest.Eventually(t, "the durable node leads", func() bool { return d.Stats().IsLeader })
	runClean(t, tockdtest.Limit, "-target", "server", "-addr", d.Addr, "-durable", "-tasks", "200")
}
