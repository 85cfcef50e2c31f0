package tockd

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/notify"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/settings"
)

// TestPauseSurvivesALeaderChange: a type paused at one leader stays paused at the next
// (the pause is the cluster's configuration in etcd, not the leader's memory): the new
// leader names it paused and holds its run until RESUME, sent to the new leader.
func TestPauseSurvivesALeaderChange(t *testing.T) {
	n := startTwoNodes(t, Options{})
	c := connect(t, n.leader.addr)
	wantOK(t, c.call(&protocol.Pause{ID: 2, TaskType: "t"}))
	submit(t, c, 3, durableTask("held", 0))
	n.leader.stop(t) // resigns: the follower takes over
	waitLeading(t, n.follower, "the follower never took over")
	w := connectWorker(t, n.fd.addr, 1, "t")
	if got := n.follower.PausedTypes(); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("the new leader's paused types: %q, want [t], paused at the last leader", got)
	}
	waitWaiting(t, n.follower, 1)
	fc := connect(t, n.fd.addr)
	wantOK(t, fc.call(&protocol.Resume{ID: 2, TaskType: "t"}))
	if f := w.fire(); f.TaskID != "held" {
		t.Fatalf("FIRE of %s after RESUME, want the held task", f.TaskID)
	}
}

// TestPauseSurvivesARestart: a node made again over the same etcd holds the pause
// recorded before, from New on, before it serves its first connection.
func TestPauseSurvivesARestart(t *testing.T) {
	st, ts := startLeader(t)
	c := connect(t, ts.addr)
	wantOK(t, c.call(&protocol.Pause{ID: 2, TaskType: "t"}))
	ts.stop(t)
	again := newServer(t, Options{Store: st})
	if got := again.PausedTypes(); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("paused types after the restart: %q, want [t]", got)
	}
	serve(t, again) // and its stop
}

// waitingLimits reads the router's waiting bounds, as route applies them.
func waitingLimits(s *Server) (total, perType int) {
	s.router.mu.Lock()
	defer s.router.mu.Unlock()
	return s.router.maxWaiting, s.router.maxPerType
}

// configCtx bounds one configuration call of a test.
func configCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	t.Cleanup(cancel)
	return ctx
}

// TestConfigSetAppliesOnEveryNode: a setting written at one node of three is applied by
// every node, without a restart: the router's waiting bound, the engine's rate and
// concurrency limits and retention, a paused type; each change is counted once per node; a reset puts
// every node back on its Options.
func TestConfigSetAppliesOnEveryNode(t *testing.T) {
	_, nodes := threeNodes(t)
	ctx := configCtx(t)
	start := time.Now()
	for k, v := range map[string]string{"max_waiting_runs": "7", "rate_limit/email": "50:5",
		"concurrency_limit/shop/cust": "3", "paused/email": "true", "retention": "10m"} {
		if e, err := nodes[1].srv.ConfigSet(ctx, k, v); err != nil || !e.Set || e.Key != k {
			t.Fatalf("ConfigSet(%s, %s) = %+v, %v", k, v, e, err)
		}
	}
	wrote := time.Since(start)
	applied := func(s *Server) bool {
		total, _ := waitingLimits(s)
		rate, burst, _ := s.engine.RateLimit("email")
		key, ok := s.engine.ConcurrencyKey("shop", "cust")
		return total == 7 && rate == 50 && burst == 5 && ok && key.Limit == 3 && slices.Equal(s.PausedTypes(), []string{"email"}) &&
			s.engine.Retention() == 10*time.Minute
	}
	for _, n := range nodes {
		if !waitUntil(func() bool { return applied(n.srv) }) {
			total, _ := waitingLimits(n.srv)
			rate, burst, _ := n.srv.engine.RateLimit("email")
			t.Fatalf("%s within %v: max waiting %d, rate %v:%d, paused %q, retention %v", n.srv.opts.NodeName, waitBound, total, rate, burst,
				n.srv.PausedTypes(), n.srv.engine.Retention())
		}
	}
	t.Logf("5 writes at node-b took %v; applied on all three %v after the first", wrote, time.Since(start))
	for _, n := range nodes {
		if got := n.srv.Stats().ConfigChanges; got["max_waiting_runs"] != 1 || got["rate_limit/email"] != 1 || len(got) != 5 {
			t.Fatalf("%s counts changes %v, want each of the 5 keys once", n.srv.opts.NodeName, got)
		}
		if e, err := n.srv.ConfigGet("rate_limit/email"); err != nil || e != (ConfigEntry{Key: "rate_limit/email", Value: "50:5", Set: true}) {
			t.Fatalf("%s: ConfigGet = %+v, %v", n.srv.opts.NodeName, e, err)
		}
	}
	for _, k := range []string{"max_waiting_runs", "rate_limit/email", "concurrency_limit/shop/cust", "paused/email", "retention"} {
		if _, err := nodes[2].srv.ConfigReset(ctx, k); err != nil {
			t.Fatalf("ConfigReset(%s): %v", k, err)
		}
	}
	for _, n := range nodes {
		if !waitUntil(func() bool {
			total, _ := waitingLimits(n.srv)
			rate, _, _ := n.srv.engine.RateLimit("email")
			_, keyed := n.srv.engine.ConcurrencyKey("shop", "cust")
			return total == DefaultMaxWaitingRuns && rate == 0 && !keyed && len(n.srv.PausedTypes()) == 0 &&
				n.srv.engine.Retention() == time.Minute // the engine's default: these nodes set none
		}) {
			t.Fatalf("%s never went back to its defaults after the resets", n.srv.opts.NodeName)
		}
		if got := n.srv.Stats().ConfigChanges["max_waiting_runs"]; got != 2 {
			t.Fatalf("%s counts %d changes of max_waiting_runs, want 2 (set, reset)", n.srv.opts.NodeName, got)
		}
	}
	if e, err := nodes[0].srv.ConfigGet("max_waiting_runs"); err != nil || e.Set || e.Value != strconv.Itoa(DefaultMaxWaitingRuns) {
		t.Fatalf("ConfigGet after the reset = %+v, %v; want the default, not set", e, err)
	}
}

// TestConfigRefusesUnknownKeysAndBadValues: neither is written; the error names the key
// and the value.
func TestConfigRefusesUnknownKeysAndBadValues(t *testing.T) {
	st, ts := startLeader(t)
	ctx := configCtx(t)
	if _, err := ts.srv.ConfigSet(ctx, "max_waiting", "7"); !errors.Is(err, settings.ErrUnknownKey) || !strings.Contains(err.Error(), `"max_waiting"`) {
		t.Fatalf("an unknown key: %v, want ErrUnknownKey naming it", err)
	}
	if _, err := ts.srv.ConfigSet(ctx, "max_waiting_runs", "-1"); !errors.Is(err, settings.ErrBadValue) || !strings.Contains(err.Error(), `max_waiting_runs = "-1"`) {
		t.Fatalf("a bad value: %v, want ErrBadValue naming the key and the value", err)
	}
	if _, err := ts.srv.ConfigReset(ctx, "no_such"); !errors.Is(err, settings.ErrUnknownKey) {
		t.Fatalf("a reset of an unknown key: %v, want ErrUnknownKey", err)
	}
	if set, err := st.Config().List(ctx); err != nil || len(set.Values) != 0 {
		t.Fatalf("etcd holds %v, %v; want nothing written", set.Values, err)
	}
	if got := ts.srv.Stats().ConfigChanges; len(got) != 0 {
		t.Fatalf("changes counted %v, want none", got)
	}
}

// TestConfigValueWrittenByHandIsNotApplied: a value in etcd that does not parse (written
// past tockctl) leaves the one in effect; the next good value applies.
func TestConfigValueWrittenByHandIsNotApplied(t *testing.T) {
	st, ts := startLeader(t)
	ctx := configCtx(t)
	if _, err := ts.srv.ConfigSet(ctx, "max_waiting_runs", "9"); err != nil {
		t.Fatal(err)
	}
	rev, err := st.Config().Put(ctx, "max_waiting_runs", "lots")
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.srv.config.waitApplied(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if total, _ := waitingLimits(ts.srv); total != 9 {
		t.Fatalf("after a bad value by hand the bound is %d, want 9 kept", total)
	}
	if _, err := ts.srv.ConfigSet(ctx, "max_waiting_runs", "11"); err != nil {
		t.Fatal(err)
	}
	if total, _ := waitingLimits(ts.srv); total != 11 {
		t.Fatalf("after ConfigSet returned the bound is %d, want 11", total)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// discardAlerts takes every alert.
type discardAlerts struct{}

func (discardAlerts) Notify(notify.Alert) bool { return true }

// TestConfigWithoutAStore: a lone node without etcd applies a setting to itself, in
// memory; log_level sets Options.LogLevel, alert_* the alert monitor's thresholds,
// webhook_urls the notifier's webhooks (logged only as scheme://host/…), and a reset
// restores what they held at New.
func TestConfigWithoutAStore(t *testing.T) {
	var level slog.LevelVar
	level.Set(slog.LevelWarn)
	base := notify.Thresholds{Backlog: 10000, LatenessP95: time.Second, For: time.Minute}
	mon, err := notify.NewMonitor(notify.WithThresholds(base), notify.WithSink(discardAlerts{}),
		notify.WithSample(func() notify.Sample { return notify.Sample{} }))
	if err != nil {
		t.Fatal(err)
	}
	flagHook := notify.Webhook{URL: "http://127.0.0.1:1/hook/FLAG-TOKEN", Format: notify.FormatJSON}
	n, err := notify.New(notify.WithWebhooks(flagHook))
	if err != nil {
		t.Fatal(err)
	}
	var logged syncBuffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: &level}))
	ts := startServer(t, Options{LogLevel: &level, Logger: log, MaxWaitingRuns: 100, Alerts: mon, Notifier: n})
	t.Cleanup(func() { n.Close(context.Background()) }) // after startServer's: before its leak check
	ctx := configCtx(t)
	const setURL = "http://127.0.0.1:2/hook/SET-TOKEN"
	if e, err := ts.srv.ConfigSet(ctx, "webhook_urls", setURL); err != nil || e.Value != setURL ||
		!slices.Equal(n.Webhooks(), []notify.Webhook{{URL: setURL, Format: notify.FormatJSON}}) {
		t.Fatalf("ConfigSet(webhook_urls) = %+v, %v; the notifier's webhooks %+v", e, err, n.Webhooks())
	}
	if _, err := ts.srv.ConfigReset(ctx, "webhook_urls"); err != nil || !slices.Equal(n.Webhooks(), []notify.Webhook{flagHook}) {
		t.Fatalf("ConfigReset(webhook_urls): %v; the notifier's webhooks %+v, want the flag's again", err, n.Webhooks())
	}
	if strings.Contains(logged.String(), "TOKEN") {
		t.Fatalf("the log shows a webhook URL whole:\n%s", logged.String())
	}
	for k, v := range map[string]string{"alert_backlog": "50", "alert_for": "5s"} {
		if _, err := ts.srv.ConfigSet(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if got := mon.Thresholds(); got != (notify.Thresholds{Backlog: 50, LatenessP95: time.Second, For: 5 * time.Second}) {
		t.Fatalf("alert thresholds %+v, want backlog 50, for 5s and the lateness of the options", got)
	}
	if _, err := ts.srv.ConfigReset(ctx, "alert_backlog"); err != nil || mon.Thresholds().Backlog != 10000 {
		t.Fatalf("ConfigReset(alert_backlog): %v; thresholds %+v, want backlog 10000 again", err, mon.Thresholds())
	}
	if _, err := ts.srv.ConfigReset(ctx, "alert_for"); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.srv.ConfigSet(ctx, "log_level", "debug"); err != nil || level.Level() != slog.LevelDebug {
		t.Fatalf("ConfigSet(log_level, debug): %v; level %v", err, level.Level())
	}
	if _, err := ts.srv.ConfigSet(ctx, "max_waiting_runs_per_type", "3"); err != nil {
		t.Fatal(err)
	}
	if total, perType := waitingLimits(ts.srv); total != 100 || perType != 3 {
		t.Fatalf("waiting bounds %d, %d; want 100 (the option) and 3", total, perType)
	}
	if want := `msg="tockd: configuration changed" key=max_waiting_runs_per_type old=100 new=3`; !strings.Contains(logged.String(), want) {
		t.Fatalf("the log lacks %q:\n%s", want, logged.String())
	}
	if _, err := ts.srv.ConfigReset(ctx, "log_level"); err != nil || level.Level() != slog.LevelWarn {
		t.Fatalf("ConfigReset(log_level): %v; level %v, want warn again", err, level.Level())
	}
	entries, _ := ts.srv.ConfigList()
	want := []ConfigEntry{{Key: "alert_backlog", Value: "10000"}, {Key: "alert_for", Value: "1m0s"},
		{Key: "alert_lateness_p95", Value: "1s"}, {Key: "log_level", Value: "warn"}, {Key: "max_waiting_runs", Value: "100"},
		{Key: "max_waiting_runs_per_type", Value: "3", Set: true}, {Key: "retention", Value: "1m0s"},
		{Key: "webhook_urls", Value: "http://127.0.0.1:1/…"}}
	if !slices.Equal(entries, want) {
		t.Fatalf("ConfigList = %+v, want %+v", entries, want)
	}
}
