package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFetchServerProfile(t *testing.T) {
	body := []byte("fake pprof body\x00\x01")
	var gotPath, gotSecs string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotSecs = r.URL.Path, r.URL.Query().Get("seconds")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "server.pprof")
	admin := strings.TrimPrefix(srv.URL, "http://")
	if err := fetchServerProfile(context.Background(), admin, 7, path); err != nil {
		t.Fatal(err)
	}
	if gotPath != "/debug/pprof/profile" || gotSecs != "7" {
		t.Fatalf("GET %s?seconds=%s", gotPath, gotSecs)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("file %q, %v", got, err)
	}
}

func TestFetchServerProfileError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "profiling disabled", http.StatusForbidden)
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "server.pprof")
	err := fetchServerProfile(context.Background(), strings.TrimPrefix(srv.URL, "http://"), 1, path)
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "profiling disabled") {
		t.Fatalf("err %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a failed fetch left %s (%v)", path, err)
	}
}

// TestLoadgenProfiles runs the command on a small core workload with -cpuprofile and
// -memprofile and checks that both files are written.
func TestLoadgenProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mem.pprof")
	var stdout, stderr bytes.Buffer
	if rc := mainErr([]string{"-target", "core", "-tasks", "1000", "-cpuprofile", cpu, "-memprofile", mem}, &stdout, &stderr); rc != 0 {
		t.Fatalf("exit %d\n%s%s", rc, stdout.String(), stderr.String())
	}
	for _, p := range []string{cpu, mem} {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", p, err)
		}
	}
}
