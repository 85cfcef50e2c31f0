package notify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tock-sched/tock/core/task"
)

func TestJSONBody(t *testing.T) {
	rc := newReceiver(t, nil)
	clock := newClock()
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL}}, Node: "node-a", Clock: clock.Now})
	a := Alert{
		Kind: KindDeadLetter, Key: "dead_letter/ns/t1", Severity: SeverityCritical,
		Title: "Task ns/t1 is dead", Text: "it \"failed\"",
		Fields: []Field{{"zeta", "1"}, {"alpha", "2"}, {"mid", "3"}},
	}
	if !n.Notify(a) {
		t.Fatal("Notify returned false")
	}
	body := rc.next(t)
	var got struct {
		Kind, Key, Severity, Title, Text, Time, Node string
		Fields                                       map[string]string
		Resolved                                     *bool
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if got.Kind != "dead_letter" || got.Key != a.Key || got.Severity != "critical" || got.Title != a.Title ||
		got.Text != a.Text || got.Node != "node-a" || got.Resolved == nil || *got.Resolved {
		t.Errorf("body %s", body)
	}
	if want := clock.Now().Format(time.RFC3339Nano); got.Time != want {
		t.Errorf("time %q, want %q", got.Time, want)
	}
	if len(got.Fields) != 3 || got.Fields["alpha"] != "2" {
		t.Errorf("fields %v", got.Fields)
	}
	// The fields object keeps the alert's order.
	if i, j, k := bytes.Index(body, []byte(`"zeta"`)), bytes.Index(body, []byte(`"alpha"`)), bytes.Index(body, []byte(`"mid"`)); !(i < j && j < k) {
		t.Errorf("fields out of order in %s", body)
	}
	closeDrained(t, n)
	if s := n.Stats(); s.Sent != 1 || s.Failed+s.Dropped+s.RateLimited+s.Deduplicated != 0 {
		t.Errorf("stats %+v", s)
	}
}

// feishuCardBody is the part of a Feishu body the tests read.
type feishuCardBody struct {
	Timestamp string `json:"timestamp"`
	Sign      string `json:"sign"`
	MsgType   string `json:"msg_type"`
	Card      struct {
		Header struct {
			Title    struct{ Tag, Content string } `json:"title"`
			Template string                        `json:"template"`
		} `json:"header"`
		Elements []struct {
			Tag    string `json:"tag"`
			Text   *struct{ Tag, Content string }
			Fields []struct {
				IsShort bool `json:"is_short"`
				Text    struct{ Tag, Content string }
			} `json:"fields"`
			Elements []struct{ Tag, Content string } `json:"elements"`
		} `json:"elements"`
	} `json:"card"`
}

func TestFeishuBodyAndSignature(t *testing.T) {
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"code":0,"msg":"success","data":{}}`))
	})
	clock := newClock()
	const secret = "s3cr3t"
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL + "/open-apis/bot/v2/hook/tok", Format: FormatFeishu, Secret: secret}}, Node: "node-a", Clock: clock.Now})
	n.Notify(Alert{Kind: KindBacklog, Severity: SeverityCritical, Title: "Backlog", Text: "**many** tasks", Fields: []Field{{"queued", "12"}}})

	var m feishuCardBody
	if body := rc.next(t); json.Unmarshal(body, &m) != nil {
		t.Fatalf("body %s", body)
	}
	if m.MsgType != "interactive" || m.Card.Header.Title.Tag != "plain_text" || m.Card.Header.Title.Content != "Backlog" || m.Card.Header.Template != "red" {
		t.Errorf("header %+v, msg_type %q", m.Card.Header, m.MsgType)
	}
	if len(m.Card.Elements) != 3 {
		t.Fatalf("elements %+v", m.Card.Elements)
	}
	if e := m.Card.Elements[0]; e.Tag != "div" || e.Text == nil || e.Text.Tag != "lark_md" || e.Text.Content != "**many** tasks" {
		t.Errorf("text element %+v", e)
	}
	if e := m.Card.Elements[1]; e.Tag != "div" || len(e.Fields) != 1 || !e.Fields[0].IsShort || e.Fields[0].Text.Tag != "lark_md" || e.Fields[0].Text.Content != "**queued**\n12" {
		t.Errorf("fields element %+v", e)
	}
	if e := m.Card.Elements[2]; e.Tag != "note" || len(e.Elements) != 1 || !strings.Contains(e.Elements[0].Content, "node-a") {
		t.Errorf("note element %+v", e)
	}
	// The signature, recomputed from the docs' recipe.
	if want := strconv.FormatInt(clock.Now().Unix(), 10); m.Timestamp != want {
		t.Errorf("timestamp %q, want %q", m.Timestamp, want)
	}
	mac := hmac.New(sha256.New, []byte(m.Timestamp+"\n"+secret))
	if want := base64.StdEncoding.EncodeToString(mac.Sum(nil)); m.Sign != want || m.Sign == "" {
		t.Errorf("sign %q, want %q", m.Sign, want)
	}

	// Resolved: green, marked in the title.
	n.Notify(Alert{Kind: KindBacklog, Severity: SeverityCritical, Title: "Backlog", Resolved: true})
	m = feishuCardBody{}
	json.Unmarshal(rc.next(t), &m)
	if m.Card.Header.Template != "green" || !strings.Contains(m.Card.Header.Title.Content, "resolved") {
		t.Errorf("resolved header %+v", m.Card.Header)
	}
	closeDrained(t, n)
	if s := n.Stats(); s.Sent != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestFeishuUnsignedAndRefused(t *testing.T) {
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time"}`))
	})
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL, Format: FormatFeishu}}, RetryBackoff: time.Millisecond})
	n.Notify(Alert{Kind: KindLateness})
	body := rc.next(t)
	if bytes.Contains(body, []byte(`"sign"`)) || bytes.Contains(body, []byte(`"timestamp"`)) {
		t.Errorf("unsigned body carries a signature: %s", body)
	}
	closeDrained(t, n)
	// A non-zero code is final: failed, and not retried.
	if s := n.Stats(); s.Failed != 1 || s.Sent != 0 || len(rc.bodies) != 0 {
		t.Errorf("stats %+v, %d more requests", s, len(rc.bodies))
	}
}

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 5, "hello"},
		{"hello", 10, "hello"},
		{"hello world", 8, "hello…"}, // 5 bytes + 3 of the mark
		{"héllo wörld", 7, "hél…"},   // é is 2 bytes: 4 bytes kept + 3 of the mark
		{"ééééé", 9, "ééé…"},         // a cut at 6 bytes lands on a rune start
		{"ééééé", 8, "éé…"},          // a cut at 5 is inside the 3rd é: back to 4
		{"abcdef", 2, "ab"},          // too short for the mark
		{"日本語テキスト", 2, ""},           // no whole rune fits
		{strings.Repeat("x", 20), 16, strings.Repeat("x", 13) + "…"},
	} {
		got := truncate(c.s, c.n)
		if len(got) > c.n || !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q: over the bound or invalid UTF-8", c.s, c.n, got)
		}
		if got != c.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func TestNormalizeBounds(t *testing.T) {
	o := Options{Node: "n1", MaxText: 16, MaxFields: 2}
	now := time.Unix(100, 0)
	fields := []Field{{"a", "1"}, {"a", "dup"}, {"b", strings.Repeat("v", 40)}, {"c", "3"}}
	a := Alert{Kind: KindBacklog, Text: strings.Repeat("t", 100), Fields: fields}.normalize(&o, now)
	if a.Key != "backlog" || a.Title != "backlog" || a.Severity != SeverityWarning || a.Node != "n1" || !a.Time.Equal(now) {
		t.Errorf("defaults not filled: %+v", a)
	}
	if len(a.Text) > 16 || len(a.Fields) != 2 || a.Fields[0] != (Field{"a", "1"}) || a.Fields[1].Key != "b" || len(a.Fields[1].Value) > 16 {
		t.Errorf("bounds not applied: %+v", a)
	}
	if fields[1].Value != "dup" {
		t.Error("normalize changed the caller's fields")
	}
}

func TestDeadLetterAlert(t *testing.T) {
	a := DeadLetterAlert(task.Event{Kind: task.EventDead, Namespace: "ns", ID: "t1", Type: "email", Attempt: 3, Err: errors.New("smtp down")})
	if a.Kind != KindDeadLetter || a.Key != "dead_letter/ns/t1" || a.Severity != SeverityCritical {
		t.Errorf("alert %+v", a)
	}
	if last := a.Fields[len(a.Fields)-1]; last != (Field{"error", "smtp down"}) {
		t.Errorf("fields %+v", a.Fields)
	}
	if l := LeaderChangeAlert("node-b", 7); l.Key != "leader_change/7" || l.Kind != KindLeaderChange {
		t.Errorf("leader alert %+v", l)
	}
}
