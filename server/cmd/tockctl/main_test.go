package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

func TestMain(m *testing.M) { tockdtest.Main(m) }

// startServer starts a tockd on a fresh loopback port, with an engine of its own whose
// "fail" tasks always fail, and returns its address.
func startServer(t *testing.T) string {
	t.Helper()
	s := tockdtest.Start(t, tockdtest.Options(tockd.Options{NodeName: "node-a"}))
	if err := s.Engine().Register("fail", func(context.Context, *task.Run) error {
		return errors.New("boom")
	}); err != nil {
		t.Fatal(err)
	}
	return s.Addr
}

type result struct {
	out, err string
	code     int
}

// ctl runs tockctl with args against addr ("" for none).
func ctl(t *testing.T, addr string, args ...string) result {
	t.Helper()
	if addr != "" {
		args = append([]string{"-addr", addr}, args...)
	}
	var out, errb strings.Builder
	code := run(context.Background(), args, &out, &errb)
	return result{out.String(), errb.String(), code}
}

// ok runs tockctl and requires exit 0.
func ok(t *testing.T, addr string, args ...string) string {
	t.Helper()
	r := ctl(t, addr, args...)
	if r.code != 0 {
		t.Fatalf("tockctl %q: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.out, r.err)
	}
	return r.out
}

func contains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q lacks %q", what, got, w)
		}
	}
}

// field returns the value of a "key  value" row of get's output.
func field(t *testing.T, out, key string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, found := strings.CutPrefix(line, key+"  "); found {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatalf("no %q row in\n%s", key, out)
	return ""
}

// waitState runs get until the task is in state want; on failure it logs the last get.
func waitState(t *testing.T, addr, id, want string) {
	t.Helper()
	var out string
	defer func() {
		if t.Failed() {
			t.Logf("the last get of %s:\n%s", id, out)
		}
	}()
	tockdtest.Eventually(t, fmt.Sprintf("task %s %s", id, want), func() bool {
		out = ok(t, addr, "get", id)
		return field(t, out, "state") == want
	})
}

func TestSubmitEachScheduleKindAndGet(t *testing.T) {
	addr := startServer(t)
	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	for _, c := range []struct {
		args     []string
		schedule string
	}{
		{[]string{"-id", "at-1", "-type", "t", "-at", at.Format(time.RFC3339)}, "at " + at.Local().Format(time.RFC3339)},
		{[]string{"-id", "after-1", "-type", "t", "-after", "1h30m", "-payload", "hello"}, "after 1h30m"},
		{[]string{"-id", "every-1", "-type", "t", "-every", "1h", "-fixed-delay", "-attempts", "3", "-backoff", "2s", "-max-backoff", "1m"}, "every 1h (fixed delay)"},
		{[]string{"-id", "cron-1", "-type", "t", "-cron", "0 3 * * *", "-tz", "Europe/Berlin", "-timeout", "5m"}, `cron "0 3 * * *" Europe/Berlin`},
	} {
		id := c.args[1]
		out := ok(t, addr, append([]string{"submit"}, c.args...)...)
		contains(t, "submit "+id, out, "submitted default/"+id, "PENDING", "ephemeral")
		got := ok(t, addr, "get", id)
		if s := field(t, got, "state"); s != "PENDING" {
			t.Errorf("get %s: state %q", id, s)
		}
		if s := field(t, got, "schedule"); s != c.schedule {
			t.Errorf("get %s: schedule %q, want %q", id, s, c.schedule)
		}
	}
	got := ok(t, addr, "get", "after-1")
	contains(t, "get after-1", got, `"hello" (5 bytes)`)
	got = ok(t, addr, "get", "every-1")
	contains(t, "get every-1", got, "3 attempts, backoff 2s x2 up to 1m")
	got = ok(t, addr, "get", "cron-1")
	if s := field(t, got, "timeout"); s != "5m" {
		t.Errorf("get cron-1: timeout %q", s)
	}
	// The -at task is due at exactly the time given.
	if s := field(t, ok(t, addr, "get", "at-1"), "next run"); s != at.Local().Format(time.RFC3339) {
		t.Errorf("at-1 next run %q, want %v", s, at)
	}

	// A payload from a file, in another namespace, with a version that later replaces it.
	file := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(file, []byte("from a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok(t, addr, "-namespace", "ops", "submit", "-id", "f", "-type", "t", "-after", "1h", "-payload-file", file)
	contains(t, "get ops/f", ok(t, addr, "get", "f", "-namespace", "ops"), `"from a file"`, "ops")
	r := ctl(t, addr, "-namespace", "ops", "submit", "-id", "f", "-type", "t", "-after", "1h")
	if r.code != 1 || !strings.Contains(r.err, "EXISTS") {
		t.Errorf("resubmit without a higher version: %+v", r)
	}
	ok(t, addr, "-namespace", "ops", "submit", "-id", "f", "-type", "t2", "-after", "1h", "-version", "2")
	if s := field(t, ok(t, addr, "-namespace", "ops", "get", "f"), "type"); s != "t2" {
		t.Errorf("after the version-2 submit, type %q", s)
	}
}

func TestListPagesWithSmallLimitAndAll(t *testing.T) {
	addr := startServer(t)
	ids := []string{"t1", "t2", "t3", "t4", "t5"}
	for _, id := range ids {
		ok(t, addr, "submit", "-id", id, "-type", "t", "-after", "1h")
	}
	rows := func(out string) []string {
		var got []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "default" {
				got = append(got, f[1])
			}
		}
		return got
	}
	first := ok(t, addr, "list", "-limit", "2")
	if got := rows(first); strings.Join(got, ",") != "t1,t2" {
		t.Fatalf("first page %v:\n%s", got, first)
	}
	contains(t, "first page", first, "NAMESPACE", "STATE", "(more: rerun with -all, or with -cursor ")
	cursor := strings.TrimSuffix(first[strings.LastIndex(first, "-cursor ")+len("-cursor "):], ")\n")
	second := ok(t, addr, "list", "-limit", "2", "-cursor", cursor)
	if got := rows(second); strings.Join(got, ",") != "t3,t4" {
		t.Fatalf("second page %v:\n%s", got, second)
	}
	all := ok(t, addr, "list", "-limit", "2", "-all")
	if got := rows(all); strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("-all gave %v:\n%s", got, all)
	}
	if strings.Contains(all, "(more") {
		t.Errorf("-all says there is more:\n%s", all)
	}

	// -json with -all is one JSON value holding every task, and no cursor.
	var page struct {
		Items []struct {
			ID, State string
		}
		Next string
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "-json", "list", "-limit", "2", "-all")), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 5 || page.Items[4].ID != "t5" || page.Items[0].State != "PENDING" || page.Next != "" {
		t.Errorf("-json -all: %+v", page)
	}
	// One page in JSON carries the cursor that -cursor takes.
	if err := json.Unmarshal([]byte(ok(t, addr, "-json", "list", "-limit", "3")), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 3 || page.Next == "" {
		t.Fatalf("-json one page: %+v", page)
	}
	if got := rows(ok(t, addr, "list", "-cursor", page.Next)); strings.Join(got, ",") != "t4,t5" {
		t.Errorf("after the JSON cursor: %v", got)
	}

	// -state filters; an empty listing says so.
	ok(t, addr, "cancel", "t3")
	if got := rows(ok(t, addr, "list", "-state", "cancelled")); strings.Join(got, ",") != "t3" {
		t.Errorf("-state cancelled: %v", got)
	}
	contains(t, "-state dead", ok(t, addr, "list", "-state", "DEAD"), "(none)")
}

func TestCancel(t *testing.T) {
	addr := startServer(t)
	ok(t, addr, "submit", "-id", "c1", "-type", "t", "-after", "1h")
	contains(t, "cancel", ok(t, addr, "cancel", "c1"), "cancelled default/c1", "CANCELLED")
	if s := field(t, ok(t, addr, "get", "c1"), "state"); s != "CANCELLED" {
		t.Errorf("after cancel, state %q", s)
	}

	r := ctl(t, addr, "cancel", "nope")
	if r.code != 1 {
		t.Fatalf("cancel of an unknown ID: exit %d, want 1 (%+v)", r.code, r)
	}
	contains(t, "cancel unknown: stderr", r.err, "tockctl: NOT_FOUND", "nope")
	if r.out != "" {
		t.Errorf("cancel unknown wrote to stdout: %q", r.out)
	}
	r = ctl(t, addr, "get", "nope")
	if r.code != 1 || !strings.Contains(r.err, "NOT_FOUND") {
		t.Errorf("get unknown: %+v", r)
	}
}

func TestDeadLetters(t *testing.T) {
	addr := startServer(t)
	// "fail" tasks fail (startServer's handler); with one attempt each dies at once.
	ok(t, addr, "submit", "-id", "d1", "-type", "fail", "-after", "0s", "-attempts", "1")
	ok(t, addr, "submit", "-id", "d2", "-type", "fail", "-after", "0s")
	waitState(t, addr, "d1", "DEAD")
	waitState(t, addr, "d2", "DEAD")
	got := ok(t, addr, "get", "d1")
	contains(t, "get dead", got, "boom", "history:", "ATTEMPT")

	list := ok(t, addr, "dlq", "list")
	contains(t, "dlq list", list, "NAMESPACE", "DIED AT", "REASON", "d1", "d2")
	var page struct {
		Items []struct {
			Task           struct{ ID, Type string }
			Reason, DiedAt string
		}
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "dlq", "list", "-json", "-limit", "1", "-all")), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 || page.Items[0].Task.Type != "fail" {
		t.Errorf("dlq list -json -all: %+v", page)
	}

	contains(t, "requeue", ok(t, addr, "dlq", "requeue", "d1"), "requeued default/d1")
	// Requeued, it runs again now and fails again: back in the queue.
	waitState(t, addr, "d1", "DEAD")

	contains(t, "purge one", ok(t, addr, "dlq", "purge", "d2"), "purged 1 dead letter\n")
	r := ctl(t, addr, "dlq", "purge", "d2")
	if r.code != 1 || !strings.Contains(r.err, "no dead letter default/d2") {
		t.Errorf("purge of a purged dead letter: %+v", r)
	}
	contains(t, "purge all", ok(t, addr, "-json", "dlq", "purge", "-all"), `"purged": 1`)
	contains(t, "dlq list after purge", ok(t, addr, "dlq", "list"), "(none)")
	r = ctl(t, addr, "dlq", "requeue", "d1")
	if r.code != 1 || !strings.Contains(r.err, "NOT_FOUND") {
		t.Errorf("requeue of a purged dead letter: %+v", r)
	}
}

func TestStatsLeaderPing(t *testing.T) {
	addr := startServer(t)
	ok(t, addr, "submit", "-id", "s1", "-type", "t", "-after", "1h")
	out := ok(t, addr, "stats")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "KIND") {
		t.Errorf("stats header %q", lines[0])
	}
	// Sorted within each kind, and aligned: every value starts in the same column.
	var prev [2]string
	col := strings.Index(lines[0], "VALUE")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("stats row %q", l)
		}
		k := 0
		if f[0] == "gauge" {
			k = 1
		}
		if f[1] < prev[k] {
			t.Errorf("stats not sorted: %q after %q", f[1], prev[k])
		}
		prev[k] = f[1]
		if strings.LastIndex(l, f[2]) != col {
			t.Errorf("stats row %q: value not in column %d", l, col)
		}
	}
	contains(t, "stats", out, "counter  submitted", "gauge    is_leader", "gauge    tasks")
	var st struct {
		Counters map[string]uint64
		Gauges   map[string]int64
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "stats", "-json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Counters["submitted"] != 1 || st.Gauges["tasks"] != 1 || st.Gauges["is_leader"] != 1 {
		t.Errorf("stats -json: %+v", st)
	}

	leader := ok(t, addr, "leader")
	if field(t, leader, "node") != "node-a" || field(t, leader, "is_leader") != "true" || field(t, leader, "epoch") != "0" {
		t.Errorf("leader:\n%s", leader)
	}
	var l struct {
		Node     string
		IsLeader bool `json:"is_leader"`
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "-json", "leader")), &l); err != nil || l.Node != "node-a" || !l.IsLeader {
		t.Errorf("leader -json: %+v %v", l, err)
	}

	contains(t, "ping", ok(t, addr, "ping"), "pong from "+addr, "node node-a", "time=")
	var p struct {
		RTT int64 `json:"rtt_ns"`
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "ping", "-json")), &p); err != nil || p.RTT <= 0 {
		t.Errorf("ping -json: %+v %v", p, err)
	}
}

func TestJSONOutputParses(t *testing.T) {
	addr := startServer(t)
	var st struct {
		Namespace, ID, State, Durability string
		NextRun                          time.Time `json:"next_run"`
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "-json", "submit", "-id", "j1", "-type", "t", "-after", "1h", "-payload", "x")), &st); err != nil {
		t.Fatal(err)
	}
	if st.ID != "j1" || st.Namespace != "default" || st.State != "PENDING" || st.Durability != "ephemeral" || st.NextRun.IsZero() {
		t.Errorf("submit -json: %+v", st)
	}
	var in struct {
		ID       string
		Payload  []byte
		Schedule struct{ Kind, Delay string }
		State    string
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "get", "j1", "-json")), &in); err != nil {
		t.Fatal(err)
	}
	if in.ID != "j1" || string(in.Payload) != "x" || in.Schedule.Kind != "after" || in.Schedule.Delay != "1h" || in.State != "PENDING" {
		t.Errorf("get -json: %+v", in)
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "-json", "cancel", "j1")), &st); err != nil || st.State != "CANCELLED" {
		t.Errorf("cancel -json: %+v %v", st, err)
	}
	var empty struct{ Items []any }
	if err := json.Unmarshal([]byte(ok(t, addr, "-json", "dlq", "list")), &empty); err != nil || len(empty.Items) != 0 {
		t.Errorf("empty dlq list -json: %+v %v", empty, err)
	}
}

// TestUsageErrors: a wrong command line exits 2 with a message naming the problem and
// the command's usage, before dialling (the address is one nothing listens on).
func TestUsageErrors(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"no command given", "Usage: tockctl"}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`, "Commands:"}},
		{[]string{"-bogus", "ping"}, []string{"-bogus", "Global flags:"}},
		{[]string{"submit", "-type", "t", "-after", "1s"}, []string{"-id is required", "Usage: tockctl submit"}},
		{[]string{"submit", "-id", "x", "-after", "1s"}, []string{"-type is required"}},
		{[]string{"submit", "-id", "x", "-type", "t"}, []string{"a schedule is required"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-after", "1s", "-every", "1m"}, []string{"one schedule only: -after and -every"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-at", "2030-01-01T00:00:00Z", "-cron", "@daily"}, []string{"one schedule only: -at and -cron"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-after", "soon"}, []string{`invalid value "soon" for flag -after`, "not a duration"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-every", "1us"}, []string{"-every:", "MinInterval"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-at", "tomorrow"}, []string{"-at", "RFC3339"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-cron", "not cron"}, []string{"-cron:"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-cron", "@daily", "-tz", "Mars/Olympus"}, []string{"-tz"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-after", "1s", "-tz", "UTC"}, []string{"-tz goes with -cron"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-after", "1s", "-fixed-delay"}, []string{"-fixed-delay goes with -every"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-every", "1m", "-misfire", "fire-once"}, []string{"-misfire:", `"fire-once" is not a MisfirePolicy (want once, skip)`}},
		{[]string{"submit", "-id", "x", "-type", "t", "-after", "1s", "-backoff", "1s"}, []string{"-backoff and -max-backoff need -attempts"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-after", "1s", "-attempts", "5000"}, []string{"-attempts:"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-after", "1s", "-payload", "a", "-payload-file", "f"}, []string{"exclusive"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-after", "1s", "-timeout", "48h"}, []string{"-timeout:"}},
		{[]string{"submit", "-id", "x", "-type", "t", "-after", "1s", "extra"}, []string{"unexpected arguments"}},
		{[]string{"cancel"}, []string{"missing the task ID", "Usage: tockctl cancel [flags] ID"}},
		{[]string{"get", "a", "b"}, []string{"one task ID expected"}},
		{[]string{"list", "-limit", "-1"}, []string{"-limit -1 outside"}},
		{[]string{"list", "-state", "SLEEPING"}, []string{`-state "SLEEPING"`}},
		{[]string{"list", "-cursor", "!!"}, []string{"not a cursor printed by tockctl"}},
		{[]string{"dlq"}, []string{"no subcommand given", "Subcommands:"}},
		{[]string{"dlq", "drop"}, []string{`unknown subcommand "drop"`}},
		{[]string{"dlq", "purge"}, []string{"missing the task ID (or -all)"}},
		{[]string{"dlq", "purge", "x", "-all"}, []string{"not both"}},
		{[]string{"ping", "-timeout", "0s"}, []string{"-timeout 0s must be positive"}},
		{[]string{"stats", "extra"}, []string{"unexpected arguments"}},
		{[]string{"help", "frobnicate"}, []string{`unknown command "frobnicate"`}},
	} {
		r := ctl(t, nowhere, c.args...)
		if r.code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", c.args, r.code, r.err)
			continue
		}
		contains(t, strings.Join(c.args, " "), r.err, c.want...)
		if r.out != "" {
			t.Errorf("%q wrote to stdout: %q", c.args, r.out)
		}
	}
}

func TestHelp(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"Usage: tockctl", "dlq purge ID | -all", "-addr", "Exit status"}},
		{[]string{"-h"}, []string{"Usage: tockctl"}},
		{[]string{"help", "submit"}, []string{"Usage: tockctl submit", "-cron", "-fixed-delay"}},
		{[]string{"submit", "-h"}, []string{"Usage: tockctl submit", "-payload-file"}},
		{[]string{"list", "-help"}, []string{"Usage: tockctl list", "-all", "-state"}},
		{[]string{"dlq", "-h"}, []string{"Subcommands:", "requeue"}},
		{[]string{"dlq", "purge", "-h"}, []string{"Usage: tockctl dlq purge [flags] ID | -all"}},
		{[]string{"help", "dlq", "list"}, []string{"Usage: tockctl dlq list", "-limit"}},
	} {
		r := ctl(t, nowhere, c.args...)
		if r.code != 0 || r.err != "" {
			t.Errorf("%q: exit %d, stderr %q", c.args, r.code, r.err)
			continue
		}
		contains(t, strings.Join(c.args, " "), r.out, c.want...)
	}
	// The help shows defaults, never a parsed value or the token from the environment.
	t.Setenv(envToken, "s3cret")
	r := ctl(t, nowhere, "submit", "-after", "7s", "-h")
	if strings.Contains(r.out, "7s") || strings.Contains(r.out, "s3cret") {
		t.Errorf("submit -h shows a parsed value or the token:\n%s", r.out)
	}
	if r = ctl(t, nowhere, "help"); strings.Contains(r.out, "s3cret") {
		t.Errorf("help shows the token:\n%s", r.out)
	}
}

func TestUnreachableAndEnvironment(t *testing.T) {
	// A port nothing listens on: a dial error, exit 1.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	r := ctl(t, dead, "ping")
	if r.code != 1 || !strings.HasPrefix(r.err, "tockctl: ") {
		t.Errorf("ping of a closed port: %+v", r)
	}

	addr := startServer(t)
	t.Setenv(envAddr, addr)
	contains(t, "ping via "+envAddr, ok(t, "", "ping"), "pong from "+addr)
}

func TestToken(t *testing.T) {
	addr := tockdtest.Start(t, tockdtest.Options(tockd.Options{Token: "s3cret"})).Addr
	r := ctl(t, addr, "ping")
	if r.code != 1 || !strings.Contains(r.err, "UNAUTHORIZED") {
		t.Errorf("no token: %+v", r)
	}
	ok(t, addr, "-token", "s3cret", "ping")

	// From a file, so that the token is on no command line; one trailing newline is
	// not part of it.
	dir := t.TempDir()
	file := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokFile := file("tok", "s3cret\n")
	ok(t, addr, "-token-file", tokFile, "ping")
	ok(t, addr, "ping", "-token-file", tokFile)
	for _, bad := range [][]string{
		{"-token", "s3cret", "-token-file", tokFile, "ping"},
		{"-token-file", file("empty", "\n"), "ping"},
		{"-token-file", filepath.Join(dir, "absent"), "ping"},
	} {
		if r := ctl(t, addr, bad...); r.code != exitUsage || !strings.Contains(r.err, "-token") {
			t.Errorf("%q: exit %d, stderr %q; want %d naming -token", bad, r.code, r.err, exitUsage)
		}
	}
	t.Setenv(envTokenFile, tokFile)
	ok(t, addr, "ping")
	t.Setenv(envTokenFile, "")

	t.Setenv(envToken, "s3cret")
	ok(t, addr, "ping")
	// Both in the environment: as both on the command line, an error.
	t.Setenv(envTokenFile, tokFile)
	if r := ctl(t, addr, "ping"); r.code != exitUsage {
		t.Errorf("%s and %s both set: exit %d, stderr %q", envToken, envTokenFile, r.code, r.err)
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 250 * time.Millisecond: "250ms", time.Second: "1s", 90 * time.Second: "1m30s",
		2 * time.Minute: "2m", time.Hour: "1h", 90 * time.Minute: "1h30m", time.Hour + time.Second: "1h0m1s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// pause and resume reach the server (its effect on dispatch is tested in server/tockd).
func TestPauseResume(t *testing.T) {
	addr := startServer(t)
	contains(t, "pause", ok(t, addr, "pause", "email"), "paused email")
	contains(t, "resume", ok(t, addr, "resume", "email"), "resumed email")
	var got map[string]string
	if err := json.Unmarshal([]byte(ok(t, addr, "-json", "pause", "email")), &got); err != nil || got["state"] != "paused" {
		t.Fatalf("pause -json: %v %v", got, err)
	}
	for _, args := range [][]string{{"pause"}, {"resume", "a", "b"}, {"pause", ""}} {
		if r := ctl(t, addr, args...); r.code != 2 {
			t.Errorf("tockctl %q: exit %d, want 2 (usage)", args, r.code)
		}
	}
}

// -omit-payload leaves payloads out of get, list and dlq list, which show their lengths.
func TestOmitPayload(t *testing.T) {
	addr := startServer(t)
	big := strings.Repeat("x", 3000)
	ok(t, addr, "submit", "-id", "p1", "-type", "t", "-after", "1h", "-payload", big)
	ok(t, addr, "submit", "-id", "p2", "-type", "fail", "-after", "0s", "-payload", big)
	waitState(t, addr, "p2", "DEAD")
	if got := field(t, ok(t, addr, "get", "-omit-payload", "p1"), "payload"); got != "(3000 bytes, left out)" {
		t.Errorf("get -omit-payload: payload row %q", got)
	}
	if got := field(t, ok(t, addr, "get", "p1"), "payload"); !strings.Contains(got, "(3000 bytes)") || !strings.HasPrefix(got, `"xxx`) {
		t.Errorf("get: payload row %q", got)
	}
	var page struct {
		Items []struct {
			ID         string
			Payload    []byte
			PayloadLen uint64 `json:"payload_len"`
			Task       struct{ Payload []byte }
		}
	}
	for _, args := range [][]string{{"list"}, {"dlq", "list"}} {
		out := ok(t, addr, append([]string{"-json"}, append(args, "-omit-payload")...)...)
		if err := json.Unmarshal([]byte(out), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Items) == 0 {
			t.Fatalf("%v -omit-payload: no items:\n%s", args, out)
		}
		for _, it := range page.Items {
			if it.PayloadLen != 3000 || it.Payload != nil || it.Task.Payload != nil {
				t.Errorf("%v -omit-payload: %s payload_len %d, payload %d bytes", args, it.ID, it.PayloadLen, len(it.Payload)+len(it.Task.Payload))
			}
		}
	}
}

// A task submitted with a concurrency key shows it in get, as text and JSON; a limit
// without a key is a usage error naming the flag.
func TestSubmitWithConcurrencyKey(t *testing.T) {
	addr := startServer(t)
	ok(t, addr, "submit", "-id", "c1", "-type", "t", "-after", "1h", "-concurrency-key", "db", "-concurrency-limit", "2")
	if s := field(t, ok(t, addr, "get", "c1"), "concurrency"); s != "key db, limit 2" {
		t.Errorf("get c1: concurrency %q, want %q", s, "key db, limit 2")
	}
	var in struct {
		Key   string `json:"concurrency_key"`
		Limit uint64 `json:"concurrency_limit"`
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "get", "c1", "-json")), &in); err != nil || in.Key != "db" || in.Limit != 2 {
		t.Errorf("get c1 -json: %+v, %v", in, err)
	}
	r := ctl(t, addr, "submit", "-id", "c2", "-type", "t", "-after", "1h", "-concurrency-limit", "2")
	if r.code != 2 {
		t.Fatalf("-concurrency-limit without a key: exit %d, want 2 (stderr %q)", r.code, r.err)
	}
	contains(t, "-concurrency-limit without a key", r.err, "-concurrency-limit")
}

// A task submitted with -shards or -broadcast shows it in get, as text and JSON; a shard
// count out of range is refused naming the flag.
func TestSubmitShardsAndBroadcast(t *testing.T) {
	addr := startServer(t)
	ok(t, addr, "submit", "-id", "s", "-type", "t", "-after", "1h", "-shards", "8")
	if s := field(t, ok(t, addr, "get", "s"), "shards"); s != "8" {
		t.Errorf("get s: shards %q, want 8", s)
	}
	ok(t, addr, "submit", "-id", "b", "-type", "t", "-after", "1h", "-broadcast")
	if s := field(t, ok(t, addr, "get", "b"), "shards"); !strings.HasPrefix(s, "broadcast") {
		t.Errorf("get b: shards %q, want broadcast", s)
	}
	var in struct {
		Shards    uint16 `json:"shards"`
		Broadcast bool   `json:"broadcast"`
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "get", "b", "-json")), &in); err != nil || !in.Broadcast || in.Shards != 0 {
		t.Errorf("get b -json: %+v, %v", in, err)
	}
	for _, args := range [][]string{{"-shards", "1"}, {"-shards", "2000"}, {"-shards", "2", "-broadcast"}} {
		r := ctl(t, addr, append([]string{"submit", "-id", "x", "-type", "t", "-after", "1h"}, args...)...)
		if r.code != 2 {
			t.Fatalf("submit %v: exit %d, want 2 (stderr %q)", args, r.code, r.err)
		}
		want := "-shards"
		if len(args) == 3 {
			want = "-broadcast"
		}
		contains(t, fmt.Sprint(args), r.err, want)
	}
}

// A diamond submitted with -depends-on: get shows the parents, dag prints the whole
// workflow from any of its tasks (text, DOT and JSON), in order, each with its state;
// cancelling the root cancels the rest (the default policy), and dag shows it.
func TestSubmitDependsOnAndDag(t *testing.T) {
	addr := startServer(t)
	ok(t, addr, "submit", "-id", "a", "-type", "t", "-after", "1h")
	ok(t, addr, "submit", "-id", "b", "-type", "t", "-after", "0s", "-depends-on", "a")
	ok(t, addr, "submit", "-id", "c", "-type", "t", "-after", "0s", "-depends-on", "a", "-on-parent-failure", "run")
	ok(t, addr, "submit", "-id", "d", "-type", "t", "-after", "0s", "-depends-on", "c,b")
	ok(t, addr, "submit", "-id", "z", "-type", "t", "-after", "1h") // no part of it
	get := ok(t, addr, "get", "d")
	if s := field(t, get, "depends on"); s != "c,b" {
		t.Errorf("get d: depends on %q, want c,b", s)
	}
	if s := field(t, get, "state"); s != "WAITING" {
		t.Errorf("get d: state %q, want WAITING", s)
	}
	want := `TASK  STATE    PARENTS  CHILDREN
a     PENDING  -        b,c
b     WAITING  a        d
c     WAITING  a        d
d     WAITING  b,c      -
`
	for _, from := range []string{"a", "c", "d"} {
		if got := ok(t, addr, "dag", from); got != want {
			t.Errorf("dag %s:\n%s\nwant\n%s", from, got, want)
		}
	}
	ok(t, addr, "cancel", "a")
	waitState(t, addr, "d", "CANCELLED") // b cancelled (cancel), c released (run): d by b
	waitState(t, addr, "c", "RUNNING")   // released, and held for a worker (none comes) for its 30s timeout
	wantDOT := `digraph "default" {
  "a" [label="a\nCANCELLED"];
  "b" [label="b\nCANCELLED"];
  "c" [label="c\nRUNNING"];
  "d" [label="d\nCANCELLED"];
  "a" -> "b";
  "a" -> "c";
  "b" -> "d";
  "c" -> "d";
}
`
	if got := ok(t, addr, "dag", "-dot", "b"); got != wantDOT {
		t.Errorf("dag -dot b:\n%s\nwant\n%s", got, wantDOT)
	}
	var nodes []dagNode
	if err := json.Unmarshal([]byte(ok(t, addr, "-json", "dag", "z")), &nodes); err != nil || len(nodes) != 1 || nodes[0].ID != "z" || nodes[0].State != "PENDING" {
		t.Errorf("dag -json z: %+v, %v; want z alone, PENDING", nodes, err)
	}
	r := ctl(t, addr, "submit", "-id", "e", "-type", "t", "-after", "0s", "-on-parent-failure", "run")
	if r.code != 2 {
		t.Fatalf("-on-parent-failure without -depends-on: exit %d, want 2", r.code)
	}
	contains(t, "-on-parent-failure alone", r.err, "-on-parent-failure")
	r = ctl(t, addr, "submit", "-id", "e", "-type", "t", "-after", "0s", "-depends-on", "a,a")
	if r.code != 2 {
		t.Fatalf("-depends-on a,a: exit %d, want 2", r.code)
	}
	contains(t, "-depends-on a,a", r.err, "-depends-on[1]", "named twice")
	r = ctl(t, addr, "submit", "-id", "e", "-type", "t", "-after", "0s", "-depends-on", "nope")
	if r.code != 1 {
		t.Fatalf("-depends-on nope: exit %d, want 1", r.code)
	}
	contains(t, "-depends-on nope", r.err, "INVALID_TASK", "does not exist")
	if r = ctl(t, addr, "dag", "nope"); r.code != 1 {
		t.Fatalf("dag nope: exit %d, want 1", r.code)
	}
	contains(t, "dag nope", r.err, "NOT_FOUND")
}
