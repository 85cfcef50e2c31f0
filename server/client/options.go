package client

import (
	"crypto/tls"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/server/protocol"
)

// Defaults of Options; a zero field takes its default.
const (
	DefaultClientName       = "tock-go"
	DefaultDialTimeout      = 5 * time.Second
	DefaultMaxFrame         = protocol.MaxFrameLimit
	DefaultReconnectInitial = 50 * time.Millisecond
	DefaultReconnectMax     = 5 * time.Second
	DefaultRequestTimeout   = 30 * time.Second
	DefaultConcurrency      = 4
	DefaultMaxCarried       = 1 << 16
	DefaultOwnerRetries     = 1

	minMaxFrame = 1024
)

// Options configures a Client or a Worker. Zero fields take their defaults.
type Options struct {
	// Token is the shared secret sent in HELLO; required when the server has one.
	Token string
	// ClientName is sent in HELLO, for the server's logs; <= protocol.MaxNameLen bytes.
	ClientName string
	// DialTimeout bounds one dial plus handshake. Default 5 s.
	DialTimeout time.Duration
	// MaxFrame is the largest frame body accepted from the server. A server announcing a
	// larger max_frame is refused at the handshake (PROTOCOL.md: a client must accept at
	// least max_frame). Between 1024 and protocol.MaxFrameLimit; default the limit.
	MaxFrame int
	// ReconnectInitial and ReconnectMax bound the wait between failed (re)dials: the
	// first wait is ReconnectInitial, each next one doubles, up to ReconnectMax, and
	// never longer than the heartbeat interval the last WELCOME stated (so that a
	// cluster's next leader is found soon after its election). Defaults 50 ms and 5 s.
	ReconnectInitial time.Duration
	ReconnectMax     time.Duration
	// RequestTimeout bounds a call whose context has no deadline (and each write and
	// ACK of a Worker). Default 30 s.
	RequestTimeout time.Duration
	// Concurrency is a Worker's number of concurrent runs, and so its credits. Default 4.
	Concurrency int
	// BatchFires is the most runs a Worker asks for in one FIRES frame (SUBSCRIBE
	// batch_fires, PROTOCOL.md): the runs the server has ready for it at once then come
	// in one frame, decoded with the same few allocations whatever their number. At most
	// protocol.MaxFiresRuns; default min(Concurrency, protocol.MaxFiresRuns), which no
	// FIRES exceeds anyway (the server sends no more runs than credits); negative: none,
	// every run comes in a FIRE of its own.
	BatchFires int
	// MaxCarried bounds the outcomes a Worker keeps for the next connection because
	// their reports got no definite answer (a failover: PROTOCOL.md, CARRY); each costs
	// its Fire (a copy of its own, never its FIRES frame's buffer). Beyond it, an unsettled run is given up (OnAcked gets the reason) and its
	// task may run again. Default 65536; negative: none is kept (no carrying).
	MaxCarried int
	// OnAcked, if set, is called by a Worker once for each finished run, when its ACK
	// (result nil) or NACK (result the handler's error) is finally answered: ackErr nil
	// means a server took it (on the run's connection, or carried to the next leader);
	// otherwise it is the reason (UNKNOWN_RUN after the time to run, a carried outcome
	// refused, or, for a run still carried when Run returns, its last report's failure:
	// STALE_EPOCH, a lost connection). From a Worker goroutine; keep it cheap.
	OnAcked func(f *Fire, result, ackErr error)
	// CancelOnDisconnect makes a Worker end the contexts of the handlers still running
	// when their connection is lost, and drop their runs (the next leader runs them
	// again): the behaviour before ADOPT. Default false: a handler keeps running across
	// the loss and its run is handed in on the next connection (PROTOCOL.md, ADOPT), so
	// that the leader does not run it again; its outcome is reported there, or carried
	// (CARRY) if it returns with no connection; a run the leader refuses has its
	// handler's context ended and its outcome dropped (OnAcked is told). The time to run
	// still bounds a handler with or without a connection: its context ends TTR after its
	// FIRE arrived, and what it returns then (usually the context's error) is reported
	// like any outcome; the leader that took it over times it out its own TTR after the
	// takeover, and runs the task again if no report came by then. Batch handlers'
	// contexts always end with their connection.
	CancelOnDisconnect bool
	// OwnerRetries bounds how often one call, refused with NOT_OWNER (a node that does
	// not own the task's partition: PROTOCOL.md, "Routing"), refreshes the partition map
	// and sends the request again, to the owner the refusal names (or, naming none, the
	// one the refreshed map names) before it returns the refusal. A refusal executed
	// nothing, so sending again is safe; more than one retry only helps while ownership
	// moves twice within one call. Default 1; negative: none, a NOT_OWNER is returned at
	// once. At most maxRedirects (100).
	OwnerRetries int
	// TLS, if set, makes every connection TLS with this configuration (set RootCAs for
	// a private CA; ServerName defaults to the dialled host). Default: plain TCP.
	TLS *tls.Config
	// TracerProvider makes a Worker's tock.handle span of each traced run (one whose
	// FIRE carries a trace context: server/tracing), in which its HandlerFunc runs.
	// Default: the global provider, otel.GetTracerProvider() (a no-op until the program
	// sets one: the handler's context then still carries the run's trace context).
	TracerProvider trace.TracerProvider
}

// tracerProvider is Options.TracerProvider or the global one.
func (o *Options) tracerProvider() trace.TracerProvider {
	if o.TracerProvider != nil {
		return o.TracerProvider
	}
	return otel.GetTracerProvider()
}

// Option sets a field of Options.
type Option func(*Options)

// WithTracerProvider sets Options.TracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *Options) { o.TracerProvider = tp }
}

// WithToken sets Options.Token.
func WithToken(token string) Option { return func(o *Options) { o.Token = token } }

// WithClientName sets Options.ClientName.
func WithClientName(name string) Option { return func(o *Options) { o.ClientName = name } }

// WithOnAcked sets Options.OnAcked.
func WithOnAcked(fn func(f *Fire, result, ackErr error)) Option {
	return func(o *Options) { o.OnAcked = fn }
}

// WithTLS sets Options.TLS.
func WithTLS(c *tls.Config) Option { return func(o *Options) { o.TLS = c } }

// WithDialTimeout sets Options.DialTimeout.
func WithDialTimeout(d time.Duration) Option { return func(o *Options) { o.DialTimeout = d } }

// WithMaxFrame sets Options.MaxFrame.
func WithMaxFrame(n int) Option { return func(o *Options) { o.MaxFrame = n } }

// WithReconnectBackoff sets Options.ReconnectInitial and ReconnectMax.
func WithReconnectBackoff(initial, max time.Duration) Option {
	return func(o *Options) { o.ReconnectInitial, o.ReconnectMax = initial, max }
}

// WithRequestTimeout sets Options.RequestTimeout.
func WithRequestTimeout(d time.Duration) Option { return func(o *Options) { o.RequestTimeout = d } }

// WithMaxCarried sets Options.MaxCarried.
func WithMaxCarried(n int) Option { return func(o *Options) { o.MaxCarried = n } }

// WithBatchFires sets Options.BatchFires.
func WithBatchFires(n int) Option { return func(o *Options) { o.BatchFires = n } }

// WithCancelOnDisconnect sets Options.CancelOnDisconnect.
func WithCancelOnDisconnect(cancel bool) Option {
	return func(o *Options) { o.CancelOnDisconnect = cancel }
}

// WithOwnerRetries sets Options.OwnerRetries.
func WithOwnerRetries(n int) Option { return func(o *Options) { o.OwnerRetries = n } }

// WithConcurrency sets Options.Concurrency.
func WithConcurrency(n int) Option { return func(o *Options) { o.Concurrency = n } }

// newOptions applies opts over the defaults and validates the result.
func newOptions(opts []Option) (Options, error) {
	var o Options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	o.setDefaults()
	return o, o.validate()
}

func (o *Options) setDefaults() {
	if o.ClientName == "" {
		o.ClientName = DefaultClientName
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxFrame == 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.ReconnectInitial == 0 {
		o.ReconnectInitial = DefaultReconnectInitial
	}
	if o.ReconnectMax == 0 {
		o.ReconnectMax = max(DefaultReconnectMax, o.ReconnectInitial)
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxCarried == 0 {
		o.MaxCarried = DefaultMaxCarried
	}
	if o.BatchFires == 0 {
		o.BatchFires = min(o.Concurrency, protocol.MaxFiresRuns)
	}
	if o.OwnerRetries == 0 {
		o.OwnerRetries = DefaultOwnerRetries
	}
}

// validate checks the fields after setDefaults and names the first bad one.
func (o *Options) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
	switch {
	case len(o.Token) > protocol.MaxTokenLen:
		return bad("Token of %d bytes exceeds %d", len(o.Token), protocol.MaxTokenLen)
	case len(o.ClientName) > protocol.MaxNameLen:
		return bad("ClientName of %d bytes exceeds %d", len(o.ClientName), protocol.MaxNameLen)
	case o.DialTimeout < 0:
		return bad("DialTimeout %v is negative", o.DialTimeout)
	case o.MaxFrame < minMaxFrame || o.MaxFrame > protocol.MaxFrameLimit:
		return bad("MaxFrame %d outside [%d, %d]", o.MaxFrame, minMaxFrame, protocol.MaxFrameLimit)
	case o.ReconnectInitial < 0:
		return bad("ReconnectInitial %v is negative", o.ReconnectInitial)
	case o.ReconnectMax < o.ReconnectInitial:
		return bad("ReconnectMax %v is below ReconnectInitial %v", o.ReconnectMax, o.ReconnectInitial)
	case o.RequestTimeout < 0:
		return bad("RequestTimeout %v is negative", o.RequestTimeout)
	case o.Concurrency < 1 || o.Concurrency > 1<<20:
		return bad("Concurrency %d outside [1, %d]", o.Concurrency, 1<<20)
	case o.BatchFires > protocol.MaxFiresRuns:
		return bad("BatchFires %d exceeds %d", o.BatchFires, protocol.MaxFiresRuns)
	case o.OwnerRetries > maxRedirects:
		return bad("OwnerRetries %d exceeds %d", o.OwnerRetries, maxRedirects)
	}
	return nil
}

// backoff returns the wait after the n-th consecutive failure (n >= 1).
func (o *Options) backoff(n int) time.Duration {
	d := o.ReconnectInitial
	for i := 1; i < n && d < o.ReconnectMax; i++ {
		d *= 2
	}
	return min(d, o.ReconnectMax)
}
