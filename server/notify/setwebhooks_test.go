package notify

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"testing"
)

// keyOf is the "key" of a JSON alert body.
func keyOf(t *testing.T, body []byte) string {
	t.Helper()
	var a struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return a.Key
}

// keysOf drains what rc has received (the Notifier closed: nothing more comes).
func keysOf(t *testing.T, rc *receiver) []string {
	t.Helper()
	var keys []string
	for {
		select {
		case b := <-rc.bodies:
			keys = append(keys, keyOf(t, b))
		default:
			return keys
		}
	}
}

// TestSetWebhooksKeepsAlertsInFlight: a change of targets while alerts wait for a slow
// webhook loses none of them. Alerts a1 and a2 are queued for A (blocked on a1) and C;
// SetWebhooks(A, B) keeps A's queue, retires C (which still posts a1 and a2) and adds B,
// which gets only a3, queued after the change; A gets all three, once each, in order;
// every delivery is counted Sent.
func TestSetWebhooksKeepsAlertsInFlight(t *testing.T) {
	release := make(chan struct{})
	a := newReceiver(t, func(k int, w http.ResponseWriter, r *http.Request) {
		if k == 1 {
			<-release
		}
	})
	b, c := newReceiver(t, nil), newReceiver(t, nil)
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: a.URL}, {URL: c.URL}}})
	n.Notify(Alert{Key: "a1"})
	if k := keyOf(t, a.next(t)); k != "a1" { // A's sender is now blocked in a1's POST
		t.Fatalf("A first got %q", k)
	}
	n.Notify(Alert{Key: "a2"})
	if err := n.SetWebhooks(Webhook{URL: a.URL}, Webhook{URL: b.URL}); err != nil {
		t.Fatal(err)
	}
	if got, want := n.Webhooks(), []Webhook{{URL: a.URL, Format: FormatJSON}, {URL: b.URL, Format: FormatJSON}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Webhooks() = %+v, want %+v", got, want)
	}
	n.Notify(Alert{Key: "a3"})
	close(release)
	closeDrained(t, n)
	for _, w := range []struct {
		name string
		rc   *receiver
		want []string
	}{{"A (kept)", a, []string{"a2", "a3"}}, {"B (added)", b, []string{"a3"}}, {"C (retired)", c, []string{"a1", "a2"}}} {
		// A's a1 was read above.
		if got := keysOf(t, w.rc); !slices.Equal(got, w.want) {
			t.Errorf("%s received %q, want %q", w.name, got, w.want)
		}
	}
	if s := n.Stats(); s != (Stats{Sent: 6}) {
		t.Errorf("stats %+v, want 6 sent and nothing else", s)
	}
}

// TestSetWebhooksFromNone: a Notifier made with no webhook takes alerts (sending them
// nowhere) until SetWebhooks gives it one; SetWebhooks() takes them all away again.
func TestSetWebhooksFromNone(t *testing.T) {
	rc := newReceiver(t, nil)
	n := mustNew(t, Options{})
	if n.Notify(Alert{Key: "nowhere"}) || len(n.Webhooks()) != 0 {
		t.Fatalf("a Notifier with no webhook queued an alert, or lists %v", n.Webhooks())
	}
	if err := n.SetWebhooks(Webhook{URL: rc.URL}); err != nil {
		t.Fatal(err)
	}
	if !n.Notify(Alert{Key: "here"}) {
		t.Fatal("not queued after SetWebhooks")
	}
	if k := keyOf(t, rc.next(t)); k != "here" {
		t.Fatalf("received %q, want here", k)
	}
	if err := n.SetWebhooks(); err != nil || len(n.Webhooks()) != 0 {
		t.Fatalf("SetWebhooks(): %v, left %v", err, n.Webhooks())
	}
	if n.Notify(Alert{Key: "gone"}) {
		t.Fatal("queued with no webhook left")
	}
	closeDrained(t, n)
	if got := keysOf(t, rc); len(got) != 0 {
		t.Fatalf("received %q after its webhook was taken away", got)
	}
}

// TestSetWebhooksRefuses: a bad webhook is refused naming it, and nothing changes;
// after Close, SetWebhooks is ErrClosed.
func TestSetWebhooksRefuses(t *testing.T) {
	rc := newReceiver(t, nil)
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL}}})
	for _, bad := range []Webhook{{URL: "ftp://x/y"}, {URL: "http:///hook"}, {URL: rc.URL, Format: "slack"}, {URL: rc.URL, Secret: "s"}} {
		if err := n.SetWebhooks(Webhook{URL: rc.URL}, bad); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("SetWebhooks(ok, %+v): %v, want ErrInvalidOption", bad, err)
		}
	}
	if got := n.Webhooks(); len(got) != 1 || got[0].URL != rc.URL {
		t.Fatalf("after refusals Webhooks() = %+v, want the first one alone", got)
	}
	closeDrained(t, n)
	if err := n.SetWebhooks(Webhook{URL: rc.URL}); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetWebhooks after Close: %v, want ErrClosed", err)
	}
}
