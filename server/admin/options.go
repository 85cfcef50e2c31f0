package admin

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tock-sched/tock/server/tockd"
)

// Defaults of Options; a zero field takes its default.
const (
	// DefaultAddr is loopback only: metrics and pprof expose the process's internals, so
	// listening on other interfaces is a deliberate choice (-admin-addr :7451).
	// 7451 sits beside tockd's own port, 7450.
	DefaultAddr = "127.0.0.1:7451"
	// DefaultReadHeaderTimeout bounds how long a client may take to send its request
	// headers (slowloris protection).
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds reading a whole request; admin requests have no body to
	// speak of (pprof's symbol endpoint takes a short POST).
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds handling and writing one response. It must exceed
	// MetricsTimeout. Profiles are not cut off by it: /debug/pprof/profile?seconds=N and
	// /debug/pprof/trace?seconds=N extend their own write deadline by N.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout closes keep-alive connections idle this long (a scraper that
	// keeps its connection between 15 s scrapes keeps it).
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes is the largest request header accepted; admin requests carry
	// a handful of short headers.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMetricsTimeout bounds one /metrics response (gathering plus writing); a
	// scrape that takes longer is answered 503.
	DefaultMetricsTimeout = 10 * time.Second
	// DefaultMetricsMaxInFlight is how many /metrics requests are served at once; more
	// are answered 503 at once rather than queued. Each takes one Stats snapshot.
	DefaultMetricsMaxInFlight = 4

	// DefaultConsoleSampleInterval is how often the console samples Stats for its charts:
	// each sample costs what one /metrics scrape's snapshot does.
	DefaultConsoleSampleInterval = 5 * time.Second
	// MinConsoleSampleInterval is the shortest ConsoleSampleInterval: sampling is a
	// Stats snapshot, a pass over the engine's shards, not something to spin on.
	MinConsoleSampleInterval = 10 * time.Millisecond
	// DefaultConsoleSamples is how many samples the charts keep: 121 at 5 s draw the
	// last 10 minutes (120 intervals), in about 40 KiB.
	DefaultConsoleSamples = 121
	// DefaultConsolePageSize is how many tasks or dead letters a console page lists.
	DefaultConsolePageSize = 50
	// MaxConsolePageSize is the largest ConsolePageSize: the most the engine's List and
	// DeadLetters return at once.
	MaxConsolePageSize = 1000
	// DefaultConsoleSessionTTL is how long a console login lasts.
	DefaultConsoleSessionTTL = 12 * time.Hour
	// DefaultConsoleLoginFailures is how many failed console logins a minute are allowed,
	// from all clients together, before the form refuses every login for the rest of
	// that minute: a guesser gets 14,400 tries a day, against a token of 128 bits or more.
	DefaultConsoleLoginFailures = 10
)

// Options configures a Server. Snapshot is required; every other zero field selects its
// default. A negative duration or count is an error.
type Options struct {
	// Addr is the TCP address ListenAndServe listens on (default DefaultAddr).
	Addr string

	// Snapshot returns the server's statistics; /metrics calls it once per scrape
	// (typically (*tockd.Server).Stats). Required.
	Snapshot func() tockd.Stats

	// Healthy reports whether the process is fit to serve: /healthz answers 200 "ok" when
	// it returns nil and 503 with the error's text otherwise. It is called once per
	// /healthz request, on that request's goroutine, so it must not block for long.
	// Nil: always healthy (the process answers, so it is up).
	Healthy func() error

	// Token, if not empty, is the bearer token every request but /healthz must carry
	// ("Authorization: Bearer <Token>", compared in constant time): /metrics, /debug/pprof/
	// and the index answer 401 without it. /healthz stays open so that a load balancer's
	// probe needs no secret; it tells only "ok" or why not. Prometheus sends it with
	// authorization: {credentials: ...} (or credentials_file) in the scrape config.
	// Default: none, and the port is as open as its address (loopback by default).
	Token string

	// Logger receives the HTTP server's errors (for example a failed write of a
	// response) and metric-gathering errors, at Warn. Nil: discard.
	Logger *slog.Logger

	ReadHeaderTimeout time.Duration // default DefaultReadHeaderTimeout
	ReadTimeout       time.Duration // default DefaultReadTimeout
	WriteTimeout      time.Duration // default DefaultWriteTimeout
	IdleTimeout       time.Duration // default DefaultIdleTimeout
	MaxHeaderBytes    int           // default DefaultMaxHeaderBytes

	MetricsTimeout     time.Duration // default DefaultMetricsTimeout
	MetricsMaxInFlight int           // default DefaultMetricsMaxInFlight

	// Console, if set, serves the operators' web console at /console/ from it (a
	// *tockd.Server): read-only and open without a Token; with one, behind a login, and
	// its actions (requeue, purge, pause, resume) need the login's session and CSRF token.
	// Nil: no console.
	Console ConsoleSource

	ConsoleSampleInterval time.Duration // at least MinConsoleSampleInterval; default DefaultConsoleSampleInterval
	ConsoleSamples        int           // at least 2; default DefaultConsoleSamples
	ConsolePageSize       int           // at most MaxConsolePageSize; default DefaultConsolePageSize
	ConsoleSessionTTL     time.Duration // default DefaultConsoleSessionTTL
	ConsoleLoginFailures  int           // failed logins a minute before the form locks; default DefaultConsoleLoginFailures
}

// Option sets a field of Options.
type Option func(*Options)

// WithOptions replaces the whole Options struct (fields left zero take their defaults).
func WithOptions(o Options) Option { return func(dst *Options) { *dst = o } }

// WithAddr sets Options.Addr.
func WithAddr(addr string) Option { return func(o *Options) { o.Addr = addr } }

// WithSnapshot sets Options.Snapshot.
func WithSnapshot(f func() tockd.Stats) Option { return func(o *Options) { o.Snapshot = f } }

// WithHealthy sets Options.Healthy.
func WithHealthy(f func() error) Option { return func(o *Options) { o.Healthy = f } }

// WithToken sets Options.Token.
func WithToken(token string) Option { return func(o *Options) { o.Token = token } }

// WithLogger sets Options.Logger.
func WithLogger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }

// WithConsole sets Options.Console.
func WithConsole(src ConsoleSource) Option { return func(o *Options) { o.Console = src } }

// WithReadHeaderTimeout sets Options.ReadHeaderTimeout.
func WithReadHeaderTimeout(d time.Duration) Option {
	return func(o *Options) { o.ReadHeaderTimeout = d }
}

// WithReadTimeout sets Options.ReadTimeout.
func WithReadTimeout(d time.Duration) Option { return func(o *Options) { o.ReadTimeout = d } }

// WithWriteTimeout sets Options.WriteTimeout.
func WithWriteTimeout(d time.Duration) Option { return func(o *Options) { o.WriteTimeout = d } }

// WithIdleTimeout sets Options.IdleTimeout.
func WithIdleTimeout(d time.Duration) Option { return func(o *Options) { o.IdleTimeout = d } }

// WithMaxHeaderBytes sets Options.MaxHeaderBytes.
func WithMaxHeaderBytes(n int) Option { return func(o *Options) { o.MaxHeaderBytes = n } }

// WithMetricsTimeout sets Options.MetricsTimeout.
func WithMetricsTimeout(d time.Duration) Option { return func(o *Options) { o.MetricsTimeout = d } }

// WithMetricsMaxInFlight sets Options.MetricsMaxInFlight.
func WithMetricsMaxInFlight(n int) Option { return func(o *Options) { o.MetricsMaxInFlight = n } }

// setDefaults fills in every zero field but Snapshot.
func (o *Options) setDefaults() {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MetricsTimeout == 0 {
		o.MetricsTimeout = DefaultMetricsTimeout
	}
	if o.MetricsMaxInFlight == 0 {
		o.MetricsMaxInFlight = DefaultMetricsMaxInFlight
	}
	if o.ConsoleSampleInterval == 0 {
		o.ConsoleSampleInterval = DefaultConsoleSampleInterval
	}
	if o.ConsoleSamples == 0 {
		o.ConsoleSamples = DefaultConsoleSamples
	}
	if o.ConsolePageSize == 0 {
		o.ConsolePageSize = DefaultConsolePageSize
	}
	if o.ConsoleSessionTTL == 0 {
		o.ConsoleSessionTTL = DefaultConsoleSessionTTL
	}
	if o.ConsoleLoginFailures == 0 {
		o.ConsoleLoginFailures = DefaultConsoleLoginFailures
	}
}

// validate names the first bad field; it runs after setDefaults.
func (o *Options) validate() error {
	bad := func(field string, why string) error {
		return fmt.Errorf("%w: %s %s", ErrInvalidOptions, field, why)
	}
	switch {
	case o.Snapshot == nil:
		return bad("Snapshot", "is required")
	case o.ReadHeaderTimeout < 0:
		return bad("ReadHeaderTimeout", fmt.Sprintf("is negative (%v)", o.ReadHeaderTimeout))
	case o.ReadTimeout < 0:
		return bad("ReadTimeout", fmt.Sprintf("is negative (%v)", o.ReadTimeout))
	case o.WriteTimeout < 0:
		return bad("WriteTimeout", fmt.Sprintf("is negative (%v)", o.WriteTimeout))
	case o.IdleTimeout < 0:
		return bad("IdleTimeout", fmt.Sprintf("is negative (%v)", o.IdleTimeout))
	case o.MaxHeaderBytes < 0:
		return bad("MaxHeaderBytes", fmt.Sprintf("is negative (%d)", o.MaxHeaderBytes))
	case o.MetricsTimeout < 0:
		return bad("MetricsTimeout", fmt.Sprintf("is negative (%v)", o.MetricsTimeout))
	case o.WriteTimeout <= o.MetricsTimeout:
		return bad("WriteTimeout", fmt.Sprintf("(%v) must exceed MetricsTimeout (%v), or a slow scrape is cut off instead of answered 503", o.WriteTimeout, o.MetricsTimeout))
	case strings.ContainsFunc(o.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return bad("Token", "has a space or control character (it travels in an HTTP header)")
	case o.MetricsMaxInFlight < 0:
		return bad("MetricsMaxInFlight", fmt.Sprintf("is negative (%d)", o.MetricsMaxInFlight))
	case o.ConsoleSampleInterval < MinConsoleSampleInterval:
		return bad("ConsoleSampleInterval", fmt.Sprintf("(%v) is under %v", o.ConsoleSampleInterval, MinConsoleSampleInterval))
	case o.ConsoleSamples < 2:
		return bad("ConsoleSamples", fmt.Sprintf("(%d) must be at least 2: a chart needs two samples for one interval", o.ConsoleSamples))
	case o.ConsolePageSize < 0 || o.ConsolePageSize > MaxConsolePageSize:
		return bad("ConsolePageSize", fmt.Sprintf("(%d) is outside [1, %d]", o.ConsolePageSize, MaxConsolePageSize))
	case o.ConsoleSessionTTL < 0:
		return bad("ConsoleSessionTTL", fmt.Sprintf("is negative (%v)", o.ConsoleSessionTTL))
	case o.ConsoleLoginFailures < 0:
		return bad("ConsoleLoginFailures", fmt.Sprintf("is negative (%d)", o.ConsoleLoginFailures))
	}
	return nil
}
