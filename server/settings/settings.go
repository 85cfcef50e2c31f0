package settings

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/notify"
)

var (
	// ErrUnknownKey means a key names no runtime setting.
	ErrUnknownKey = errors.New("settings: unknown key")
	// ErrBadValue means a value does not parse, or is out of its setting's range.
	ErrBadValue = errors.New("settings: bad value")
)

// The names of the settings: a key is one of them, or one of them, '/' and an argument.
const (
	LogLevel              = "log_level"
	MaxWaitingRuns        = "max_waiting_runs"
	MaxWaitingRunsPerType = "max_waiting_runs_per_type"
	RateLimit             = "rate_limit"
	ConcurrencyLimit      = "concurrency_limit"
	Paused                = "paused"
	AlertBacklog          = "alert_backlog"
	AlertLatenessP95      = "alert_lateness_p95"
	AlertFor              = "alert_for"
	Retention             = "retention"
	WebhookURLs           = "webhook_urls"
)

// MaxWebhookURLs bounds the URLs of webhook_urls.
const MaxWebhookURLs = 16

// Spec describes one setting.
type Spec struct {
	Name string // the key, or the key's first part when it takes an argument
	// Arg is the argument's syntax after "Name/" ("<type>"); "" for a plain key.
	Arg    string
	Syntax string // the value's syntax
	// Default says what applies while the key is not set: a tockd flag, or a fixed value.
	Default string
	Doc     string // one line
	parse   func(s *Setting) error
	// redact, if set, is a value as logs may show it: the value may hold a credential.
	redact func(value string) string
}

// Pattern is the key as documented: Name, or Name/Arg.
func (sp *Spec) Pattern() string {
	if sp.Arg == "" {
		return sp.Name
	}
	return sp.Name + "/" + sp.Arg
}

var specs = []Spec{
	{Name: LogLevel, Syntax: "debug|info|warn|error", Default: "-log-level (info)",
		Doc: "the least severe log line written", parse: parseLevel},
	{Name: MaxWaitingRuns, Syntax: "a positive integer", Default: "-max-waiting-runs (1048576)",
		Doc: "due runs held waiting for a worker before a new one fails retryably", parse: parseCount},
	{Name: MaxWaitingRunsPerType, Syntax: "a positive integer", Default: "-max-waiting-runs-per-type (min(262144, -max-waiting-runs))",
		Doc: "due runs of one task type held waiting for a worker before a new one fails retryably", parse: parseCount},
	{Name: RateLimit, Arg: "<type>", Syntax: "rate[:burst]", Default: "0 (none)",
		Doc: "runs of the type started a second (0: no limit), with a burst of runs at once (default 1)", parse: parseRate},
	{Name: ConcurrencyLimit, Arg: "<namespace>/<key>", Syntax: "0 to 1048576", Default: "0 (the limit its tasks name)",
		Doc: "runs of a concurrency key at once, across workers, over the limit its tasks name (0: theirs)", parse: parseConcurrency},
	{Name: Paused, Arg: "<type>", Syntax: "true|false", Default: "false",
		Doc: "the type's due runs wait, undispatched (PAUSE and RESUME write it too)", parse: parsePaused},
	{Name: AlertBacklog, Syntax: "an integer, 0 or more (0: never)", Default: "-alert-backlog (10000)",
		Doc: "alert when more due runs than this wait for a worker", parse: parseBacklog},
	{Name: AlertLatenessP95, Syntax: "a duration such as 500ms or 2s, 0 or more (0: never)", Default: "-alert-lateness-p95 (1s)",
		Doc: "alert when the p95 of start minus due time over an interval exceeds this", parse: parseDuration},
	{Name: AlertFor, Syntax: "a duration such as 30s or 5m, 0 or more", Default: "-alert-for (1m0s)",
		Doc: "how long a backlog or lateness breach lasts before it alerts", parse: parseDuration},
	{Name: Retention, Syntax: "a duration such as 10m or 1h, 0 or more (0: dropped as it finishes)", Default: "-retention (1m0s)",
		Doc: "how long a task that finishes from now on stays queryable (GET, LIST) and counts towards -max-tasks", parse: parseDuration},
	{Name: WebhookURLs, Syntax: "comma-separated http(s) URLs without user info, or empty (no webhook)", Default: "-webhook (none)",
		Doc:   "the webhooks every alert goes to, in -webhook-format (signed with -webhook-secret); stored in etcd in clear",
		parse: parseWebhookURLs, redact: redactURLs},
}

// Specs lists every setting, in documentation order. The caller must not change them.
func Specs() []Spec { return specs }

// Setting is one key and its value, parsed: Value is the canonical text to store; the
// field its Name sets holds the value.
type Setting struct {
	Key   string // Name, or Name/Arg
	Name  string // the spec's Name
	Arg   string // after "Name/"; "" for a plain key
	Value string // canonical: Parse(Key, Value) gives this Setting again

	Level slog.Level    // log_level
	N     int           // max_waiting_runs, max_waiting_runs_per_type, concurrency_limit, alert_backlog
	Rate  float64       // rate_limit: runs a second; 0: no limit
	Burst int           // rate_limit: 0 when Rate is 0
	On    bool          // paused
	D     time.Duration // alert_lateness_p95, alert_for, retention
	// Type is rate_limit's and paused's task type; Namespace and ConcKey are
	// concurrency_limit's.
	Type, Namespace, ConcKey string
}

// Loggable is value as a log line may show it: value itself, but for a key whose values
// may hold a credential (webhook_urls: each URL cut to scheme://host/…, as server/notify
// logs them) or a key Lookup refuses ("(not shown)").
func Loggable(key, value string) string {
	sp, _, err := Lookup(key)
	switch {
	case err != nil:
		return "(not shown)"
	case sp.redact != nil:
		return sp.redact(value)
	}
	return value
}

// WebhookURLs is webhook_urls' value, s.Value, as its URLs (none when empty).
func (s *Setting) WebhookURLs() []string {
	if s.Value == "" {
		return nil
	}
	return strings.Split(s.Value, ",")
}

// Lookup is the spec of key and the argument it names, or ErrUnknownKey: a plain name
// with an argument, an argument with none, a key ending in '/', or a name no spec has.
func Lookup(key string) (*Spec, string, error) {
	if strings.HasSuffix(key, "/") {
		return nil, "", fmt.Errorf("%w %q: a key does not end in '/'", ErrUnknownKey, key)
	}
	name, arg, hasArg := strings.Cut(key, "/")
	for i := range specs {
		sp := &specs[i]
		if sp.Name != name {
			continue
		}
		switch {
		case sp.Arg == "" && hasArg:
			return nil, "", fmt.Errorf("%w %q: %s takes no argument", ErrUnknownKey, key, name)
		case sp.Arg != "" && arg == "":
			return nil, "", fmt.Errorf("%w %q: want %s", ErrUnknownKey, key, sp.Pattern())
		}
		return sp, arg, nil
	}
	return nil, "", fmt.Errorf("%w %q: known keys are %s", ErrUnknownKey, key, patterns())
}

// patterns lists every key pattern, for an error.
func patterns() string {
	ps := make([]string, len(specs))
	for i := range specs {
		ps[i] = specs[i].Pattern()
	}
	return strings.Join(ps, ", ")
}

// Parse checks key and value and returns the setting they make, or an error wrapping
// ErrUnknownKey or ErrBadValue that names both (a value that may hold a credential as
// Loggable shows it).
func Parse(key, value string) (Setting, error) {
	sp, arg, err := Lookup(key)
	if err != nil {
		return Setting{}, err
	}
	s := Setting{Key: key, Name: sp.Name, Arg: arg, Value: value}
	if err := sp.parse(&s); err != nil {
		shown := value
		if sp.redact != nil {
			shown = sp.redact(value)
		}
		return Setting{}, fmt.Errorf("%w: %s = %q: %v (want %s)", ErrBadValue, key, shown, err, sp.Syntax)
	}
	return s, nil
}

func parseLevel(s *Setting) error {
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if strings.EqualFold(s.Value, l.String()) {
			s.Level, s.Value = l, strings.ToLower(l.String())
			return nil
		}
	}
	return errors.New("not a level")
}

func parseCount(s *Setting) error {
	n, err := strconv.Atoi(s.Value)
	if err != nil || n < 1 {
		return errors.New("not a positive integer")
	}
	s.N, s.Value = n, strconv.Itoa(n)
	return nil
}

func parseBacklog(s *Setting) error {
	n, err := strconv.Atoi(s.Value)
	if err != nil || n < 0 {
		return errors.New("not an integer, 0 or more")
	}
	s.N, s.Value = n, strconv.Itoa(n)
	return nil
}

func parseDuration(s *Setting) error {
	d, err := time.ParseDuration(s.Value)
	if err != nil || d < 0 {
		return errors.New("not a duration, 0 or more")
	}
	s.D, s.Value = d, d.String()
	return nil
}

func parseRate(s *Setting) error {
	if err := checkType(s.Arg); err != nil {
		return err
	}
	s.Type = s.Arg
	rate, burst, hasBurst := strings.Cut(s.Value, ":")
	r, err := strconv.ParseFloat(rate, 64)
	switch {
	case err != nil || math.IsNaN(r) || math.IsInf(r, 0):
		return errors.New("the rate is not a number")
	case r == 0 && hasBurst:
		return errors.New("a burst without a rate")
	case r == 0:
		s.Value = "0"
		return nil
	case r < task.MinRate || r > task.MaxRate:
		return fmt.Errorf("rate %v outside [%v, %v]", r, task.MinRate, task.MaxRate)
	}
	b := 1
	if hasBurst {
		if b, err = strconv.Atoi(burst); err != nil || b < 1 || b > task.MaxBurst {
			return fmt.Errorf("burst %q outside [1, %d]", burst, task.MaxBurst)
		}
	}
	s.Rate, s.Burst = r, b
	s.Value = strconv.FormatFloat(r, 'g', -1, 64) + ":" + strconv.Itoa(b)
	return nil
}

func parseConcurrency(s *Setting) error {
	ns, key, ok := strings.Cut(s.Arg, "/")
	switch {
	case !ok || ns == "" || key == "":
		return errors.New("the key names no <namespace>/<key>")
	case len(ns) > task.MaxNamespaceLen || !utf8.ValidString(ns):
		return fmt.Errorf("namespace: valid UTF-8 of 1 to %d bytes", task.MaxNamespaceLen)
	case len(key) > task.MaxConcurrencyKeyLen || !utf8.ValidString(key):
		return fmt.Errorf("concurrency key: valid UTF-8 of 1 to %d bytes", task.MaxConcurrencyKeyLen)
	}
	n, err := strconv.Atoi(s.Value)
	if err != nil || n < 0 || n > task.MaxConcurrencyLimit {
		return fmt.Errorf("not an integer in [0, %d]", task.MaxConcurrencyLimit)
	}
	s.Namespace, s.ConcKey, s.N, s.Value = ns, key, n, strconv.Itoa(n)
	return nil
}

func parsePaused(s *Setting) error {
	if err := checkType(s.Arg); err != nil {
		return err
	}
	switch s.Value {
	case "true", "false":
		s.Type, s.On = s.Arg, s.Value == "true"
		return nil
	}
	return errors.New("neither true nor false")
}

// parseWebhookURLs checks each comma-separated URL (spaces around it and empty ones
// dropped): http or https, with a host and no user info (a password belongs in a flag
// or a file, not in etcd). Canonical: the URLs joined by ",". Its errors never quote a
// URL whole (it may hold a credential in its path or query).
func parseWebhookURLs(s *Setting) error {
	var urls []string
	for i, raw := range strings.Split(s.Value, ",") {
		if raw = strings.TrimSpace(raw); raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			return fmt.Errorf("URL %d (%s) does not parse", i+1, notify.RedactURL(raw))
		case u.Scheme != "http" && u.Scheme != "https":
			return fmt.Errorf("URL %d: scheme %q is not http or https", i+1, u.Scheme)
		case u.Host == "":
			return fmt.Errorf("URL %d (%s) has no host", i+1, notify.RedactURL(raw))
		case u.User != nil:
			return fmt.Errorf("URL %d (%s) has user info: credentials stay in tockd's flags or files", i+1, notify.RedactURL(raw))
		case strings.ContainsAny(raw, " \t"):
			return fmt.Errorf("URL %d (%s) holds a space", i+1, notify.RedactURL(raw))
		}
		urls = append(urls, raw)
	}
	if len(urls) > MaxWebhookURLs {
		return fmt.Errorf("%d URLs, more than %d", len(urls), MaxWebhookURLs)
	}
	s.Value = strings.Join(urls, ",")
	return nil
}

// redactURLs is a webhook_urls value with each URL cut to scheme://host/….
func redactURLs(value string) string {
	var out []string
	for _, u := range strings.Split(value, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, notify.RedactURL(u))
		}
	}
	return strings.Join(out, ",")
}

// checkType checks a task type named in a key.
func checkType(typ string) error {
	if len(typ) > task.MaxTypeLen || !utf8.ValidString(typ) {
		return fmt.Errorf("type: valid UTF-8 of 1 to %d bytes", task.MaxTypeLen)
	}
	return nil
}
