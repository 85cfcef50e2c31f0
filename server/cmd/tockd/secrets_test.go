package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tock-sched/tock/server/internal/testpki"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// TestMain runs the test binary as tockd itself when TOCKD_TEST_AS_MAIN is set, so that
// a test can start a real tockd process with secrets on its command line.
func TestMain(m *testing.M) {
	if os.Getenv("TOCKD_TEST_AS_MAIN") == "1" {
		os.Args = append([]string{"tockd"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSecretsNotServed starts a tockd process with -token, -webhook and -webhook-secret
// on its command line and reads every admin endpoint: none shows them (pprof's cmdline
// used to).
func TestSecretsNotServed(t *testing.T) {
	const tokenV, hookV, signV = "tok-SECRET-1", "hook-SECRET-2", "sign-SECRET-3"
	ctx, cancel := context.WithTimeout(context.Background(), tockdtest.Limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0",
		"-token", tokenV, "-webhook", "http://127.0.0.1:9/"+hookV, "-webhook-format", "feishu",
		"-webhook-secret", signV, "-log-level", "info")
	cmd.Env = append(os.Environ(), "TOCKD_TEST_AS_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	// The admin port's address is in the log line "tockd admin port" addr=...
	lines := bufio.NewScanner(stderr)
	var adminAddr string
	for adminAddr == "" && lines.Scan() {
		line := lines.Text()
		if strings.Contains(line, "tockd admin port") {
			if _, a, ok := strings.Cut(line, "addr="); ok {
				adminAddr = strings.Fields(a)[0]
			}
		}
		for _, secret := range []string{tokenV, hookV, signV} {
			if strings.Contains(line, secret) {
				t.Errorf("the log shows a secret: %s", line)
			}
		}
	}
	if adminAddr == "" {
		t.Fatalf("no admin port address in tockd's log: %v", lines.Err())
	}
	go io.Copy(io.Discard, stderr)
	hc := &http.Client{Timeout: tockdtest.Limit}
	// /healthz answers Server.Health: 200 once the client port serves (the admin port
	// starts first, and says 503 "not serving" until then).
	tockdtest.Eventually(t, "/healthz 200", func() bool {
		resp, err := hc.Get("http://" + adminAddr + "/healthz")
		if err != nil {
			t.Fatalf("GET /healthz: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/cmdline?debug=1", "/debug/pprof/",
		"/", "/metrics", "/healthz", "/debug/pprof/goroutine?debug=2", "/console/", "/console/tasks", "/console/types"} {
		resp, err := hc.Get("http://" + adminAddr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		for _, secret := range []string{tokenV, hookV, signV} {
			if strings.Contains(string(b), secret) {
				t.Errorf("GET %s (%d) shows the secret %q", path, resp.StatusCode, secret)
			}
		}
	}
}

// TestSecretFiles: every secret flag has a -file twin (and an environment variable);
// giving both is an error.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	file := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := parseConfig([]string{"-token-file", file("tok", "t0k\n"), "-admin-token-file", file("adm", "adm1n"),
		"-webhook-file", file("hook", "http://h/x\n"), "-webhook-format", "feishu",
		"-webhook-secret-file", file("sign", "s1gn"), "-etcd", "https://e:2379", "-etcd-user", "tock",
		"-etcd-password-file", file("pw", "pw\n")}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.server.Token != "t0k" || c.obs.adminToken != "adm1n" || c.obs.webhooks != "http://h/x" ||
		c.obs.webhookSecret != "s1gn" || c.store.Username != "tock" || c.store.Password != "pw" {
		t.Fatalf("secrets from files: token %q admin %q webhook %q sign %q etcd %q/%q", c.server.Token, c.obs.adminToken,
			c.obs.webhooks, c.obs.webhookSecret, c.store.Username, c.store.Password)
	}
	c, err = parseConfig(nil, env(map[string]string{"TOCKD_ADMIN_TOKEN_FILE": file("adm2", "fromenv"), "TOCKD_TOKEN": "envtok"}))
	if err != nil || c.obs.adminToken != "fromenv" || c.server.Token != "envtok" {
		t.Fatalf("secrets from the environment: %q %q, %v", c.obs.adminToken, c.server.Token, err)
	}
	for _, bad := range [][]string{
		{"-token", "x", "-token-file", file("t2", "y")},
		{"-token-file", filepath.Join(dir, "missing")},
		{"-token-file", file("empty", "\n")},
	} {
		if _, err := parseConfig(bad, env(nil)); err == nil || !strings.Contains(err.Error(), "-token") {
			t.Errorf("%v: %v, want an error naming -token", bad, err)
		}
	}
}

// TestEtcdAccessFlags: -etcd takes TLS files and a user; they make no sense without it.
func TestEtcdAccessFlags(t *testing.T) {
	pki := testpki.New(t).CAFile
	c, err := parseConfig([]string{"-etcd", "https://127.0.0.1:2379", "-etcd-ca", pki}, env(nil))
	if err != nil || c.store.TLS == nil || c.store.TLS.RootCAs == nil {
		t.Fatalf("-etcd-ca: %+v, %v", c.store, err)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"-data-dir", "d", "-etcd-user", "u", "-etcd-password", "p"}, "for -etcd"},
		{[]string{"-etcd", "e:1", "-etcd-user", "u"}, "-etcd-password"},
		{[]string{"-etcd", "e:1", "-etcd-cert", "c.pem"}, "-etcd-key"},
		{[]string{"-etcd", "e:1", "-etcd-ca", filepath.Join(t.TempDir(), "none.pem")}, "-etcd-ca"},
	} {
		if _, err := parseConfig(bad.args, env(nil)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want an error naming %q", bad.args, err, bad.want)
		}
	}
}

// getFromAdminPort starts srv's admin port as the binary does (no token) and answers
// the status and body of a GET of path on it.
func getFromAdminPort(t *testing.T, srv *tockd.Server, path string) (int, string) {
	t.Helper()
	o := observeConfig{adminAddr: "127.0.0.1:0"}
	adm, addr, err := o.startAdmin(srv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Shutdown(context.Background())
	resp, err := (&http.Client{Timeout: tockdtest.Limit}).Get("http://" + addr.String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestHealthzIsWired: the admin port's /healthz answers the server's Health: 503 with
// the reason while the client port does not serve.
func TestHealthzIsWired(t *testing.T) {
	srv, err := tockd.New()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	status, b := getFromAdminPort(t, srv, "/healthz")
	if status != http.StatusServiceUnavailable || !strings.Contains(b, "not serving") {
		t.Fatalf("/healthz of a server that does not serve: %d %q, want 503 not serving", status, b)
	}
}

// TestConsoleIsWired: the admin port serves the web console of its tockd, read-only
// without -admin-token.
func TestConsoleIsWired(t *testing.T) {
	srv, err := tockd.New(tockd.WithNodeName("wired-node"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	status, b := getFromAdminPort(t, srv, "/console/")
	if status != http.StatusOK || !strings.Contains(b, "node wired-node") || !strings.Contains(b, "read-only") {
		t.Fatalf("/console/: %d %.300q, want this node's read-only overview", status, b)
	}
}
