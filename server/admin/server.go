package admin

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is the admin HTTP server: /metrics, /debug/pprof/, /healthz, the console at
// /console/ and an index at / (with Options.Token, all but /healthz behind a bearer
// token; the console behind its login, see the package doc).
// Create it with New, run it with Serve or ListenAndServe, stop it with Shutdown. All
// methods are safe for concurrent use.
type Server struct {
	opts    Options
	log     *slog.Logger
	reg     *prometheus.Registry
	handler http.Handler
	http    *http.Server
	console *console // nil without Options.Console

	mu       sync.Mutex
	sampling context.CancelFunc // guarded by mu: stops the console's sampler; nil until the first Serve
	addr     net.Addr           // guarded by mu: the first listener Serve was given
	closed   bool               // guarded by mu: Shutdown was called
	serving  sync.WaitGroup     // Serve calls in progress; Add under mu while !closed
	sampled  sync.WaitGroup     // the console's sampler; Add under mu while !closed
}

// New checks opts, fills in defaults and returns a server that is not yet listening.
// Bad options give an error wrapping ErrInvalidOptions that names the field.
func New(options ...Option) (*Server, error) {
	var opts Options
	for _, opt := range options {
		opt(&opts)
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, reg: NewRegistry(opts.Snapshot)}
	if opts.Console != nil {
		s.console = newConsole(&s.opts)
	}
	s.handler = s.routes()
	s.http = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		ReadTimeout:       opts.ReadTimeout,
		WriteTimeout:      opts.WriteTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    opts.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// endpoints is what / lists, in order.
var endpoints = []struct{ path, what string }{
	{"/metrics", "Prometheus metrics (tock_*, go_*, process_*)"},
	{"/healthz", `health: 200 "ok", or 503 and the reason`},
	{"/debug/pprof/", "pprof profiles (go tool pprof http://ADDR/debug/pprof/profile); no cmdline"},
}

// routes builds the private mux. net/http/pprof's handlers are mounted on it one by one:
// the package also registers itself on http.DefaultServeMux when imported, but that mux
// is never served here. pprof's cmdline is not mounted (/debug/pprof/cmdline is 404: the
// index serves only runtime profiles by that path): the command line carries secrets
// (-token, -webhook, -webhook-secret). With Options.Token every route but /healthz is
// wrapped in the bearer check.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// InstrumentMetricHandler adds promhttp_metric_handler_requests_total and
	// _requests_in_flight, which tell a scrape that failed from one never made.
	mux.Handle("/metrics", promhttp.InstrumentMetricHandler(s.reg, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError, // a broken metric must not hide the rest
		Registry:            s.reg,                    // promhttp_metric_handler_errors_total
		MaxRequestsInFlight: s.opts.MetricsMaxInFlight,
		Timeout:             s.opts.MetricsTimeout,
	})))
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also serves /debug/pprof/{heap,goroutine,...}
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/{$}", s.index)
	var h http.Handler = mux
	if s.opts.Token != "" {
		h = s.requireToken(mux)
	}
	open := http.NewServeMux()
	open.HandleFunc("/healthz", s.healthz) // never behind the token
	open.HandleFunc("/debug/pprof/cmdline", http.NotFound)
	if s.console != nil {
		open.Handle(consolePrefix, s.console) // its own access rule: a login, not the bearer header
	}
	open.Handle("/", h)
	return open
}

// requireToken answers 401 to a request without "Authorization: Bearer <Options.Token>".
func (s *Server) requireToken(next http.Handler) http.Handler {
	want := []byte("Bearer " + s.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tockd admin"`)
			http.Error(w, "unauthorized: this admin port wants Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// index lists the endpoints, as plain text.
func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "tockd admin\n\n")
	for _, e := range endpoints {
		io.WriteString(w, e.path+"\t"+e.what+"\n")
	}
	if s.console != nil {
		io.WriteString(w, consolePrefix+"\tthe operators' web console\n")
	}
}

// healthz answers 200 "ok" when Options.Healthy returns nil, 503 with its error otherwise.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s.opts.Healthy != nil {
		if err := s.opts.Healthy(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, err.Error()+"\n")
			return
		}
	}
	io.WriteString(w, "ok\n")
}

// Handler returns the server's handler (the private mux), for mounting elsewhere or
// for tests without a socket.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry returns the private registry /metrics serves, so a caller can add collectors
// of its own (Register; names must not collide with tock_*, go_* or process_*).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Addr returns the address of the first listener Serve was given, or nil before that.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// ListenAndServe listens on Options.Addr and serves it (see Serve). A listen error
// (address in use, bad address) is returned at once.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// Serve serves HTTP on ln until Shutdown, then returns ErrServerClosed; any other error
// is the listener's. Serve closes ln when it returns. It may be called with several
// listeners at once.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	if s.addr == nil {
		s.addr = ln.Addr()
	}
	if s.console != nil && s.sampling == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.sampling = cancel
		s.sampled.Add(1)
		go func() {
			defer s.sampled.Done()
			sampleLoop(ctx, s.console.samples, s.opts.ConsoleSampleInterval, s.opts.Snapshot)
		}()
	}
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return ErrServerClosed
	}
	return err
}

// Shutdown stops the server: it closes every listener, closes idle connections, and
// waits for requests in progress to finish until ctx is done; then it closes the
// connections still open (a long pprof profile, say) and returns ctx's error. Either
// way every Serve has returned by the time Shutdown does; after a forced close the
// handlers still running see their connection fail and end. A second Shutdown returns
// ErrServerClosed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.closed = true
	if s.sampling != nil {
		s.sampling()
	}
	s.mu.Unlock()
	s.sampled.Wait()
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	s.serving.Wait() // the listeners are closed: each Serve is returning
	return err
}
