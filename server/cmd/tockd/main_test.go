package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/partition"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := parseConfig(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.server.Addr != tockd.DefaultAddr || c.server.MaxConns != tockd.DefaultMaxConns || c.drain != 30*time.Second ||
		c.server.DefaultTTR != tockd.DefaultTTR || c.level.String() != "INFO" {
		t.Fatalf("defaults %+v", c)
	}
}

func TestEnvironmentAndFlagsFlagsWin(t *testing.T) {
	c, err := parseConfig([]string{"-max-conns", "7", "-log-level", "debug"},
		env(map[string]string{"TOCKD_MAX_CONNS": "3", "TOCKD_TOKEN": "s3cret", "TOCKD_IDLE_TIMEOUT": "1m", "TOCKD_DEFAULT_TTR": "5s"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.server.MaxConns != 7 || c.server.Token != "s3cret" || c.server.IdleTimeout != time.Minute ||
		c.server.DefaultTTR != 5*time.Second || c.level.String() != "DEBUG" {
		t.Fatalf("config %+v", c)
	}
}

func TestBadConfigurationIsAClearError(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-max-conns", "many"}, nil, "max-conns"},
		{nil, map[string]string{"TOCKD_IDLE_TIMEOUT": "soon"}, "TOCKD_IDLE_TIMEOUT"},
		{[]string{"-log-level", "loud"}, nil, "log-level"},
		{[]string{"-drain-timeout", "0s"}, nil, "drain-timeout"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{[]string{"-data-dir", "/tmp/x", "-etcd", "127.0.0.1:2379"}, nil, "exclusive"},
		{[]string{"-etcd", " , "}, nil, "-etcd"},
		{[]string{"-data-dir", "/tmp/x", "-etcd-client-port", "70000"}, nil, "etcd-client-port"},
		{[]string{"-dispatch", "random"}, nil, "-dispatch"},
		{[]string{"-tls-cert", "c.pem"}, nil, "-tls-key"},
		{[]string{"-tls-cert", "missing.pem", "-tls-key", "missing.key"}, nil, "-tls-cert"},
		{[]string{"-webhook-secret", "s"}, nil, "-webhook-format feishu"},
		{[]string{"-alert-backlog", "-1"}, nil, "-alert-backlog"},
		{[]string{"-data-dir", "d", "-session-ttl", "500ms"}, nil, "-session-ttl"},
		{[]string{"-retention", "-1s"}, nil, "-retention"},
		{[]string{"-partitions", "0"}, nil, "-partitions"},
		{[]string{"-partitions", "4097"}, nil, "-partitions"},
		{[]string{"-otlp-endpoint", "ftp://collector:4318"}, nil, "-otlp-endpoint"},
		{nil, map[string]string{"TOCKD_OTLP_ENDPOINT": "collector"}, "-otlp-endpoint"},
	} {
		_, err := parseConfig(c.args, env(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: got %v, want an error naming %q", c.args, c.env, err, c.want)
		}
	}
}

// TestPartitionsFlag: -partitions (or TOCKD_PARTITIONS) reaches the server's options,
// and defaults to partition.DefaultCount.
func TestPartitionsFlag(t *testing.T) {
	c, err := parseConfig(nil, env(nil))
	if err != nil || c.server.Partitions != partition.DefaultCount {
		t.Fatalf("default: Partitions %d, err %v; want %d", c.server.Partitions, err, partition.DefaultCount)
	}
	c, err = parseConfig([]string{"-partitions", "64"}, env(map[string]string{"TOCKD_PARTITIONS": "32"}))
	if err != nil || c.server.Partitions != 64 {
		t.Fatalf("-partitions 64: Partitions %d, err %v", c.server.Partitions, err)
	}
}

func TestStoreFlags(t *testing.T) {
	c, err := parseConfig(nil, env(nil))
	if err != nil || c.store != nil {
		t.Fatalf("no store flag: store %+v, err %v", c.store, err)
	}
	c, err = parseConfig([]string{"-data-dir", "/var/lib/tock", "-etcd-client-port", "0"}, env(nil))
	if err != nil || c.store == nil || c.store.Embedded != "/var/lib/tock" || c.store.EmbeddedClientPort != 0 {
		t.Fatalf("-data-dir: store %+v, err %v", c.store, err)
	}
	c, err = parseConfig(nil, env(map[string]string{"TOCKD_ETCD": "http://a:2379, http://b:2379"}))
	if err != nil || c.store == nil || len(c.store.Endpoints) != 2 || c.store.Endpoints[1] != "http://b:2379" {
		t.Fatalf("TOCKD_ETCD: store %+v, err %v", c.store, err)
	}
	c, err = parseConfig([]string{"-data-dir", "d"}, env(nil))
	if err != nil || c.store.EmbeddedClientPort != 2379 {
		t.Fatalf("default client port: store %+v, err %v", c.store, err)
	}
}

// -retention reaches the engine: the default keeps a finished task queryable; 0 drops
// it as it finishes.
func TestRetentionFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		kept bool
	}{{nil, true}, {[]string{"-retention", "0"}, false}} {
		cfg, err := parseConfig(c.args, env(nil))
		if err != nil {
			t.Fatal(err)
		}
		e, err := task.New(cfg.server.EngineOptions...)
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{})
		e.Register("t", func(context.Context, *task.Run) error { close(ran); return nil })
		if _, err := e.Submit(task.Task{ID: "x", Type: "t", Schedule: task.After(0)}); err != nil {
			t.Fatal(err)
		}
		<-ran
		tockdtest.Eventually(t, fmt.Sprintf("%v: x kept %v after its run", c.args, c.kept), func() bool {
			in, err := e.Get(task.DefaultNamespace, "x")
			return c.kept && err == nil && in.State == task.Succeeded || !c.kept && errors.Is(err, task.ErrNotFound)
		})
		_ = e.Close(context.Background())
	}
}
