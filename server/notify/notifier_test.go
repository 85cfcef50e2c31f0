package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDedup(t *testing.T) {
	rc := newReceiver(t, nil)
	clock := newClock()
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL}}, DedupWindow: time.Minute, Clock: clock.Now})
	a := Alert{Kind: KindBacklog, Key: "backlog"}
	if !n.Notify(a) {
		t.Fatal("first alert not queued")
	}
	clock.Advance(59 * time.Second)
	if n.Notify(a) {
		t.Error("same key and state within the window was queued")
	}
	if !n.Notify(Alert{Kind: KindBacklog, Key: "other"}) {
		t.Error("another key was suppressed")
	}
	resolved := a
	resolved.Resolved = true
	if !n.Notify(resolved) {
		t.Error("a change of state (resolved) was suppressed")
	}
	if n.Notify(resolved) {
		t.Error("a repeated resolved alert within the window was queued")
	}
	clock.Advance(time.Minute)
	if !n.Notify(resolved) {
		t.Error("same key and state after the window was suppressed")
	}
	closeDrained(t, n)
	if s := n.Stats(); s.Sent != 4 || s.Deduplicated != 2 {
		t.Errorf("stats %+v, want 4 sent, 2 deduplicated", s)
	}
}

func TestDedupMaxKeys(t *testing.T) {
	rc := newReceiver(t, nil)
	clock := newClock()
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL}}, MaxKeys: 2, Burst: 100, Clock: clock.Now})
	for _, k := range []string{"a", "b", "c"} {
		n.Notify(Alert{Key: k})
	}
	n.mu.Lock()
	_, hasA := n.keys["a"]
	size := len(n.keys)
	n.mu.Unlock()
	if size != 2 || hasA {
		t.Errorf("%d keys remembered (a remembered: %v), want 2 without a", size, hasA)
	}
	if !n.Notify(Alert{Key: "a"}) {
		t.Error("a forgotten key was still suppressed")
	}
	if n.Notify(Alert{Key: "c"}) {
		t.Error("a remembered key was not suppressed")
	}
}

func TestRateLimit(t *testing.T) {
	rc := newReceiver(t, nil)
	clock := newClock()
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL}}, RateLimit: 1, Burst: 3, Clock: clock.Now})
	queued := 0
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if n.Notify(Alert{Key: k}) {
			queued++
		}
	}
	if s := n.Stats(); queued != 3 || s.RateLimited != 2 {
		t.Fatalf("%d queued, stats %+v; want 3 queued, 2 rate limited", queued, s)
	}
	for range 3 {
		rc.next(t)
	}
	// One second refills one token; the next alert tells what was missed.
	clock.Advance(time.Second)
	if !n.Notify(Alert{Key: "f"}) {
		t.Fatal("alert after the refill not queued")
	}
	var got struct {
		Key    string
		Fields map[string]string
	}
	json.Unmarshal(rc.next(t), &got)
	if got.Key != "f" || got.Fields["suppressed"] != "2" {
		t.Errorf("got %+v, want key f with suppressed=2", got)
	}
	if n.Notify(Alert{Key: "g"}) {
		t.Error("queued with an empty bucket")
	}
	// A rate-limited alert is not remembered: it may go once the bucket refills.
	clock.Advance(time.Second)
	if !n.Notify(Alert{Key: "g"}) {
		t.Error("a rate-limited key was deduplicated")
	}
	closeDrained(t, n)
	if s := n.Stats(); s.Sent != 5 || s.RateLimited != 3 || s.Deduplicated != 0 {
		t.Errorf("stats %+v, want 5 sent, 3 rate limited", s)
	}
}

func TestRetry(t *testing.T) {
	for _, c := range []struct {
		name     string
		status   []int // per request; the last repeats
		retries  int
		requests int
		sent     bool
	}{
		{"500 then 200", []int{500, 200}, 3, 2, true},
		{"429 then 200", []int{429, 200}, 3, 2, true},
		{"503 always", []int{503}, 2, 3, false},
		{"400 is final", []int{400}, 3, 1, false},
		{"no retries", []int{500, 200}, NoRetries, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := newReceiver(t, func(k int, w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(c.status[min(k, len(c.status))-1])
			})
			n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL}}, Retries: c.retries, RetryBackoff: time.Millisecond})
			n.Notify(Alert{Key: "k"})
			closeDrained(t, n)
			if got := len(rc.bodies); got != c.requests {
				t.Errorf("%d requests, want %d", got, c.requests)
			}
			s := n.Stats()
			if c.sent && (s.Sent != 1 || s.Failed != 0) || !c.sent && (s.Sent != 0 || s.Failed != 1) {
				t.Errorf("stats %+v, want sent %v", s, c.sent)
			}
		})
	}
}

func TestNetworkErrorRetried(t *testing.T) {
	// A listener closed before the POST: connection refused, retried, then failed.
	rc := newReceiver(t, nil)
	url := rc.URL
	rc.Close()
	var logs bytes.Buffer
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: url + "/secret-token"}}, Retries: 1, RetryBackoff: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	n.Notify(Alert{Key: "k"})
	closeDrained(t, n)
	if s := n.Stats(); s.Failed != 1 {
		t.Errorf("stats %+v, want 1 failed", s)
	}
	// The failure is logged, with the webhook's host but not its path (a credential).
	if l := logs.String(); !strings.Contains(l, "2 attempt(s)") || !strings.Contains(l, "127.0.0.1") || strings.Contains(l, "secret-token") {
		t.Errorf("log %q", l)
	}
}

func TestHangingReceiverDoesNotBlock(t *testing.T) {
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release) // before rc.Close (a cleanup), which waits for handlers
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL}}, QueueSize: 2, Timeout: time.Hour, Burst: 100})
	if !n.Notify(Alert{Key: "0"}) {
		t.Fatal("first alert not queued")
	}
	select {
	case <-entered: // the sender is now stuck in the POST
	case <-time.After(waitLimit):
		t.Fatal("the POST never reached the receiver")
	}
	for _, k := range []string{"1", "2"} {
		if !n.Notify(Alert{Key: k}) {
			t.Errorf("alert %s not queued with room in the queue", k)
		}
	}
	// The queue is full: Notify drops and returns instead of waiting (were it to wait,
	// this test would hang).
	for _, k := range []string{"3", "4"} {
		if n.Notify(Alert{Key: k}) {
			t.Errorf("alert %s queued beyond QueueSize", k)
		}
	}
	if q := len(n.hooks[0].queue); q != 2 {
		t.Errorf("queue holds %d, want 2", q)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want a deadline error", err)
	}
	if n.Notify(Alert{Key: "5"}) {
		t.Error("Notify after Close returned true")
	}
	// 2 dropped on a full queue, 1 cut off in flight, 2 left queued, 1 after Close.
	if s := n.Stats(); s.Dropped != 6 || s.Sent+s.Failed != 0 {
		t.Errorf("stats %+v, want 6 dropped", s)
	}
	if err := n.Close(ctx); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestBadOptions(t *testing.T) {
	ok := Webhook{URL: "http://127.0.0.1:1/hook"}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Webhooks: []Webhook{{URL: "ftp://x/y"}}}, `scheme "ftp"`},
		{Options{Webhooks: []Webhook{{URL: "127.0.0.1:80/hook"}}}, "Webhooks[0].URL"},
		{Options{Webhooks: []Webhook{{URL: "http:///hook"}}}, "no host"},
		{Options{Webhooks: []Webhook{ok, {URL: "http://h", Format: "slack"}}}, `Webhooks[1].Format "slack"`},
		{Options{Webhooks: []Webhook{{URL: "http://h", Secret: "s"}}}, "Webhooks[0].Secret"},
		{Options{Webhooks: []Webhook{ok}, DedupWindow: -time.Second}, "DedupWindow"},
		{Options{Webhooks: []Webhook{ok}, Timeout: -1}, "Timeout"},
		{Options{Webhooks: []Webhook{ok}, RetryBackoff: -1}, "RetryBackoff"},
		{Options{Webhooks: []Webhook{ok}, RetryBackoff: time.Minute, MaxRetryBackoff: time.Second}, "MaxRetryBackoff"},
		{Options{Webhooks: []Webhook{ok}, Retries: -2}, "Retries"},
		{Options{Webhooks: []Webhook{ok}, RateLimit: -1}, "RateLimit"},
		{Options{Webhooks: []Webhook{ok}, Burst: -1}, "Burst"},
		{Options{Webhooks: []Webhook{ok}, QueueSize: -1}, "QueueSize"},
		{Options{Webhooks: []Webhook{ok}, MaxKeys: -1}, "MaxKeys"},
		{Options{Webhooks: []Webhook{ok}, MaxText: 8}, "MaxText"},
		{Options{Webhooks: []Webhook{ok}, MaxFields: -1}, "MaxFields"},
	} {
		n, err := New(WithOptions(c.o))
		if err == nil {
			n.Close(context.Background())
			t.Errorf("New(%+v) accepted", c.o)
			continue
		}
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOption naming %q", c.o, err, c.want)
		}
	}
}

// TestOptionSetters: each WithX sets its own field (WithOptions is what every other
// test builds with).
func TestOptionSetters(t *testing.T) {
	hooks := []Webhook{{URL: "http://h/1"}, {URL: "http://h/2", Format: FormatFeishu}}
	httpClient, logger := &http.Client{}, slog.New(slog.DiscardHandler)
	var o Options
	for _, opt := range []Option{WithWebhooks(hooks...), WithNode("n"), WithDedupWindow(1), WithMaxKeys(2),
		WithRateLimit(3), WithBurst(4), WithQueueSize(5), WithTimeout(6), WithRetries(7), WithRetryBackoff(8),
		WithMaxRetryBackoff(9), WithMaxText(10), WithMaxFields(11), WithHTTPClient(httpClient), WithLogger(logger),
		WithClock(time.Now)} {
		opt(&o)
	}
	if o.Clock == nil {
		t.Fatal("WithClock left Clock nil")
	}
	o.Clock = nil
	want := Options{Webhooks: hooks, Node: "n", DedupWindow: 1, MaxKeys: 2, RateLimit: 3, Burst: 4, QueueSize: 5,
		Timeout: 6, Retries: 7, RetryBackoff: 8, MaxRetryBackoff: 9, MaxText: 10, MaxFields: 11,
		HTTPClient: httpClient, Logger: logger}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("options set field by field = %+v, want %+v", o, want)
	}
}
