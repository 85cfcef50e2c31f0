package notify

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A webhook URL's path and query carry the bot's key: neither New's errors nor a failed
// delivery's log may show them, only scheme://host/….
func TestWebhookURLRedacted(t *testing.T) {
	const key = "b0t-k3y"
	for _, raw := range []string{
		"https://hooks.example/open-apis/bot/v2/hook/" + key + "%zz", // a bad escape
		"https://hooks.example/bot?key=" + key + "\x7f",              // a control character
		"https://hooks.example:99999/hook/" + key,                    // a bad port
		"http://[::1/hook/" + key,                                    // a bad host
		"https://user:" + key + "@hooks.example/hook",                // a password
		"https://hooks.example/hook/" + key + "?x=1",                 // valid, with a bad format below
	} {
		_, err := New(WithWebhooks(Webhook{URL: raw, Format: "slack"}))
		if err == nil || strings.Contains(err.Error(), key) {
			t.Errorf("New with %q: %v; want an error without the key", raw, err)
		}
	}

	// A receiver that redirects to a closed port, then one whose redirect cannot be
	// parsed: each delivery fails, and the log names neither URL's path.
	closed := newReceiver(t, nil)
	closedURL := closed.URL
	closed.Close()
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.Header().Set("Location", closedURL+"/moved/"+key)
		} else {
			w.Header().Set("Location", "http://[::1/moved/"+key)
		}
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
	var logs bytes.Buffer
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL + "/hook/" + key + "?sign=" + key}}, Retries: NoRetries,
		RetryBackoff: time.Millisecond, Burst: 10, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	n.Notify(Alert{Key: "a"})
	n.Notify(Alert{Key: "b"})
	closeDrained(t, n)
	if s := n.Stats(); s.Failed != 2 {
		t.Errorf("stats %+v, want 2 failed", s)
	}
	l := logs.String()
	if strings.Contains(l, key) || !strings.Contains(l, rc.URL+"/…") || strings.Count(l, "not delivered") != 2 {
		t.Errorf("log %q: want two failures naming %s/… and never the key", l, rc.URL)
	}
}

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://h.example/hook/k":     "https://h.example/…",
		"https://h.example:8443/x?y=z": "https://h.example:8443/…",
		"https://h.example":            "https://h.example",
		"https://h.example?key=k":      "https://h.example/…",
		"https://u:p@h.example/x":      "https://h.example/…",
		"http://127.0.0.1:1/":          "http://127.0.0.1:1/…",
		"not a url %zz":                "(an unparsable URL)",
	} {
		if got := redactURL(raw); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", raw, got, want)
		}
	}
	err := errors.New(`Post "https://h.example/hook/k?s=1": failed to parse Location header "http://[::1/x/k": bad`)
	if got, want := redactText(err.Error()), `Post "https://h.example/…": failed to parse Location header "http://[::1/…": bad`; got != want {
		t.Errorf("redactText = %q, want %q", got, want)
	}
}
