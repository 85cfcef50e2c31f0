package admin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

func TestNewRejectsBadOptions(t *testing.T) {
	ok := func() tockd.Stats { return tockd.Stats{} }
	for _, tc := range []struct {
		field string
		opts  Options
	}{
		{"Snapshot", Options{}},
		{"ReadHeaderTimeout", Options{Snapshot: ok, ReadHeaderTimeout: -1}},
		{"ReadTimeout", Options{Snapshot: ok, ReadTimeout: -1}},
		{"WriteTimeout", Options{Snapshot: ok, WriteTimeout: -time.Second}},
		{"IdleTimeout", Options{Snapshot: ok, IdleTimeout: -1}},
		{"MaxHeaderBytes", Options{Snapshot: ok, MaxHeaderBytes: -1}},
		{"MetricsTimeout", Options{Snapshot: ok, MetricsTimeout: -1}},
		{"MetricsMaxInFlight", Options{Snapshot: ok, MetricsMaxInFlight: -1}},
		{"Token", Options{Snapshot: ok, Token: "two words"}},
		{"Token", Options{Snapshot: ok, Token: "line\nbreak"}},
		{"WriteTimeout", Options{Snapshot: ok, WriteTimeout: time.Second, MetricsTimeout: time.Second}},
		{"ConsoleSampleInterval", Options{Snapshot: ok, ConsoleSampleInterval: -1}},
		{"ConsoleSampleInterval", Options{Snapshot: ok, ConsoleSampleInterval: time.Millisecond}},
		{"ConsoleSamples", Options{Snapshot: ok, ConsoleSamples: 1}},
		{"ConsolePageSize", Options{Snapshot: ok, ConsolePageSize: MaxConsolePageSize + 1}},
		{"ConsoleSessionTTL", Options{Snapshot: ok, ConsoleSessionTTL: -time.Hour}},
		{"ConsoleLoginFailures", Options{Snapshot: ok, ConsoleLoginFailures: -1}},
	} {
		_, err := New(WithOptions(tc.opts))
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New with bad %s: %v, want ErrInvalidOptions naming the field", tc.field, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	s, err := New(WithSnapshot(fixedStats))
	if err != nil {
		t.Fatal(err)
	}
	if s.opts.Addr != DefaultAddr || s.http.ReadHeaderTimeout != DefaultReadHeaderTimeout ||
		s.http.WriteTimeout != DefaultWriteTimeout || s.http.IdleTimeout != DefaultIdleTimeout ||
		s.http.ReadTimeout != DefaultReadTimeout || s.http.MaxHeaderBytes != DefaultMaxHeaderBytes {
		t.Errorf("defaults not applied: addr %q, http.Server %+v", s.opts.Addr, s.http)
	}
	if s.Addr() != nil {
		t.Errorf("Addr before Serve = %v, want nil", s.Addr())
	}
}

func TestHealthz(t *testing.T) {
	sick := make(chan error, 1)
	healthy := func() error {
		select {
		case err := <-sick:
			return err
		default:
			return nil
		}
	}
	_, base := start(t, Options{Snapshot: fixedStats, Healthy: healthy})

	code, body, _ := get(t, base+"/healthz")
	if code != http.StatusOK || body != "ok\n" {
		t.Errorf("healthy: %d %q, want 200 \"ok\\n\"", code, body)
	}
	sick <- errors.New("store: etcd unreachable")
	code, body, _ = get(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "store: etcd unreachable") {
		t.Errorf("unhealthy: %d %q, want 503 with the error", code, body)
	}
	resp, err := client.Post(base+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d, want 405", resp.StatusCode)
	}
}

func TestHealthzWithoutCheck(t *testing.T) {
	_, base := start(t, Options{Snapshot: fixedStats})
	if code, body, _ := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("no Healthy: %d %q, want 200 \"ok\\n\"", code, body)
	}
}

func TestPprof(t *testing.T) {
	_, base := start(t, Options{Snapshot: fixedStats})
	code, body, _ := get(t, base+"/debug/pprof/")
	if code != http.StatusOK || !strings.Contains(body, "goroutine") || !strings.Contains(body, "heap") {
		t.Errorf("/debug/pprof/: %d, body without the profile list:\n%.500s", code, body)
	}
	code, body, hdr := get(t, base+"/debug/pprof/goroutine?debug=1")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") ||
		!strings.Contains(body, "goroutine profile: total") {
		t.Errorf("/debug/pprof/goroutine?debug=1: %d %q:\n%.500s", code, hdr.Get("Content-Type"), body)
	}
	// A one-second CPU profile: gzipped protobuf.
	if code, body, _ := get(t, base+"/debug/pprof/profile?seconds=1"); code != http.StatusOK || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("/debug/pprof/profile?seconds=1: %d, %d bytes, want 200 and a gzipped profile", code, len(body))
	}
}

// registerOnDefaultMux registers a test path on http.DefaultServeMux once per process
// (a second registration panics, and -count runs the test again).
var registerOnDefaultMux sync.Once

func TestIndexAndNotFound(t *testing.T) {
	_, base := start(t, Options{Snapshot: fixedStats})
	code, body, _ := get(t, base+"/")
	if code != http.StatusOK {
		t.Fatalf("/: %d", code)
	}
	for _, e := range endpoints {
		if !strings.Contains(body, e.path) {
			t.Errorf("/ does not list %s:\n%s", e.path, body)
		}
	}
	if code, _, _ := get(t, base+"/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d, want 404", code)
	}
	// The private mux serves no handler registered on http.DefaultServeMux.
	registerOnDefaultMux.Do(func() {
		http.DefaultServeMux.HandleFunc("/admin-test-default-mux", func(http.ResponseWriter, *http.Request) {})
	})
	if code, _, _ := get(t, base+"/admin-test-default-mux"); code != http.StatusNotFound {
		t.Errorf("a DefaultServeMux path answered %d, want 404", code)
	}
}

func TestListenAndServe(t *testing.T) {
	s, err := New(WithAddr("127.0.0.1:0"), WithSnapshot(fixedStats))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.ListenAndServe() }()
	// Addr is set once Serve has the listener, an event nothing announces.
	tockdtest.Eventually(t, "ListenAndServe sets Addr", func() bool { return s.Addr() != nil })
	if code, _, _ := get(t, "http://"+s.Addr().String()+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("ListenAndServe after Shutdown: %v, want ErrServerClosed", err)
	}

	s2, err := New(WithAddr("127.0.0.1:99999"), WithSnapshot(fixedStats))
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.ListenAndServe(); err == nil {
		t.Error("ListenAndServe on port 99999 succeeded")
	}
}

// TestShutdown: Shutdown returns with no goroutine left, a second one and a later Serve
// say ErrServerClosed.
func TestShutdown(t *testing.T) {
	s, err := New(WithSnapshot(fixedStats))
	if err != nil {
		t.Fatal(err)
	}
	base, served := serve(t, s)
	scrape(t, base)
	get(t, base+"/debug/pprof/goroutine?debug=1")

	ctx, cancel := context.WithTimeout(context.Background(), tockdtest.Limit)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v, want ErrServerClosed", err)
	}
	if err := s.Shutdown(ctx); !errors.Is(err, ErrServerClosed) {
		t.Errorf("second Shutdown: %v, want ErrServerClosed", err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(ln2); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v, want ErrServerClosed", err)
	}
	if _, err := net.Dial("tcp", ln2.Addr().String()); err == nil {
		t.Error("Serve after Shutdown left its listener open")
	}
	tockdtest.VerifyNone(t)
}

// TestShutdownForcesStuckRequests: a request still running when Shutdown's context ends
// has its connection closed; Shutdown returns the context's error after Serve returned,
// and once the handler finishes nothing is left.
func TestShutdownForcesStuckRequests(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	s, err := New(WithSnapshot(fixedStats), WithHealthy(func() error {
		close(entered)
		<-release
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	base, served := serve(t, s)
	reqDone := make(chan error, 1)
	go func() {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		reqDone <- err
	}()
	<-entered

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // already over: Shutdown must force the stuck connection closed
	if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown with a stuck request: %v, want context.Canceled", err)
	}
	// Serve has returned by now (Shutdown waits for it), but the goroutine above may not
	// yet have sent its result: wait for it, boundedly.
	select {
	case err := <-served:
		if !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v, want ErrServerClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Serve had not returned 5 s after Shutdown did")
	}
	if err := <-reqDone; err == nil {
		t.Error("the stuck request got a response after its connection was closed")
	}
	close(release)
	tockdtest.VerifyNone(t) // retries until the released handler's goroutine ends
}

// TestOptionSetters: each WithX sets its own field (WithOptions is what every other
// test builds with).
func TestOptionSetters(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	var o Options
	for _, opt := range []Option{WithAddr("127.0.0.1:1"), WithSnapshot(fixedStats), WithHealthy(func() error { return nil }),
		WithToken("tok"), WithLogger(logger), WithReadHeaderTimeout(1), WithReadTimeout(2), WithWriteTimeout(3),
		WithIdleTimeout(4), WithMaxHeaderBytes(5), WithMetricsTimeout(6), WithMetricsMaxInFlight(7)} {
		opt(&o)
	}
	if o.Snapshot == nil || o.Healthy == nil {
		t.Fatalf("WithSnapshot or WithHealthy left its field nil: %+v", o)
	}
	o.Snapshot, o.Healthy = nil, nil
	want := Options{Addr: "127.0.0.1:1", Token: "tok", Logger: logger, ReadHeaderTimeout: 1, ReadTimeout: 2,
		WriteTimeout: 3, IdleTimeout: 4, MaxHeaderBytes: 5, MetricsTimeout: 6, MetricsMaxInFlight: 7}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("options set field by field = %+v, want %+v", o, want)
	}
}
