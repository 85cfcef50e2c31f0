package settings

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestParseAccepts: each setting's values, parsed into its field, with canonical text
// that parses to the same setting again.
func TestParseAccepts(t *testing.T) {
	for _, c := range []struct {
		key, value string
		want       Setting
	}{
		{"log_level", "debug", Setting{Name: LogLevel, Value: "debug", Level: slog.LevelDebug}},
		{"log_level", "WARN", Setting{Name: LogLevel, Value: "warn", Level: slog.LevelWarn}},
		{"max_waiting_runs", "5000", Setting{Name: MaxWaitingRuns, Value: "5000", N: 5000}},
		{"max_waiting_runs_per_type", "1", Setting{Name: MaxWaitingRunsPerType, Value: "1", N: 1}},
		{"rate_limit/email", "100", Setting{Name: RateLimit, Arg: "email", Type: "email", Value: "100:1", Rate: 100, Burst: 1}},
		{"rate_limit/a/b", "0.5:20", Setting{Name: RateLimit, Arg: "a/b", Type: "a/b", Value: "0.5:20", Rate: 0.5, Burst: 20}},
		{"rate_limit/email", "0", Setting{Name: RateLimit, Arg: "email", Type: "email", Value: "0"}},
		{"concurrency_limit/shop/cust/42", "3", Setting{Name: ConcurrencyLimit, Arg: "shop/cust/42", Namespace: "shop",
			ConcKey: "cust/42", Value: "3", N: 3}},
		{"concurrency_limit/default/k", "0", Setting{Name: ConcurrencyLimit, Arg: "default/k", Namespace: "default", ConcKey: "k", Value: "0"}},
		{"paused/email", "true", Setting{Name: Paused, Arg: "email", Type: "email", Value: "true", On: true}},
		{"paused/email", "false", Setting{Name: Paused, Arg: "email", Type: "email", Value: "false"}},
		{"alert_backlog", "0", Setting{Name: AlertBacklog, Value: "0"}},
		{"alert_backlog", "500", Setting{Name: AlertBacklog, Value: "500", N: 500}},
		{"alert_lateness_p95", "1500ms", Setting{Name: AlertLatenessP95, Value: "1.5s", D: 1500 * time.Millisecond}},
		{"alert_for", "0s", Setting{Name: AlertFor, Value: "0s"}},
		{"retention", "90m", Setting{Name: Retention, Value: "1h30m0s", D: 90 * time.Minute}},
		{"retention", "0", Setting{Name: Retention, Value: "0s"}},
		{"webhook_urls", "", Setting{Name: WebhookURLs, Value: ""}},
		{"webhook_urls", " http://127.0.0.1:9/a , ,https://h.example/hook?k=1", Setting{Name: WebhookURLs,
			Value: "http://127.0.0.1:9/a,https://h.example/hook?k=1"}},
	} {
		c.want.Key = c.key
		got, err := Parse(c.key, c.value)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q, %q) = %+v, %v; want %+v", c.key, c.value, got, err, c.want)
			continue
		}
		again, err := Parse(c.key, got.Value)
		if err != nil || again != got {
			t.Errorf("Parse(%q, canonical %q) = %+v, %v; want %+v", c.key, got.Value, again, err, got)
		}
	}
}

// TestParseRefuses: unknown keys and bad values are refused with the error of their kind,
// naming the key (and the value).
func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		key, value string
		want       error
	}{
		{"no_such_key", "1", ErrUnknownKey},
		{"", "1", ErrUnknownKey},
		{"log_level/x", "info", ErrUnknownKey},
		{"rate_limit", "1", ErrUnknownKey},
		{"rate_limit/", "1", ErrUnknownKey},
		{"paused/email/", "true", ErrUnknownKey},
		{"log_level", "verbose", ErrBadValue},
		{"log_level", "INFO+2", ErrBadValue},
		{"max_waiting_runs", "0", ErrBadValue},
		{"max_waiting_runs", "-5", ErrBadValue},
		{"max_waiting_runs", "ten", ErrBadValue},
		{"max_waiting_runs_per_type", "", ErrBadValue},
		{"rate_limit/email", "fast", ErrBadValue},
		{"rate_limit/email", "NaN", ErrBadValue},
		{"rate_limit/email", "1e-4", ErrBadValue},
		{"rate_limit/email", "2e9", ErrBadValue},
		{"rate_limit/email", "10:0", ErrBadValue},
		{"rate_limit/email", "10:2000000", ErrBadValue},
		{"rate_limit/email", "0:5", ErrBadValue},
		{"rate_limit/" + strings.Repeat("t", 129), "1", ErrBadValue},
		{"concurrency_limit/shop", "3", ErrBadValue},
		{"concurrency_limit/shop/", "3", ErrUnknownKey},
		{"concurrency_limit//k", "3", ErrBadValue},
		{"concurrency_limit/shop/k", "-1", ErrBadValue},
		{"concurrency_limit/shop/k", "1048577", ErrBadValue},
		{"paused/email", "yes", ErrBadValue},
		{"alert_backlog", "-1", ErrBadValue},
		{"alert_lateness_p95", "1", ErrBadValue},
		{"alert_for", "-5m", ErrBadValue},
		{"alert_for/x", "5m", ErrUnknownKey},
		{"retention", "-1s", ErrBadValue},
		{"retention", "forever", ErrBadValue},
		{"retention", "", ErrBadValue},
		{"webhook_urls/x", "http://h", ErrUnknownKey},
	} {
		_, err := Parse(c.key, c.value)
		if !errors.Is(err, c.want) {
			t.Errorf("Parse(%q, %q): %v, want %v", c.key, c.value, err, c.want)
			continue
		}
		if !strings.Contains(err.Error(), "\""+c.key+"\"") && !strings.Contains(err.Error(), c.key+" = \""+c.value+"\"") {
			t.Errorf("Parse(%q, %q): %q names neither the key nor the value", c.key, c.value, err)
		}
	}
}

// TestSpecsDocumented: every spec has its syntax, default and doc line, and Lookup finds
// it by its pattern.
func TestSpecsDocumented(t *testing.T) {
	for _, sp := range Specs() {
		if sp.Syntax == "" || sp.Default == "" || sp.Doc == "" || sp.parse == nil {
			t.Errorf("%s: syntax %q, default %q, doc %q, parser set %t", sp.Name, sp.Syntax, sp.Default, sp.Doc, sp.parse != nil)
		}
		key := sp.Name
		if sp.Arg != "" {
			key += "/x/y"
		}
		got, _, err := Lookup(key)
		if err != nil || got.Name != sp.Name {
			t.Errorf("Lookup(%q) = %v, %v; want %s", key, got, err, sp.Name)
		}
	}
}

// TestWebhookURLs: webhook_urls refuses what is not an http(s) URL with a host and no
// user info, and more than MaxWebhookURLs of them, without ever quoting a URL's path or
// query (it may be a credential); Loggable cuts each URL so; WebhookURLs splits it.
func TestWebhookURLs(t *testing.T) {
	many := strings.TrimSuffix(strings.Repeat("http://h/x,", MaxWebhookURLs+1), ",")
	for _, v := range []string{"ftp://h/secret-path", "http:///secret-path", "https://user:pw@h/secret-path",
		"h/secret-path", "http://h/secret-path,mailto:secret-path", "http://h/secret path", many} {
		_, err := Parse(WebhookURLs, v)
		if !errors.Is(err, ErrBadValue) || !strings.Contains(err.Error(), "webhook_urls") {
			t.Errorf("Parse(webhook_urls, %q): %v, want ErrBadValue naming the key", v, err)
		} else if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "pw") {
			t.Errorf("Parse(webhook_urls, %q): %q quotes a URL's path or user info", v, err)
		}
	}
	s, err := Parse(WebhookURLs, "https://open.feishu.cn/hook/TOKEN,http://127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.WebhookURLs(); len(got) != 2 || got[0] != "https://open.feishu.cn/hook/TOKEN" || got[1] != "http://127.0.0.1:9" {
		t.Fatalf("WebhookURLs() = %q", got)
	}
	if got := Loggable(WebhookURLs, s.Value); got != "https://open.feishu.cn/…,http://127.0.0.1:9" {
		t.Fatalf("Loggable = %q, want each URL cut to scheme://host/…", got)
	}
	if got := Loggable(MaxWaitingRuns, "7"); got != "7" {
		t.Fatalf("Loggable(max_waiting_runs, 7) = %q", got)
	}
	if empty, _ := Parse(WebhookURLs, ""); len(empty.WebhookURLs()) != 0 {
		t.Fatalf("empty webhook_urls has URLs %q", empty.WebhookURLs())
	}
}
