package tockd

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/notify"
	"github.com/tock-sched/tock/server/partition"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/store"
)

// Defaults of Options; a zero field takes its default.
const (
	DefaultAddr              = "127.0.0.1:7450"
	DefaultMaxConns          = 1024
	DefaultMaxFrame          = protocol.DefaultMaxFrame // 1 MiB
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultHandshakeTimeout  = 5 * time.Second
	DefaultWriteTimeout      = 10 * time.Second
	DefaultMaxPendingPerConn = 1024
	// DefaultMaxQueuedReplyBytes is 4 MiB (or MaxFrame, if larger).
	DefaultMaxQueuedReplyBytes = 4 << 20
	DefaultTTR                 = 30 * time.Second
	DefaultMaxWaitingRuns      = 1 << 20
	// DefaultMaxWaitingRunsPerType is a quarter of DefaultMaxWaitingRuns.
	DefaultMaxWaitingRunsPerType = 1 << 18
	DefaultMaxHelloFrame         = 4 << 10
	// DefaultMaxFiresRuns is the most runs a FIRES may carry (protocol.MaxFiresRuns).
	DefaultMaxFiresRuns  = protocol.MaxFiresRuns
	DefaultMaxHandshakes = 128
	// DefaultHeartbeat is the heartbeat interval WELCOME states without a Store; with
	// one, the default is a quarter of the store's session TTL.
	DefaultHeartbeat = 5 * time.Second
	// DefaultCarryGrace is how long a new leader holds back the runs it loaded, waiting
	// for its workers' carried outcomes (Options.CarryGrace).
	DefaultCarryGrace = 1500 * time.Millisecond
	// DefaultCarryHoldMax caps a takeover's hold however long CARRY frames keep arriving
	// (Options.CarryHoldMax).
	DefaultCarryHoldMax = 4 * time.Second
	// DefaultReconnectGrace is how long the runs in flight on a closed worker connection
	// wait for that worker to reconnect and carry their outcomes (Options.ReconnectGrace).
	DefaultReconnectGrace = 2 * time.Second

	// minMaxHelloFrame is the smallest MaxHelloFrame accepted: the largest valid HELLO
	// (a 128-byte name, a 1024-byte token, the keys) is about 1.2 KiB.
	minMaxHelloFrame = 2 << 10

	// minMaxFrame is the smallest MaxFrame accepted: WELCOME and every ERROR must fit,
	// and every task's snapshot once its payload is left out and its texts cut (every
	// other field of a task is bounded; pages.go).
	minMaxFrame = 4096
	// minHeartbeat keeps clients' PINGs from being a load of their own.
	minHeartbeat = 10 * time.Millisecond
	// maxCarryGrace: a longer hold would delay every takeover past any session TTL.
	maxCarryGrace = 10 * time.Second
	// maxReconnectGrace: a longer wait would delay the redelivery of a dead worker's
	// runs past any time to run worth having.
	maxReconnectGrace = time.Minute
)

// Dispatch chooses which subscribed worker (among those with a credit and room in their
// reply queue) a due run is FIREd at.
type Dispatch uint8

const (
	// DispatchLeastLoaded picks the worker with the most free credits (ties: the
	// earliest subscribed). The default.
	DispatchLeastLoaded Dispatch = iota
	// DispatchRoundRobin takes the type's workers in turn, in subscription order.
	DispatchRoundRobin
	// DispatchKeyHash sends a task to the worker that wins rendezvous hashing of the
	// task's (namespace, ID) with xxhash against each worker's HELLO name: the same task
	// goes to the same worker while that worker has credits, and a worker joining or
	// leaving moves only the tasks it wins or won. Workers should have distinct names;
	// two with the same name tie, and the earlier subscribed wins. A task whose worker has
	// no credit goes to the next in its hash order rather than wait.
	DispatchKeyHash
)

var dispatchNames = [...]string{"least-loaded", "round-robin", "key-hash"}

func (d Dispatch) String() string {
	if int(d) < len(dispatchNames) {
		return dispatchNames[d]
	}
	return fmt.Sprintf("Dispatch(%d)", uint8(d))
}

// ParseDispatch reads a Dispatch by its String name.
func ParseDispatch(s string) (Dispatch, error) {
	for i, n := range dispatchNames {
		if n == s {
			return Dispatch(i), nil
		}
	}
	return 0, fmt.Errorf("%w: dispatch %q: want least-loaded, round-robin or key-hash", ErrInvalidOption, s)
}

// Options configures a Server; New takes it field by field (WithAddr, ...) or whole
// (WithOptions). The zero value of every field selects its default, so New() is a working
// server on DefaultAddr with an engine of its own.
type Options struct {
	// Addr is the TCP address ListenAndServe listens on. Default DefaultAddr (loopback,
	// so that nothing is exposed unless asked).
	Addr string
	// AdvertiseAddr is the client address this node announces in the leader election
	// while it leads: followers answer NOT_LEADER naming it, and clients follow. Only
	// used with a Store. Default: the address of the first listener Serve is given.
	AdvertiseAddr string
	// TLS, if set, makes the client port TLS: Serve wraps its listener, and the TLS
	// handshake must finish within HandshakeTimeout like HELLO. It needs Certificates (or
	// GetCertificate); set ClientAuth and ClientCAs to require client certificates.
	// Default: plain TCP.
	TLS *tls.Config
	// MaxConns bounds the connections served at once that have completed the handshake
	// (HELLO answered WELCOME); a connection accepted while MaxConns are served, or a
	// HELLO that would make one more, is answered ERROR OVERLOADED and closed. Sockets
	// still in the handshake count against MaxHandshakes instead, so that sockets without
	// the token cannot take these slots. Default 1024.
	MaxConns int
	// MaxHandshakes bounds the sockets accepted that have not completed the handshake
	// (TLS and HELLO). When one more is accepted, the oldest of them is answered ERROR
	// OVERLOADED and closed (the newest stays: a client that sends its HELLO at once gets
	// in even while idle sockets keep arriving, unless MaxHandshakes more arrive within
	// its round trip). Each costs one connection's buffers until HandshakeTimeout.
	// Default 128.
	MaxHandshakes int
	// MaxHelloFrame is the largest frame body accepted before the handshake completes,
	// in bytes, between 2048 and MaxFrame: a larger length prefix on a connection that has
	// not been WELCOMEd is answered FRAME_TOO_LARGE and closed without its body being
	// read, so a socket without the token cannot make the server buffer MaxFrame bytes.
	// Default 4096.
	MaxHelloFrame int
	// MaxFrame is the largest frame body accepted (and announced in WELCOME), in bytes,
	// between 4096 and protocol.MaxFrameLimit (64 MiB). A larger length prefix is answered
	// FRAME_TOO_LARGE and the connection closed. Replies are held to the same bound: a
	// SUBMIT's payload may take at most MaxFrame - 4096 bytes, so that every reply
	// carrying it fits, and pages end early where the next item would not fit.
	// Default 1 MiB.
	MaxFrame int
	// IdleTimeout closes a connection (without an ERROR) that sends nothing for this long
	// after its handshake. Default 2 minutes.
	IdleTimeout time.Duration
	// HandshakeTimeout closes a connection (without an ERROR) whose HELLO has not arrived
	// this long after it was accepted. Default 5 s.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds how long a reply may wait for a client that is not reading: a
	// connection whose reply queue stays full this long, or whose socket write takes this
	// long, is closed. Default 10 s.
	WriteTimeout time.Duration
	// Token, if not empty, is the shared secret every HELLO must carry (compared in
	// constant time); a missing or wrong token is UNAUTHORIZED. At most
	// protocol.MaxTokenLen bytes. Default: none required.
	Token string
	// MaxPendingPerConn bounds the replies queued on one connection and not yet written
	// (the requests in flight on it): when the queue is full, the connection's reader stops
	// reading, so a pipelining client is slowed by TCP back-pressure, and after
	// WriteTimeout it is disconnected. Default 1024.
	MaxPendingPerConn int
	// MaxQueuedReplyBytes bounds the bytes of the replies and pushes (FIREs) queued on
	// one connection and not yet written, counted as an upper bound of their encoded
	// frames: a reply that would take the queue past it waits, and the connection's
	// reader reads no further request meanwhile (back-pressure, not an error: it resumes
	// as the writer drains; the peer that never reads is closed after WriteTimeout like
	// one whose queue is full). A FIRE that does not fit goes to another worker or waits.
	// The runs queued for a worker that asked for FIRES count here alone, not against
	// MaxPendingPerConn (they wait for the writer outside the reply queue). One reply larger than the bound is queued alone. At least MaxFrame. Default 4 MiB
	// or MaxFrame, whichever is larger.
	MaxQueuedReplyBytes int
	// NodeName is this node's ID, sent in WELCOME, and its name in the partition map,
	// which must be unique in a cluster: a node whose name another live node holds is
	// left out of the map (and retries) until that one leaves. At most
	// protocol.MaxNameLen bytes, with no '/' when there is a Store.
	// Default the host name, or "tockd" when it cannot be read.
	NodeName string
	// LogLevel, if set, is the level of Logger's handler: the runtime configuration's
	// log_level sets it, and putting the key back (tockctl config reset) restores the
	// level it held when New was called. Default: none; log_level is then stored and
	// listed, but changes nothing on this node (a warning says so).
	LogLevel *slog.LevelVar
	// Alerts, if set, is the alert monitor (server/notify) whose thresholds the runtime
	// configuration's alert_backlog, alert_lateness_p95 and alert_for set; the
	// thresholds it holds when New is called are those keys' defaults. The caller runs
	// it. Default: none; those keys are then stored and listed, but change nothing on
	// this node (a warning says so).
	Alerts *notify.Monitor
	// Notifier, if set, is the alert notifier (server/notify) whose webhooks the runtime
	// configuration's webhook_urls sets, each URL a copy of Webhook with that URL; the
	// webhooks it holds when New is called are the key's default (shown cut to
	// scheme://host/…, as they may hold a credential). The caller closes it. Default:
	// none; webhook_urls is then stored and listed, but changes nothing on this node (a
	// warning says so).
	Notifier *notify.Notifier
	// Webhook is what each of webhook_urls' URLs becomes (Format, Secret; its URL is
	// ignored). Default: JSON, unsigned.
	Webhook notify.Webhook
	// Logger receives connection-level events (accepted, closed and why, protocol
	// violations) at Debug and Info, and failures at Warn and Error. Default: discard,
	// because a library does not write to stderr unasked; the tockd binary sets one.
	Logger *slog.Logger
	// Engine, if set, is the engine requests go to; the caller owns it (Shutdown does not
	// close it) and may register handlers on it: a type with a handler of its own runs
	// in-process, every other type goes to remote workers (New sets the engine's
	// fallback handler, replacing any). If nil, New creates one from EngineOptions and
	// Shutdown closes it. Setting both is an error.
	Engine *task.Engine
	// EngineOptions configure the engine New creates when Engine is nil.
	EngineOptions []task.Option
	// DefaultTTR is the time to run a FIRE announces for a task without a timeout. When
	// New creates the engine it also becomes the engine's DefaultTimeout (unless
	// EngineOptions set one), so a worker that neither ACKs nor NACKs within it has its
	// run timed out by the engine and retried per the task's policy. With a caller's
	// Engine, set task.Options.DefaultTimeout to match, or such runs never time out.
	// At most task.MaxTimeout. Default 30 s.
	DefaultTTR time.Duration
	// Dispatch picks the worker a due run goes to. Default DispatchLeastLoaded.
	Dispatch Dispatch
	// MaxWaitingRuns bounds the due runs held waiting for a worker: none of their type's
	// subscribed workers has a credit, the type is paused, or this node does not lead. A
	// waiting run's time to run starts when it is FIREd. A run that comes due with this
	// many waiting fails at once, retryably ("no worker available"), and its task's retry
	// policy decides. Each waiting run costs about 200 bytes. Default 1,048,576.
	MaxWaitingRuns int
	// MaxWaitingRunsPerType bounds the due runs of one task type held waiting for a
	// worker, so that a type nobody serves (or a paused one) cannot take every waiting
	// place and make the other types' runs fail: a run of a type that has this many
	// waiting fails at once, retryably ("no worker available"), like one beyond
	// MaxWaitingRuns. At most MaxWaitingRuns. Default min(262,144, MaxWaitingRuns): with
	// the default total, four unserved types fill it.
	MaxWaitingRunsPerType int
	// MaxFiresRuns bounds the runs the server puts in one FIRES frame to a worker that
	// asked for FIRES (SUBSCRIBE batch_fires, which may ask for fewer): the runs ready
	// for one worker connection when its writer wakes leave in frames of at most this
	// many runs, and of at most MaxFrame bytes. 1 sends every run as a FIRE of its own.
	// In [1, protocol.MaxFiresRuns]; default protocol.MaxFiresRuns (1000).
	MaxFiresRuns int
	// OnLeadership, if set, is called after every change of this node's leadership
	// (with a Store: elected, or its session lost; leading reports which), from the
	// campaign goroutine: keep it cheap. Not called without a Store (always leading).
	OnLeadership func(leading bool, epoch uint64)
	// Heartbeat is the interval WELCOME states (heartbeat_ns, PROTOCOL.md): a client
	// PINGs when nothing has arrived for this long and declares the connection dead when
	// nothing has arrived for protocol.HeartbeatMisses (3) of them, then dials another
	// node. Default: a quarter of the Store's session TTL (500 ms for 2 s), so that
	// clients leave a frozen leader before the next one is elected; DefaultHeartbeat (5 s)
	// without a Store. At least 10 ms.
	Heartbeat time.Duration
	// CarryGrace bounds how long a newly elected leader holds back the runs it loaded
	// (they wait, unfired) for the workers registered at the previous leader to
	// reconnect and hand in the outcomes of runs whose ACK that leader never confirmed
	// (CARRY, PROTOCOL.md): a run whose outcome arrives is ended with it, not run again.
	// The hold ends sooner when every such worker has subscribed after its CARRY
	// frames, so it costs the time the slowest of them takes to hand in, and the whole
	// grace only when one does not come back. Each CARRY frame arriving during the hold
	// keeps it on for another CarryGrace, up to CarryHoldMax. It delays the first FIRE
	// after a takeover by at most CarryGrace after the last frame, and by less than it seems: nothing is FIREd before the first
	// worker has subscribed anyway. Only used with a Store. Default 1.5 s: on a loaded
	// 2-core box (load 6-8.5, two workers) a worker subscribed 0.9-2.9 s after the
	// election, most of it handing in ~10k carried outcomes; a 500 ms hold ended first
	// in all 6 kills measured (1.1k-3.3k outcomes refused as started, so re-run, per
	// kill), a 1.5 s one in 2 of 5 (none refused in 2). With a 2 s TTL, a registered
	// worker that never returns puts dispatching past TTL + 1 s: lower it where that
	// matters more than re-runs. At most 10 s; negative: no hold
	// (outcomes are then accepted only for runs that have not come due yet at the new
	// leader).
	CarryGrace time.Duration
	// CarryHoldMax caps the takeover's hold (CarryGrace) while CARRY frames keep
	// arriving: each frame that arrives during the hold keeps it on for another
	// CarryGrace (a worker handing in ~10k outcomes sends ~10 frames of 1,000, and the
	// runs its later frames carry must not be FIREd meanwhile at a worker already
	// subscribed), but never past CarryHoldMax after the takeover. Default 4 s, or
	// CarryGrace if longer: on a loaded 2-core box the last of two workers subscribed up
	// to 2.9 s after the election, handing in all the while. At most 10 s; not below
	// CarryGrace.
	CarryHoldMax time.Duration
	// ReconnectGrace is how long the runs in flight on a worker connection that closed
	// while this node leads are kept for that worker (a network blip, a heartbeat false
	// alarm) before they fail (retryably: redelivered per the task's retry policy): a
	// worker that reconnects meanwhile and carries their outcomes (CARRY) ends them so,
	// and they do not run again. A run whose time to run ends first times out as usual.
	// It delays the redelivery of a dead worker's runs by as much. Default 2 s; at most
	// 1 min; negative: the runs fail at once.
	ReconnectGrace time.Duration
	// Partitions is the cluster's partition count P (PROTOCOL.md, "Partitions"), 1 to
	// partition.MaxCount (4096). With a Store, the first node of a cluster stores it in
	// etcd, and New refuses (ErrPartitionCount, naming both counts) a node whose count
	// differs from the one stored: P is fixed when the cluster is created. The map of
	// which node owns each partition is computed and shown (WELCOME, PARTITIONS), not
	// yet routed by. Default partition.DefaultCount (16).
	Partitions int
	// Store, if set, makes durable tasks possible: a durable SUBMIT is recorded in it
	// before the engine gets the task and before the reply, the record is deleted when
	// the task finishes for good, and New submits every stored record to the engine
	// before it returns. The caller owns the Store (Shutdown does not close it; close it
	// after Shutdown). It needs the engine New creates (Engine must be nil), whose
	// OnEvent it hooks (an OnEvent in EngineOptions is still called). Default: none,
	// and durable submits are refused.
	Store *store.Store
	// TracerProvider, if set, makes the server's spans of traced tasks (tock.submit,
	// tock.fire, tock.ack, tock.retry, tock.dead_letter: server/tracing), each a child of
	// the trace context the task was submitted with; for tests and embedders, who own
	// it. The spans that end attempts come from the events of the engine New creates
	// (none with a caller's Engine). Not with OTLPEndpoint. Default: none.
	TracerProvider trace.TracerProvider
	// OTLPEndpoint, if set, exports those spans over OTLP/HTTP to a collector:
	// "host:port" (plain HTTP, path /v1/traces) or an http(s) URL (tracing.Options.
	// Endpoint). New builds the exporter (a batch span processor; New does no I/O for
	// it) and Shutdown flushes it. Default: none: no spans are made, and traced tasks
	// only pass their trace context on to their FIREs.
	OTLPEndpoint string
}

// Option sets a field of Options.
type Option func(*Options)

// WithOptions replaces the whole Options struct (fields left zero take their defaults).
func WithOptions(o Options) Option { return func(dst *Options) { *dst = o } }

// WithAddr sets Options.Addr.
func WithAddr(addr string) Option { return func(o *Options) { o.Addr = addr } }

// WithAdvertiseAddr sets Options.AdvertiseAddr.
func WithAdvertiseAddr(addr string) Option { return func(o *Options) { o.AdvertiseAddr = addr } }

// WithTLS sets Options.TLS.
func WithTLS(c *tls.Config) Option { return func(o *Options) { o.TLS = c } }

// WithMaxConns sets Options.MaxConns.
func WithMaxConns(n int) Option { return func(o *Options) { o.MaxConns = n } }

// WithMaxHandshakes sets Options.MaxHandshakes.
func WithMaxHandshakes(n int) Option { return func(o *Options) { o.MaxHandshakes = n } }

// WithMaxHelloFrame sets Options.MaxHelloFrame.
func WithMaxHelloFrame(n int) Option { return func(o *Options) { o.MaxHelloFrame = n } }

// WithMaxFrame sets Options.MaxFrame.
func WithMaxFrame(n int) Option { return func(o *Options) { o.MaxFrame = n } }

// WithIdleTimeout sets Options.IdleTimeout.
func WithIdleTimeout(d time.Duration) Option { return func(o *Options) { o.IdleTimeout = d } }

// WithHandshakeTimeout sets Options.HandshakeTimeout.
func WithHandshakeTimeout(d time.Duration) Option { return func(o *Options) { o.HandshakeTimeout = d } }

// WithWriteTimeout sets Options.WriteTimeout.
func WithWriteTimeout(d time.Duration) Option { return func(o *Options) { o.WriteTimeout = d } }

// WithToken sets Options.Token.
func WithToken(token string) Option { return func(o *Options) { o.Token = token } }

// WithMaxPendingPerConn sets Options.MaxPendingPerConn.
func WithMaxPendingPerConn(n int) Option { return func(o *Options) { o.MaxPendingPerConn = n } }

// WithMaxQueuedReplyBytes sets Options.MaxQueuedReplyBytes.
func WithMaxQueuedReplyBytes(n int) Option { return func(o *Options) { o.MaxQueuedReplyBytes = n } }

// WithNodeName sets Options.NodeName.
func WithNodeName(name string) Option { return func(o *Options) { o.NodeName = name } }

// WithLogLevel sets Options.LogLevel.
func WithLogLevel(l *slog.LevelVar) Option { return func(o *Options) { o.LogLevel = l } }

// WithAlerts sets Options.Alerts.
func WithAlerts(m *notify.Monitor) Option { return func(o *Options) { o.Alerts = m } }

// WithNotifier sets Options.Notifier and Options.Webhook.
func WithNotifier(n *notify.Notifier, webhook notify.Webhook) Option {
	return func(o *Options) { o.Notifier, o.Webhook = n, webhook }
}

// WithTracerProvider sets Options.TracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *Options) { o.TracerProvider = tp }
}

// WithOTLPEndpoint sets Options.OTLPEndpoint.
func WithOTLPEndpoint(endpoint string) Option { return func(o *Options) { o.OTLPEndpoint = endpoint } }

// WithLogger sets Options.Logger.
func WithLogger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }

// WithEngine sets Options.Engine.
func WithEngine(e *task.Engine) Option { return func(o *Options) { o.Engine = e } }

// WithEngineOptions sets Options.EngineOptions.
func WithEngineOptions(opts ...task.Option) Option {
	return func(o *Options) { o.EngineOptions = opts }
}

// WithDefaultTTR sets Options.DefaultTTR.
func WithDefaultTTR(d time.Duration) Option { return func(o *Options) { o.DefaultTTR = d } }

// WithDispatch sets Options.Dispatch.
func WithDispatch(d Dispatch) Option { return func(o *Options) { o.Dispatch = d } }

// WithMaxWaitingRuns sets Options.MaxWaitingRuns.
func WithMaxWaitingRuns(n int) Option { return func(o *Options) { o.MaxWaitingRuns = n } }

// WithMaxFiresRuns sets Options.MaxFiresRuns.
func WithMaxFiresRuns(n int) Option { return func(o *Options) { o.MaxFiresRuns = n } }

// WithMaxWaitingRunsPerType sets Options.MaxWaitingRunsPerType.
func WithMaxWaitingRunsPerType(n int) Option { return func(o *Options) { o.MaxWaitingRunsPerType = n } }

// WithOnLeadership sets Options.OnLeadership.
func WithOnLeadership(f func(leading bool, epoch uint64)) Option {
	return func(o *Options) { o.OnLeadership = f }
}

// WithHeartbeat sets Options.Heartbeat.
func WithHeartbeat(d time.Duration) Option { return func(o *Options) { o.Heartbeat = d } }

// WithCarryGrace sets Options.CarryGrace.
func WithCarryGrace(d time.Duration) Option { return func(o *Options) { o.CarryGrace = d } }

// WithCarryHoldMax sets Options.CarryHoldMax.
func WithCarryHoldMax(d time.Duration) Option { return func(o *Options) { o.CarryHoldMax = d } }

// WithReconnectGrace sets Options.ReconnectGrace.
func WithReconnectGrace(d time.Duration) Option { return func(o *Options) { o.ReconnectGrace = d } }

// WithPartitions sets Options.Partitions.
func WithPartitions(p int) Option { return func(o *Options) { o.Partitions = p } }

// WithStore sets Options.Store.
func WithStore(s *store.Store) Option { return func(o *Options) { o.Store = s } }

// setDefaults fills zero fields with their defaults.
func (o *Options) setDefaults() {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxFrame == 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.MaxHandshakes == 0 {
		o.MaxHandshakes = DefaultMaxHandshakes
	}
	if o.MaxHelloFrame == 0 {
		o.MaxHelloFrame = min(DefaultMaxHelloFrame, o.MaxFrame)
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxPendingPerConn == 0 {
		o.MaxPendingPerConn = DefaultMaxPendingPerConn
	}
	if o.MaxQueuedReplyBytes == 0 {
		o.MaxQueuedReplyBytes = max(DefaultMaxQueuedReplyBytes, o.MaxFrame)
	}
	if o.DefaultTTR == 0 {
		o.DefaultTTR = DefaultTTR
	}
	if o.MaxWaitingRuns == 0 {
		o.MaxWaitingRuns = DefaultMaxWaitingRuns
	}
	if o.MaxFiresRuns == 0 {
		o.MaxFiresRuns = DefaultMaxFiresRuns
	}
	if o.MaxWaitingRunsPerType == 0 {
		o.MaxWaitingRunsPerType = min(DefaultMaxWaitingRunsPerType, o.MaxWaitingRuns)
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = DefaultHeartbeat
		if o.Store != nil {
			o.Heartbeat = o.Store.SessionTTL() / 4
		}
	}
	if o.CarryGrace == 0 {
		o.CarryGrace = DefaultCarryGrace
	}
	if o.CarryHoldMax == 0 {
		o.CarryHoldMax = max(DefaultCarryHoldMax, o.CarryGrace)
	}
	if o.ReconnectGrace == 0 {
		o.ReconnectGrace = DefaultReconnectGrace
	}
	if o.Partitions == 0 {
		o.Partitions = partition.DefaultCount
	}
	if o.NodeName == "" {
		if h, err := os.Hostname(); err == nil && h != "" && len(h) <= protocol.MaxNameLen {
			o.NodeName = h
		} else {
			o.NodeName = "tockd"
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// validate checks the fields after setDefaults and names the first bad one.
func (o *Options) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
	switch {
	case o.MaxConns < 1:
		return bad("MaxConns %d is not positive", o.MaxConns)
	case o.MaxFrame < minMaxFrame || o.MaxFrame > protocol.MaxFrameLimit:
		return bad("MaxFrame %d outside [%d, %d]", o.MaxFrame, minMaxFrame, protocol.MaxFrameLimit)
	case o.MaxHandshakes < 1:
		return bad("MaxHandshakes %d is not positive", o.MaxHandshakes)
	case o.MaxHelloFrame < minMaxHelloFrame || o.MaxHelloFrame > o.MaxFrame:
		return bad("MaxHelloFrame %d outside [%d, MaxFrame %d]", o.MaxHelloFrame, minMaxHelloFrame, o.MaxFrame)
	case o.IdleTimeout < 0:
		return bad("IdleTimeout %v is negative", o.IdleTimeout)
	case o.HandshakeTimeout < 0:
		return bad("HandshakeTimeout %v is negative", o.HandshakeTimeout)
	case o.WriteTimeout < 0:
		return bad("WriteTimeout %v is negative", o.WriteTimeout)
	case len(o.Token) > protocol.MaxTokenLen:
		return bad("Token of %d bytes exceeds %d", len(o.Token), protocol.MaxTokenLen)
	case o.TLS != nil && len(o.TLS.Certificates) == 0 && o.TLS.GetCertificate == nil && o.TLS.GetConfigForClient == nil:
		return bad("TLS has no certificate")
	case int(o.Dispatch) >= len(dispatchNames):
		return bad("Dispatch %d is not a known strategy", o.Dispatch)
	case o.Heartbeat < minHeartbeat:
		return bad("Heartbeat %v is below %v", o.Heartbeat, minHeartbeat)
	case o.CarryGrace > maxCarryGrace:
		return bad("CarryGrace %v above %v", o.CarryGrace, maxCarryGrace)
	case o.CarryHoldMax > maxCarryGrace:
		return bad("CarryHoldMax %v above %v", o.CarryHoldMax, maxCarryGrace)
	case o.CarryHoldMax < o.CarryGrace:
		return bad("CarryHoldMax %v below CarryGrace %v", o.CarryHoldMax, o.CarryGrace)
	case o.ReconnectGrace > maxReconnectGrace:
		return bad("ReconnectGrace %v above %v", o.ReconnectGrace, maxReconnectGrace)
	case o.MaxWaitingRuns < 1:
		return bad("MaxWaitingRuns %d is not positive", o.MaxWaitingRuns)
	case o.MaxFiresRuns < 1 || o.MaxFiresRuns > protocol.MaxFiresRuns:
		return bad("MaxFiresRuns %d outside [1, %d]", o.MaxFiresRuns, protocol.MaxFiresRuns)
	case o.MaxWaitingRunsPerType < 1 || o.MaxWaitingRunsPerType > o.MaxWaitingRuns:
		return bad("MaxWaitingRunsPerType %d outside [1, MaxWaitingRuns %d]", o.MaxWaitingRunsPerType, o.MaxWaitingRuns)
	case o.MaxPendingPerConn < 1:
		return bad("MaxPendingPerConn %d is not positive", o.MaxPendingPerConn)
	case o.MaxQueuedReplyBytes < o.MaxFrame:
		return bad("MaxQueuedReplyBytes %d is below MaxFrame %d: a reply of MaxFrame bytes must fit", o.MaxQueuedReplyBytes, o.MaxFrame)
	case len(o.NodeName) > protocol.MaxNameLen:
		return bad("NodeName of %d bytes exceeds %d", len(o.NodeName), protocol.MaxNameLen)
	case o.Store != nil && strings.Contains(o.NodeName, "/"):
		return bad("NodeName %q has a '/': with a Store it is a key in etcd (<prefix>nodes/<name>)", o.NodeName)
	case o.DefaultTTR < 0 || o.DefaultTTR > task.MaxTimeout:
		return bad("DefaultTTR %v outside (0, %v]", o.DefaultTTR, task.MaxTimeout)
	case partition.CheckCount(o.Partitions) != nil:
		return bad("Partitions %d outside [1, %d]", o.Partitions, partition.MaxCount)
	case o.Engine != nil && len(o.EngineOptions) > 0:
		return bad("Engine and EngineOptions are both set: pass an engine or options to make one")
	case o.TracerProvider != nil && o.OTLPEndpoint != "":
		return bad("TracerProvider and OTLPEndpoint are both set: spans go to one of them")
	case o.Engine != nil && o.Store != nil:
		return bad("Engine and Store are both set: a Store needs the engine New creates, to hook its events")
	}
	return nil
}
