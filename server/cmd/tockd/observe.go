package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/admin"
	"github.com/tock-sched/tock/server/notify"
	"github.com/tock-sched/tock/server/tockd"
)

// observeConfig is the admin port and the webhook alerts, as the command line set them.
type observeConfig struct {
	adminAddr     string // "" or "off": no admin port
	adminToken    string // bearer token of the admin port; "": none
	webhooks      string // comma-separated URLs; "": none (webhook_urls may give some)
	webhookFormat string
	webhookSecret string
	alerts        notify.Thresholds
	alertInterval time.Duration
}

func (o *observeConfig) flags(fs *flag.FlagSet, sec *secrets) {
	fs.StringVar(&o.adminAddr, "admin-addr", admin.DefaultAddr, `admin HTTP address: /metrics, /debug/pprof/, /healthz, the web console at /console/ ("off": none)`)
	sec.flag(fs, &o.adminToken, "admin-token", "bearer token the admin port wants on every endpoint but /healthz; the console's login, without which it is read-only (default: none)")
	sec.flag(fs, &o.webhooks, "webhook", "comma-separated webhook URLs that receive alerts: dead letters, leadership changes, backlog and lateness breaches (runtime key webhook_urls, stored in etcd in clear: keep a URL that holds a token here)")
	fs.StringVar(&o.webhookFormat, "webhook-format", string(notify.FormatJSON), "body of every -webhook: json or feishu (a Feishu/Lark card)")
	sec.flag(fs, &o.webhookSecret, "webhook-secret", "Feishu/Lark bot signing secret (with -webhook-format feishu)")
	fs.IntVar(&o.alerts.Backlog, "alert-backlog", 10000, "alert when more due runs than this wait for a worker (0: never; runtime key alert_backlog)")
	fs.DurationVar(&o.alerts.LatenessP95, "alert-lateness-p95", time.Second, "alert when the p95 of start minus due time over an interval exceeds this (0: never; runtime key alert_lateness_p95)")
	fs.DurationVar(&o.alerts.For, "alert-for", time.Minute, "how long a backlog or lateness breach lasts before it alerts (runtime key alert_for)")
	fs.DurationVar(&o.alertInterval, "alert-interval", notify.DefaultInterval, "how often backlog and lateness are checked")
}

// check validates what flag parsing cannot.
func (o *observeConfig) check() error {
	switch {
	case o.alerts.Backlog < 0:
		return fmt.Errorf("-alert-backlog %d is negative", o.alerts.Backlog)
	case o.alerts.LatenessP95 < 0 || o.alerts.For < 0:
		return fmt.Errorf("-alert-lateness-p95 and -alert-for must not be negative")
	case o.alertInterval <= 0:
		return fmt.Errorf("-alert-interval %v must be positive", o.alertInterval)
	case o.webhookSecret != "" && o.webhookFormat != string(notify.FormatFeishu):
		return fmt.Errorf("-webhook-secret signs Feishu cards: it needs -webhook-format feishu")
	}
	return nil
}

// webhook is what each webhook URL becomes: -webhook-format, signed with -webhook-secret.
func (o *observeConfig) webhook() notify.Webhook {
	return notify.Webhook{Format: notify.Format(o.webhookFormat), Secret: o.webhookSecret}
}

// notifier makes the webhook notifier, with -webhook's URLs (none: alerts go nowhere
// until the runtime configuration's webhook_urls names some); node names this node in
// the alerts.
func (o *observeConfig) notifier(node string, log *slog.Logger) (*notify.Notifier, error) {
	var hooks []notify.Webhook
	for _, u := range strings.Split(o.webhooks, ",") {
		if u = strings.TrimSpace(u); u != "" {
			h := o.webhook()
			h.URL = u
			hooks = append(hooks, h)
		}
	}
	n, err := notify.New(notify.WithWebhooks(hooks...), notify.WithNode(node), notify.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("-webhook: %w", err)
	}
	return n, nil
}

// hookAlerts makes the server's options raise n's alerts: a dead-lettered task, and a
// change of this node's leadership.
func hookAlerts(opts *tockd.Options, n *notify.Notifier, node string) {
	opts.EngineOptions = append(opts.EngineOptions, task.WithOnEvent(func(ev task.Event) {
		if ev.Kind == task.EventDead && !ev.OfShard() { // a dead shard's task alerts once its occurrence ends
			n.Notify(notify.DeadLetterAlert(ev))
		}
	}))
	opts.OnLeadership = func(leading bool, epoch uint64) {
		if leading {
			n.Notify(notify.LeaderChangeAlert(node, epoch))
		} else {
			n.Notify(notify.LeaderLostAlert(node, epoch))
		}
	}
}

// newMonitor makes the monitor that checks the server's backlog (runs waiting for a
// worker, and the engine's queue) and lateness against the thresholds, the flags' at
// first and then the runtime configuration's (tockd.Options.Alerts). srv is read at each
// check, so it is made before the server that it samples: set *srv before Run.
func (o *observeConfig) newMonitor(srv **tockd.Server, n *notify.Notifier) (*notify.Monitor, error) {
	return notify.NewMonitor(notify.WithThresholds(o.alerts), notify.WithSink(n), notify.WithInterval(o.alertInterval),
		notify.WithSample(func() notify.Sample {
			st := (*srv).Stats()
			return notify.Sample{Queued: st.Engine.Queued + st.Waiting, Lateness: st.Engine.Lateness}
		}))
}

// startMonitor runs m until ctx ends.
func startMonitor(ctx context.Context, m *notify.Monitor) (done <-chan struct{}) {
	ch := make(chan struct{})
	go func() { defer close(ch); m.Run(ctx) }()
	return ch
}

// startAdmin listens on the admin address (so a taken port fails at start) and serves
// it, and returns its address; nil when the admin port is off.
func (o *observeConfig) startAdmin(srv *tockd.Server, log *slog.Logger) (*admin.Server, net.Addr, error) {
	if o.adminAddr == "" || o.adminAddr == "off" {
		return nil, nil, nil
	}
	adm, err := admin.New(admin.WithAddr(o.adminAddr), admin.WithSnapshot(srv.Stats),
		admin.WithHealthy(srv.Health), admin.WithToken(o.adminToken), admin.WithLogger(log), admin.WithConsole(srv))
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", o.adminAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("admin port: %w", err)
	}
	go func() {
		if err := adm.Serve(ln); err != nil && err != admin.ErrServerClosed {
			log.Error("tockd: admin port stopped", "err", err)
		}
	}()
	log.Info("tockd admin port", "addr", ln.Addr().String())
	return adm, ln.Addr(), nil
}
