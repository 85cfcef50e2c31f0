package admin

import (
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestCmdlineNotServed: /debug/pprof/cmdline would print the process's command line, and
// with it every secret passed as a flag (-token, -webhook, -webhook-secret). No admin
// endpoint serves it.
func TestCmdlineNotServed(t *testing.T) {
	_, base := start(t, Options{Snapshot: fixedStats})
	args := strings.Join(os.Args[1:], "\x00")
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/cmdline?debug=1", "/debug/pprof/", "/"} {
		code, body, _ := get(t, base+path)
		if path == "/debug/pprof/cmdline" || path == "/debug/pprof/cmdline?debug=1" {
			if code != http.StatusNotFound {
				t.Errorf("GET %s: %d, want 404", path, code)
			}
		}
		if args != "" && strings.Contains(body, args) {
			t.Errorf("GET %s: the body holds the command line %q:\n%.300s", path, args, body)
		}
		for _, a := range os.Args[1:] {
			if len(a) > 8 && strings.Contains(body, a) {
				t.Errorf("GET %s: the body holds the argument %q", path, a)
			}
		}
	}
}

// TestAdminToken: with Options.Token every endpoint but /healthz wants
// "Authorization: Bearer <token>"; without it, or with a wrong one, 401.
func TestAdminToken(t *testing.T) {
	const token = "s3cret-admin"
	_, base := start(t, Options{Snapshot: fixedStats, Token: token})
	do := func(path, auth string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("GET %s: 401 without WWW-Authenticate", path)
		}
		return resp.StatusCode
	}
	for _, path := range []string{"/", "/metrics", "/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/symbol"} {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token} {
			if code := do(path, auth); code != http.StatusUnauthorized {
				t.Errorf("GET %s with Authorization %q: %d, want 401", path, auth, code)
			}
		}
		if code := do(path, "Bearer "+token); code != http.StatusOK {
			t.Errorf("GET %s with the token: %d, want 200", path, code)
		}
	}
	if code := do("/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz without the token: %d, want 200 (it stays open)", code)
	}
}
