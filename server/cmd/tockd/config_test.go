package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/settings"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// startTockd runs the tockd command with args (after a client and an admin port on free
// loopback ports) until drain, which stops it and returns run's error. It returns once
// both ports listen; ctx ends at drain.
func startTockd(t *testing.T, args ...string) (ctx context.Context, addr, adminAddr string, drain func() error) {
	t.Helper()
	cfg, err := parseConfig(append([]string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}, args...), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]net.Addr, 1)
	cfg.ready = func(c, a net.Addr) { addrs <- [2]net.Addr{c, a} }
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	var once sync.Once
	var runErr error
	drain = func() error {
		once.Do(func() { stop(); runErr = tockdtest.Receive(t, done, "tockd's drain") })
		return runErr
	}
	t.Cleanup(func() { _ = drain() })
	select {
	case a := <-addrs:
		return ctx, a[0].String(), a[1].String(), drain
	case err := <-done:
		once.Do(func() { stop(); runErr = err }) // done is drained
		t.Fatalf("tockd exited at start: %v", err)
	case <-time.After(tockdtest.Limit):
		t.Fatal("tockd did not start")
	}
	return nil, "", "", nil
}

// TestAlertThresholdSetAtRuntime: the tockd command started with the backlog alert off
// (-alert-backlog 0) alerts on a backlog once alert_backlog is set to 1 over the wire,
// without a restart; /metrics counts the change.
func TestAlertThresholdSetAtRuntime(t *testing.T) {
	hook, kinds := alertReceiver(t)
	ctx, addr, adminAddr, drain := startTockd(t, "-data-dir", t.TempDir(), "-etcd-client-port", "0", "-node-name", "cfg",
		"-log-level", "warn", "-webhook", hook.URL, "-alert-backlog", "0", "-alert-for", "0s", "-alert-interval", "20ms",
		"-drain-timeout", "10s")
	defer func() {
		if err := drain(); err != nil {
			t.Errorf("drain: %v", err)
		}
	}()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stuckRuns(ctx, t, c)
	if v, err := c.Config().Set(ctx, "alert_backlog", "1"); err != nil || v.Value != "1" || !v.Set {
		t.Fatalf("ConfigSet(alert_backlog, 1) = %+v, %v", v, err)
	}
	waitAlert(t, kinds, "backlog", "of setting alert_backlog to 1")
	if got := scrape(t, adminAddr, `tock_config_changes_total{key="alert_backlog"}`); got[`tock_config_changes_total{key="alert_backlog"}`] != 1 {
		t.Fatalf("/metrics: %v, want one change of alert_backlog", got)
	}
}

// stuckRuns submits three runs due now of a type no worker serves: a backlog of 3.
func stuckRuns(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	for i := range 3 {
		if _, err := c.Submit(ctx, task.Task{ID: fmt.Sprint("stuck-", i), Type: "nobody", Schedule: task.After(0)}, protocol.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
}

// waitAlert waits (up to tockdtest.Limit) for a firing alert of kind among kinds.
func waitAlert(t *testing.T, kinds chan string, kind, within string) {
	t.Helper()
	deadline := time.After(tockdtest.Limit)
	for got := ""; got != kind; {
		select {
		case got = <-kinds:
		case <-deadline:
			t.Fatalf("no %s alert within %v %s", kind, tockdtest.Limit, within)
		}
	}
}

// alertReceiver is a webhook on loopback that passes on each firing alert's kind.
func alertReceiver(t *testing.T) (*httptest.Server, chan string) {
	kinds := make(chan string, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a struct {
			Kind     string `json:"kind"`
			Resolved bool   `json:"resolved"`
		}
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		if !a.Resolved {
			select {
			case kinds <- a.Kind:
			default:
			}
		}
	}))
	t.Cleanup(hook.Close)
	return hook, kinds
}

// TestWebhookURLsSetAtRuntime: the tockd command started with -webhook at one receiver
// sends its alerts to another once webhook_urls names it, without a restart: a backlog
// alert raised after the change reaches the new receiver and not the old one. The flag's
// URL, the default, is listed cut to scheme://host/… (it may hold a token).
func TestWebhookURLsSetAtRuntime(t *testing.T) {
	old, oldKinds := alertReceiver(t)
	hook, kinds := alertReceiver(t)
	ctx, addr, adminAddr, drain := startTockd(t, "-data-dir", t.TempDir(), "-etcd-client-port", "0", "-node-name", "hooks",
		"-log-level", "warn", "-webhook", old.URL+"/hook/TOKEN", "-alert-backlog", "0", "-alert-for", "0s", "-alert-interval", "20ms",
		"-drain-timeout", "10s")
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Config().Get(ctx, "webhook_urls"); err != nil || v.Value != old.URL+"/…" || v.Set {
		t.Fatalf("ConfigGet(webhook_urls) = %+v, %v; want the flag's URL cut to %s/…, not set", v, err, old.URL)
	}
	stuckRuns(ctx, t, c)
	if v, err := c.Config().Set(ctx, "webhook_urls", hook.URL); err != nil || v.Value != hook.URL || !v.Set {
		t.Fatalf("ConfigSet(webhook_urls, %s) = %+v, %v", hook.URL, v, err)
	}
	if v, err := c.Config().Set(ctx, "alert_backlog", "1"); err != nil || v.Value != "1" {
		t.Fatalf("ConfigSet(alert_backlog, 1) = %+v, %v", v, err)
	}
	waitAlert(t, kinds, "backlog", "of the change, at the new webhook")
	if got := scrape(t, adminAddr, `tock_config_changes_total{key="webhook_urls"}`); got[`tock_config_changes_total{key="webhook_urls"}`] != 1 {
		t.Fatalf("/metrics: %v, want one change of webhook_urls", got)
	}
	if err := drain(); err != nil { // the notifier drained: whatever reached old is in oldKinds
		t.Fatalf("drain: %v", err)
	}
	for len(oldKinds) > 0 {
		if k := <-oldKinds; k == "backlog" {
			t.Fatal("the backlog alert raised after the change reached the old webhook")
		}
	}
}

// TestSettingDefaultsAreTheFlags: each runtime setting whose documented default is a
// tockd flag names that flag with its default value, as the command parses it.
func TestSettingDefaultsAreTheFlags(t *testing.T) {
	c, err := parseConfig(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	var engine task.Options
	for _, opt := range c.server.EngineOptions {
		opt(&engine)
	}
	flagValue := map[string]string{
		"-retention":          engine.Retention.String(),
		"-webhook":            cmp.Or(c.obs.webhooks, "none"),
		"-log-level":          strings.ToLower(c.level.String()),
		"-max-waiting-runs":   strconv.Itoa(c.server.MaxWaitingRuns),
		"-alert-backlog":      strconv.Itoa(c.obs.alerts.Backlog),
		"-alert-lateness-p95": c.obs.alerts.LatenessP95.String(),
		"-alert-for":          c.obs.alerts.For.String(),
	}
	checked := 0
	for _, sp := range settings.Specs() {
		name, rest, ok := strings.Cut(sp.Default, " (")
		want, known := flagValue[name]
		if !ok || !known {
			continue
		}
		checked++
		if got := strings.TrimSuffix(rest, ")"); got != want {
			t.Errorf("%s: documented default %q, but %s defaults to %s", sp.Name, sp.Default, name, want)
		}
	}
	if checked != len(flagValue) {
		t.Errorf("checked %d settings' defaults, want %d (one per flag listed)", checked, len(flagValue))
	}
}

// TestRuntimeKeysMarkedInHelp: tockd -h marks each flag that is a runtime setting's
// default with "runtime key NAME", and no flag names a key the registry lacks.
func TestRuntimeKeysMarkedInHelp(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); read <- b }() // a usage past the pipe's buffer never blocks
	stderr := os.Stderr
	os.Stderr = w // parseConfig's flag set writes its usage there
	_, perr := parseConfig([]string{"-h"}, env(nil))
	os.Stderr = stderr
	w.Close()
	help := <-read
	if !errors.Is(perr, flag.ErrHelp) || len(help) == 0 {
		t.Fatalf("tockd -h: %v, with %d bytes of usage", perr, len(help))
	}
	// Each flag's usage is its "  -name type" line and the indented lines after it.
	usage := map[string]string{}
	name := ""
	for _, line := range strings.Split(string(help), "\n") {
		if f, ok := strings.CutPrefix(line, "  -"); ok {
			name = "-" + strings.Fields(f)[0]
		}
		usage[name] += line + " "
	}
	marked := 0
	for _, sp := range settings.Specs() {
		flagName, _, ok := strings.Cut(sp.Default, " (")
		if !ok || !strings.HasPrefix(flagName, "-") {
			continue
		}
		marked++
		if !strings.Contains(strings.Join(strings.Fields(usage[flagName]), " "), "runtime key "+sp.Name) {
			t.Errorf("tockd -h: %s is %s's default, but its usage does not say \"runtime key %s\": %q", flagName, sp.Name, sp.Name, usage[flagName])
		}
	}
	if got := strings.Count(string(help), "runtime key "); got != marked {
		t.Errorf("tockd -h marks %d runtime keys, the registry has %d flag defaults", got, marked)
	}
}
