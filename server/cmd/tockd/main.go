// Command tockd serves tock's wire protocol (server/PROTOCOL.md) over TCP (optionally
// TLS) in front of an in-process task engine. With -data-dir (an embedded etcd in that
// directory) or -etcd (an external cluster) it also takes durable tasks: they are recorded
// in etcd and reloaded when tockd starts again, and the node dispatches only while it
// holds leadership in etcd's election (FIREs carry its epoch); with neither, it serves
// ephemeral tasks only, refuses durable ones, and always leads. The multi-node cluster
// comes later (server/README.md).
//
// The flags marked "runtime key" are the defaults of a fresh cluster: tockctl config set
// changes them on every node of a running one, without a restart (server/README.md,
// "Runtime configuration").
//
// Every flag has an environment variable equivalent, TOCKD_ and the flag's name in upper
// case with dashes as underscores (TOCKD_MAX_CONNS for -max-conns); a flag given on the
// command line wins over the environment. Secrets (-token, -admin-token, -webhook,
// -webhook-secret, -etcd-password) also have a -NAME-file flag naming a file that holds
// the value, so that they need not sit on a command line (secrets.go). SIGINT or SIGTERM drains: no new connections,
// requests already read are answered, and the process exits within -drain-timeout.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/admin"
	"github.com/tock-sched/tock/server/partition"
	"github.com/tock-sched/tock/server/store"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tracing"
)

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tockd:", err)
		os.Exit(2)
	}
	if cfg.printRules {
		os.Stdout.Write(admin.AlertRules)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "tockd:", err)
		os.Exit(1)
	}
}

// config is everything the command line decides.
type config struct {
	server tockd.Options
	drain  time.Duration
	level  slog.Level
	store  *store.Options // nil: no store, ephemeral tasks only
	obs    observeConfig
	// printRules: print the Prometheus alerting rules and exit.
	printRules bool
	// ready, if set (by tests), is called once the client port and the admin port (nil
	// when off) are listening.
	ready func(client, admin net.Addr)
}

// parseConfig reads flags from args, with environment variables (through getenv) as their
// defaults; it touches no global state, so tests can call it.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	fs := flag.NewFlagSet("tockd", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		c         config
		workers   int
		maxTasks  int
		maxBytes  int
		retention time.Duration
		level     string
		engineTTR time.Duration
		dataDir   string
		etcd      string
		etcdPort  int
		tlsCert   string
		tlsKey    string
		tlsCA     string
		dispatch  string
		ttl       time.Duration
		etcdCA    string
		etcdCert  string
		etcdKey   string
		etcdUser  string
		secrets   = newSecrets()
	)
	c.obs.flags(fs, secrets)
	fs.BoolVar(&c.printRules, "print-alert-rules", false, "print the Prometheus alerting rules for tockd's metrics and exit")
	fs.StringVar(&c.server.Addr, "addr", tockd.DefaultAddr, "TCP address to listen on (clients and workers)")
	fs.StringVar(&c.server.AdvertiseAddr, "advertise-addr", "", "client address announced while leading: followers redirect clients to it (default: the -addr listener's)")
	secrets.flag(fs, &c.server.Token, "token", "shared secret every HELLO must carry (default: none)")
	fs.StringVar(&tlsCert, "tls-cert", "", "PEM certificate (chain) file: serve the client port over TLS (with -tls-key)")
	fs.StringVar(&tlsKey, "tls-key", "", "PEM private key file of -tls-cert")
	fs.StringVar(&tlsCA, "tls-client-ca", "", "PEM CA file: require client certificates signed by it (with -tls-cert)")
	fs.StringVar(&dispatch, "dispatch", tockd.DispatchLeastLoaded.String(), "worker choice: least-loaded, round-robin or key-hash (xxhash of the task key)")
	fs.IntVar(&c.server.MaxQueuedReplyBytes, "max-queued-reply-bytes", 0, "bytes of replies queued on one connection before its requests wait (default max(4 MiB, -max-frame))")
	fs.IntVar(&c.server.MaxWaitingRuns, "max-waiting-runs", tockd.DefaultMaxWaitingRuns, "due runs held waiting for a worker before they fail retryably (runtime key max_waiting_runs)")
	fs.IntVar(&c.server.MaxWaitingRunsPerType, "max-waiting-runs-per-type", 0, "due runs of one task type held waiting for a worker before they fail retryably (default min(262144, -max-waiting-runs); runtime key max_waiting_runs_per_type)")
	fs.IntVar(&c.server.MaxFiresRuns, "max-fires-runs", tockd.DefaultMaxFiresRuns, "most runs in one FIRES frame to a worker that asked for FIRES (1: every run a FIRE of its own)")
	fs.StringVar(&c.server.OTLPEndpoint, "otlp-endpoint", "", "export spans of traced tasks (submitted with a W3C trace context) over OTLP/HTTP to this collector: host:port (plain HTTP, /v1/traces) or an http(s) URL (default: none, no spans)")
	fs.StringVar(&c.server.NodeName, "node-name", "", "name sent in WELCOME, and this node's name in the partition map: unique in a cluster (default: the host name)")
	fs.IntVar(&c.server.Partitions, "partitions", partition.DefaultCount, "the cluster's partition count P, 1 to 4096: stored in etcd by the cluster's first node; a node with another P refuses to start")
	fs.IntVar(&c.server.MaxConns, "max-conns", tockd.DefaultMaxConns, "most open connections")
	fs.IntVar(&c.server.MaxFrame, "max-frame", tockd.DefaultMaxFrame, "largest frame in bytes, either way (at least 4096; a payload may take all but 4096 of it)")
	fs.IntVar(&c.server.MaxHelloFrame, "max-hello-frame", tockd.DefaultMaxHelloFrame, "largest frame in bytes before the handshake (the HELLO)")
	fs.IntVar(&c.server.MaxHandshakes, "max-handshakes", tockd.DefaultMaxHandshakes, "most sockets in the handshake at once (one more crowds the oldest out); not counted in -max-conns")
	fs.IntVar(&c.server.MaxPendingPerConn, "max-pending-per-conn", tockd.DefaultMaxPendingPerConn, "replies queued per connection before it counts as slow")
	fs.DurationVar(&c.server.IdleTimeout, "idle-timeout", tockd.DefaultIdleTimeout, "close a connection silent this long")
	fs.DurationVar(&c.server.HandshakeTimeout, "handshake-timeout", tockd.DefaultHandshakeTimeout, "time allowed for the handshake (TLS and HELLO)")
	fs.DurationVar(&c.server.WriteTimeout, "write-timeout", tockd.DefaultWriteTimeout, "drop a connection that cannot take replies this long")
	fs.DurationVar(&engineTTR, "default-ttr", tockd.DefaultTTR, "time-to-run of a FIRE whose task has no timeout")
	fs.DurationVar(&c.server.Heartbeat, "heartbeat", 0, "heartbeat interval stated to clients, who leave a node silent for 3 of them (default: a quarter of -session-ttl with etcd, else 5s)")
	fs.DurationVar(&c.server.CarryGrace, "carry-grace", tockd.DefaultCarryGrace, "how long a new leader holds back the runs it loaded for its workers' carried outcomes (negative: no hold)")
	fs.DurationVar(&c.server.CarryHoldMax, "carry-hold-max", 0, "the longest a new leader's hold lasts while carried outcomes keep arriving, each CARRY frame extending it by -carry-grace (default 4s, or -carry-grace if longer)")
	fs.DurationVar(&c.server.ReconnectGrace, "reconnect-grace", tockd.DefaultReconnectGrace, "how long the runs in flight on a closed worker connection wait for that worker to reconnect and carry their outcomes (negative: redelivered at once)")
	fs.IntVar(&workers, "engine-workers", 0, "engine goroutines running handlers (default 8 x GOMAXPROCS)")
	fs.IntVar(&maxTasks, "max-tasks", 0, "most task records held before submits are OVERLOADED (default 10,000,000)")
	fs.IntVar(&maxBytes, "max-payload-bytes", 0, "most payload bytes held by task records together before submits are OVERLOADED (default 1 GiB)")
	fs.DurationVar(&retention, "retention", time.Minute, "how long a finished task stays queryable (GET, LIST) and counts towards -max-tasks; 0: dropped as it finishes (runtime key retention)")
	fs.DurationVar(&c.drain, "drain-timeout", 30*time.Second, "how long SIGTERM waits for connections to finish")
	fs.StringVar(&level, "log-level", "info", "debug, info, warn or error (runtime key log_level)")
	fs.StringVar(&dataDir, "data-dir", "", "start an embedded etcd in this directory and keep durable tasks in it")
	fs.IntVar(&etcdPort, "etcd-client-port", 2379, "client port of the embedded etcd on 127.0.0.1 (0: a free one)")
	fs.DurationVar(&ttl, "session-ttl", store.DefaultSessionTTL, "etcd session TTL of leadership (whole seconds): a dead leader is replaced about this long after; raise it on a machine that can stall for that long")
	fs.StringVar(&etcd, "etcd", "", "comma-separated endpoints of an external etcd for durable tasks")
	fs.StringVar(&etcdCA, "etcd-ca", "", "PEM CA file that verifies the -etcd servers (https:// endpoints)")
	fs.StringVar(&etcdCert, "etcd-cert", "", "PEM client certificate file for -etcd (with -etcd-key), where etcd wants client certificates")
	fs.StringVar(&etcdKey, "etcd-key", "", "PEM private key file of -etcd-cert")
	fs.StringVar(&etcdUser, "etcd-user", "", "etcd user for -etcd, when its auth is on (with -etcd-password)")
	var etcdPassword string
	secrets.flag(fs, &etcdPassword, "etcd-password", "password of -etcd-user")

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "TOCKD_" + envName(f.Name)
		if v := getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return config{}, envErr
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if err := secrets.read(); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := c.level.UnmarshalText([]byte(level)); err != nil {
		return config{}, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	if err := c.obs.check(); err != nil {
		return config{}, err
	}
	if c.drain <= 0 {
		return config{}, fmt.Errorf("-drain-timeout %v must be positive", c.drain)
	}
	if ep := c.server.OTLPEndpoint; ep != "" {
		if err := tracing.CheckEndpoint(ep); err != nil {
			return config{}, fmt.Errorf("-otlp-endpoint: %w", err)
		}
	}
	switch {
	case dataDir != "" && etcd != "":
		return config{}, errors.New("-data-dir and -etcd are exclusive: an embedded etcd or an external one")
	case dataDir != "":
		c.store = &store.Options{Embedded: dataDir, EmbeddedClientPort: etcdPort}
	case etcd != "":
		var eps []string
		for _, ep := range strings.Split(etcd, ",") {
			if ep = strings.TrimSpace(ep); ep != "" {
				eps = append(eps, ep)
			}
		}
		if len(eps) == 0 {
			return config{}, fmt.Errorf("-etcd %q names no endpoint", etcd)
		}
		c.store = &store.Options{Endpoints: eps, Username: etcdUser, Password: etcdPassword}
		var err error
		if c.store.TLS, err = loadEtcdTLS(etcdCA, etcdCert, etcdKey); err != nil {
			return config{}, err
		}
	}
	if etcd == "" && (etcdCA != "" || etcdCert != "" || etcdKey != "" || etcdUser != "" || etcdPassword != "") {
		return config{}, errors.New("-etcd-ca, -etcd-cert, -etcd-key, -etcd-user and -etcd-password are for -etcd (the embedded etcd of -data-dir has its own root password)")
	}
	if (etcdUser == "") != (etcdPassword == "") {
		return config{}, errors.New("-etcd-user and -etcd-password go together")
	}
	if etcdPort < 0 || etcdPort > 65535 {
		return config{}, fmt.Errorf("-etcd-client-port %d outside [0, 65535]", etcdPort)
	}
	if c.store != nil {
		c.store.Node = c.server.NodeName
		if ttl < time.Second {
			return config{}, fmt.Errorf("-session-ttl %v: at least 1s (etcd counts whole seconds)", ttl)
		}
		c.store.SessionTTL = ttl
	}
	if err := partition.CheckCount(c.server.Partitions); err != nil {
		return config{}, fmt.Errorf("-partitions: %w", err)
	}
	var err error
	if c.server.Dispatch, err = tockd.ParseDispatch(dispatch); err != nil {
		return config{}, fmt.Errorf("-dispatch: %w", err)
	}
	tlsConfig, err := loadTLS(tlsCert, tlsKey, tlsCA)
	if err != nil {
		return config{}, err
	}
	c.server.TLS = tlsConfig
	c.server.DefaultTTR = engineTTR
	if retention < 0 {
		return config{}, fmt.Errorf("-retention %v: negative", retention)
	}
	if retention == 0 {
		retention = -1 // the engine's "drop at once"
	}
	c.server.EngineOptions = []task.Option{task.WithWorkers(workers), task.WithMaxTasks(maxTasks),
		task.WithMaxPayloadBytes(maxBytes), task.WithRetention(retention)}
	return c, nil
}

// loadTLS builds the client port's TLS configuration from PEM files; nil when no
// certificate is given.
func loadTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "" && clientCAFile == "":
		return nil, nil
	case certFile == "" || keyFile == "":
		return nil, errors.New("-tls-cert and -tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-client-ca %s: no PEM certificate in it", clientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// loadEtcdTLS builds the TLS configuration of the connection to -etcd; nil when no
// file is given.
func loadEtcdTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("-etcd-cert and -etcd-key go together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("-etcd-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-etcd-ca %s: no PEM certificate in it", caFile)
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("-etcd-cert/-etcd-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// run serves until ctx ends (SIGINT or SIGTERM in main), then drains within c.drain.
func run(ctx context.Context, c config) error {
	// A level variable, so that the runtime configuration's log_level can change it.
	level := new(slog.LevelVar)
	level.Set(c.level)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	c.server.Logger, c.server.LogLevel = log, level
	if c.store != nil {
		openCtx, cancel := context.WithTimeout(context.Background(), store.DefaultStartTimeout)
		st, err := store.Open(openCtx, store.WithOptions(*c.store))
		cancel()
		if err != nil {
			return err
		}
		defer func() {
			if err := st.Close(); err != nil {
				log.Error("tockd: closing the store", "err", err)
			}
		}()
		c.server.Store = st
		log.Info("tockd: durable tasks enabled", "embedded", c.store.Embedded, "etcd", c.store.Endpoints, "client_url", st.ClientURL())
	}
	n, err := c.obs.notifier(c.server.NodeName, log)
	if err != nil {
		return err
	}
	// Always a notifier and its monitor, even with no -webhook: the runtime
	// configuration's webhook_urls may give it webhooks, and alert_* its thresholds.
	hookAlerts(&c.server, n, c.server.NodeName)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.drain)
		defer cancel()
		if err := n.Close(ctx); err != nil {
			log.Warn("tockd: alerts still queued were dropped", "err", err)
		}
	}()
	c.server.Notifier, c.server.Webhook = n, c.obs.webhook()
	var srv *tockd.Server
	mon, err := c.obs.newMonitor(&srv, n)
	if err != nil {
		return err
	}
	c.server.Alerts = mon
	srv, err = tockd.New(tockd.WithOptions(c.server))
	if err != nil {
		return err
	}
	adm, adminAddr, err := c.obs.startAdmin(srv, log)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	monitorDone := startMonitor(ctx, mon)
	defer func() { stop(); <-monitorDone }() // the monitor ends with ctx
	ln, err := net.Listen("tcp", c.server.Addr)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return fmt.Errorf("listen: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("tockd listening", "addr", ln.Addr().String(), "tls", c.server.TLS != nil)
	if c.ready != nil {
		c.ready(ln.Addr(), adminAddr)
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("tockd draining", "timeout", c.drain)
	drainCtx, cancel := context.WithTimeout(context.Background(), c.drain)
	defer cancel()
	if err := srv.Shutdown(drainCtx); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if err := <-served; err != nil && !errors.Is(err, tockd.ErrServerClosed) {
		return err
	}
	if adm != nil {
		// Last, so that metrics can be scraped while the node drains.
		if err := adm.Shutdown(drainCtx); err != nil {
			log.Warn("tockd: admin port shutdown", "err", err)
		}
	}
	log.Info("tockd stopped")
	return nil
}
