package notify

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"
)

// Format selects the body a webhook receives.
type Format string

const (
	// FormatJSON is the generic body: {"kind","key","severity","title","text",
	// "fields":{...} (in the alert's order),"time" (RFC 3339, ns),"node","resolved"}.
	FormatJSON Format = "json"
	// FormatFeishu is a Feishu/Lark custom-bot interactive card (msg_type "interactive",
	// card JSON 1.0: header with title and colour, a lark_md div with the text, a div of
	// short fields, a note with node, time and key). The bot replies 200 with a JSON
	// {"code":...}; a non-zero code counts as a failed delivery and is not retried.
	FormatFeishu Format = "feishu"
)

// Webhook is one receiver of every alert.
type Webhook struct {
	// URL is posted to; http or https with a host. It often holds a credential (a
	// Feishu hook token), so logs and errors name only its scheme and host
	// (scheme://host/…).
	URL string
	// Format of the body. Default FormatJSON.
	Format Format
	// Secret, for FormatFeishu only, is the bot's signing secret: each body then carries
	// "timestamp" (Unix seconds, as a string) and "sign" = base64(HMAC-SHA256 keyed with
	// timestamp+"\n"+Secret over an empty message). Default: unsigned.
	Secret string
}

// Defaults of Options; a zero field takes its default.
const (
	DefaultDedupWindow     = 5 * time.Minute
	DefaultMaxKeys         = 4096
	DefaultRateLimit       = 1.0 // alerts a second per webhook (Feishu bots allow 5/s, 100/min)
	DefaultBurst           = 10
	DefaultQueueSize       = 256
	DefaultTimeout         = 10 * time.Second
	DefaultRetries         = 3
	DefaultRetryBackoff    = time.Second
	DefaultMaxRetryBackoff = 30 * time.Second
	DefaultMaxText         = 2048 // bytes; Feishu refuses bodies over 20 KB
	DefaultMaxFields       = 32

	// NoRetries as Options.Retries makes the first failure final.
	NoRetries = -1
)

// Options configures a Notifier. The zero value of every field selects its default.
type Options struct {
	// Webhooks receive every alert; none: alerts go nowhere (until SetWebhooks gives
	// the Notifier some).
	Webhooks []Webhook
	// Node is an alert's Node when it has none. Default the host name.
	Node string
	// DedupWindow: an alert whose Key and state (firing or resolved) match one sent less
	// than DedupWindow ago is suppressed and counted as Deduplicated; a change of state
	// always goes through. Default 5 minutes.
	DedupWindow time.Duration
	// MaxKeys bounds the keys remembered for deduplication; past it the least recently
	// sent key is forgotten (so it could alert again within its window). Default 4096.
	MaxKeys int
	// RateLimit is each webhook's steady rate in alerts a second, and Burst its bucket's
	// size (a token bucket). An alert finding the bucket empty is not queued for that
	// webhook and is counted as RateLimited; the next alert that webhook does get carries
	// a field "suppressed" with how many it missed since. Defaults 1/s and 10.
	RateLimit float64
	Burst     int
	// QueueSize bounds the alerts waiting for each webhook's sender; an alert finding the
	// queue full is not queued for that webhook and is counted as Dropped, so Notify
	// never waits. Default 256.
	QueueSize int
	// Timeout bounds one POST, from dialling to reading the reply. Default 10 s.
	Timeout time.Duration
	// Retries is how many times a POST is retried after a network error, a timeout, a 429
	// or a 5xx; other failures are final. NoRetries (-1) disables retries. Default 3.
	Retries int
	// RetryBackoff is the wait before the first retry; it doubles per retry up to
	// MaxRetryBackoff. Defaults 1 s and 30 s.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// MaxText bounds, in bytes, an alert's Key, Title, Text and each field's key and
	// value; longer ones are cut (on a UTF-8 boundary, marked "…"). Default 2048.
	MaxText int
	// MaxFields bounds an alert's fields; more are dropped. Default 32.
	MaxFields int
	// HTTPClient posts the alerts; its own Timeout, if any, also applies. Default: a
	// client of the Notifier's own, whose idle connections Close closes.
	HTTPClient *http.Client
	// Logger receives failed deliveries at Warn (never the full URL). Default: discard.
	Logger *slog.Logger
	// Clock gives the time for deduplication, rate limiting, alert times and Feishu
	// signatures (not for timeouts and backoff waits). Default time.Now.
	Clock func() time.Time
}

// Option sets a field of Options.
type Option func(*Options)

// WithOptions replaces the whole Options struct (fields left zero take their defaults).
func WithOptions(o Options) Option { return func(dst *Options) { *dst = o } }

// WithWebhooks sets Options.Webhooks.
func WithWebhooks(hooks ...Webhook) Option { return func(o *Options) { o.Webhooks = hooks } }

// WithNode sets Options.Node.
func WithNode(node string) Option { return func(o *Options) { o.Node = node } }

// WithDedupWindow sets Options.DedupWindow.
func WithDedupWindow(d time.Duration) Option { return func(o *Options) { o.DedupWindow = d } }

// WithMaxKeys sets Options.MaxKeys.
func WithMaxKeys(n int) Option { return func(o *Options) { o.MaxKeys = n } }

// WithRateLimit sets Options.RateLimit.
func WithRateLimit(perSecond float64) Option { return func(o *Options) { o.RateLimit = perSecond } }

// WithBurst sets Options.Burst.
func WithBurst(n int) Option { return func(o *Options) { o.Burst = n } }

// WithQueueSize sets Options.QueueSize.
func WithQueueSize(n int) Option { return func(o *Options) { o.QueueSize = n } }

// WithTimeout sets Options.Timeout.
func WithTimeout(d time.Duration) Option { return func(o *Options) { o.Timeout = d } }

// WithRetries sets Options.Retries.
func WithRetries(n int) Option { return func(o *Options) { o.Retries = n } }

// WithRetryBackoff sets Options.RetryBackoff.
func WithRetryBackoff(d time.Duration) Option { return func(o *Options) { o.RetryBackoff = d } }

// WithMaxRetryBackoff sets Options.MaxRetryBackoff.
func WithMaxRetryBackoff(d time.Duration) Option { return func(o *Options) { o.MaxRetryBackoff = d } }

// WithMaxText sets Options.MaxText.
func WithMaxText(n int) Option { return func(o *Options) { o.MaxText = n } }

// WithMaxFields sets Options.MaxFields.
func WithMaxFields(n int) Option { return func(o *Options) { o.MaxFields = n } }

// WithHTTPClient sets Options.HTTPClient.
func WithHTTPClient(c *http.Client) Option { return func(o *Options) { o.HTTPClient = c } }

// WithLogger sets Options.Logger.
func WithLogger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }

// WithClock sets Options.Clock.
func WithClock(now func() time.Time) Option { return func(o *Options) { o.Clock = now } }

func (o *Options) setDefaults() {
	if o.Node == "" {
		if h, err := os.Hostname(); err == nil && h != "" {
			o.Node = h
		} else {
			o.Node = "tockd"
		}
	}
	for i := range o.Webhooks {
		if o.Webhooks[i].Format == "" {
			o.Webhooks[i].Format = FormatJSON
		}
	}
	setDefault(&o.DedupWindow, DefaultDedupWindow)
	setDefault(&o.MaxKeys, DefaultMaxKeys)
	setDefault(&o.RateLimit, DefaultRateLimit)
	setDefault(&o.Burst, DefaultBurst)
	setDefault(&o.QueueSize, DefaultQueueSize)
	setDefault(&o.Timeout, DefaultTimeout)
	setDefault(&o.Retries, DefaultRetries)
	setDefault(&o.RetryBackoff, DefaultRetryBackoff)
	setDefault(&o.MaxRetryBackoff, DefaultMaxRetryBackoff)
	setDefault(&o.MaxText, DefaultMaxText)
	setDefault(&o.MaxFields, DefaultMaxFields)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}

// validate checks the fields after setDefaults and names the first bad one.
func (o *Options) validate() error {
	if err := validateWebhooks(o.Webhooks); err != nil {
		return err
	}
	return o.validateRest()
}

// validateWebhooks checks each webhook (its Format set) and names the first bad one.
func validateWebhooks(hooks []Webhook) error {
	for i, w := range hooks {
		u, err := url.Parse(w.URL)
		switch {
		case err != nil:
			// A *url.Error quotes the whole URL: only its cause is said.
			cause := err
			var uerr *url.Error
			if errors.As(err, &uerr) {
				cause = uerr.Err
			}
			return bad("Webhooks[%d].URL %s: %s", i, redactURL(w.URL), redactText(cause.Error()))
		case u.Scheme != "http" && u.Scheme != "https":
			return bad("Webhooks[%d].URL: scheme %q is not http or https", i, u.Scheme)
		case u.Host == "":
			return bad("Webhooks[%d].URL has no host", i)
		case w.Format != FormatJSON && w.Format != FormatFeishu:
			return bad("Webhooks[%d].Format %q is not %q or %q", i, w.Format, FormatJSON, FormatFeishu)
		case w.Secret != "" && w.Format != FormatFeishu:
			return bad("Webhooks[%d].Secret is set but only Format %q signs", i, FormatFeishu)
		}
	}
	return nil
}

// validateRest checks the fields other than Webhooks.
func (o *Options) validateRest() error {
	switch {
	case o.DedupWindow < 0:
		return bad("DedupWindow %v is negative", o.DedupWindow)
	case o.MaxKeys < 1:
		return bad("MaxKeys %d is not positive", o.MaxKeys)
	case !(o.RateLimit > 0) || o.RateLimit > 1e9: // !(>0) also catches NaN
		return bad("RateLimit %v is not in (0, 1e9] alerts a second", o.RateLimit)
	case o.Burst < 1:
		return bad("Burst %d is not positive", o.Burst)
	case o.QueueSize < 1:
		return bad("QueueSize %d is not positive", o.QueueSize)
	case o.Timeout < 0:
		return bad("Timeout %v is negative", o.Timeout)
	case o.Retries < NoRetries:
		return bad("Retries %d is negative (NoRetries is %d)", o.Retries, NoRetries)
	case o.RetryBackoff < 0:
		return bad("RetryBackoff %v is negative", o.RetryBackoff)
	case o.MaxRetryBackoff < 0:
		return bad("MaxRetryBackoff %v is negative", o.MaxRetryBackoff)
	case o.MaxRetryBackoff < o.RetryBackoff:
		return bad("MaxRetryBackoff %v is below RetryBackoff %v", o.MaxRetryBackoff, o.RetryBackoff)
	case o.MaxText < 16:
		return bad("MaxText %d is below 16 bytes", o.MaxText)
	case o.MaxFields < 1:
		return bad("MaxFields %d is not positive", o.MaxFields)
	}
	return nil
}
