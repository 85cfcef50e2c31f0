package admin

import (
	"encoding/hex"
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tock-sched/tock/core/task"
)

// consoleFuncs are the templates' helpers; each returns text that html/template escapes
// where it lands (taskURL's result is a URL, which it checks and escapes as one).
var consoleFuncs = template.FuncMap{
	"taskURL":  taskURL,
	"when":     when,
	"since":    since,
	"dur":      durText,
	"schedule": scheduleText,
	"retry":    retryText,
	"lastErr":  lastErr,
	"cut":      cut,
	"ns":       nsOrDefault,
	"join":     strings.Join,
}

// taskURL is the console's page of task (ns, id).
func taskURL(ns, id string) string {
	return "/console/task?" + url.Values{"ns": {nsOrDefault(ns)}, "id": {id}}.Encode()
}

// timeLayout is how the console writes times: UTC, to the millisecond.
const timeLayout = "2006-01-02 15:04:05.000 UTC"

func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format(timeLayout)
}

// since is how long ago t was, to the second.
func since(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func durText(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.Round(time.Microsecond).String()
}

func scheduleText(s task.Schedule) string {
	switch s.Kind {
	case task.KindAt:
		return "at " + when(s.At)
	case task.KindAfter:
		return "after " + s.Delay.String()
	case task.KindEvery:
		return fmt.Sprintf("every %v (fixed %s)", s.Interval, s.Anchor)
	case task.KindCron:
		loc := "UTC"
		if s.Location != nil {
			loc = s.Location.String()
		}
		return fmt.Sprintf("cron %q in %s", s.Cron, loc)
	}
	return s.Kind.String()
}

func retryText(p task.RetryPolicy) string {
	if p.MaxAttempts <= 1 {
		return "one attempt, no retry"
	}
	s := fmt.Sprintf("up to %d attempts, backoff %v ×%g up to %v", p.MaxAttempts, p.InitialBackoff, p.Multiplier, p.MaxBackoff)
	if p.Jitter > 0 {
		s += fmt.Sprintf(", jitter %g", p.Jitter)
	}
	if p.MaxRetryDuration > 0 {
		s += fmt.Sprintf(", within %v", p.MaxRetryDuration)
	}
	return s
}

// lastErr is the error of a dead letter's last attempt.
func lastErr(as []task.AttemptRecord) string {
	for i := len(as) - 1; i >= 0; i-- {
		if as[i].Err != "" {
			return as[i].Err
		}
	}
	return ""
}

// cut shortens s to at most n runes, marking the cut.
func cut(n int, s string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// payloadView is a task's payload as its page shows it: text if it is printable UTF-8,
// else hex; at most consolePayloadPreview bytes of it.
type payloadView struct {
	Len   int
	Text  string
	Hex   bool
	Whole bool
}

func previewOf(p []byte) payloadView {
	v := payloadView{Len: len(p), Whole: len(p) <= consolePayloadPreview}
	shown := p[:min(len(p), consolePayloadPreview)]
	text := shown
	if !v.Whole { // the cut may split the last rune: up to 3 of its bytes go
		for i := 0; i < utf8.UTFMax-1 && !utf8.Valid(text); i++ {
			text = text[:len(text)-1]
		}
	}
	if utf8.Valid(text) && !strings.ContainsFunc(string(text), func(r rune) bool {
		return !unicode.IsPrint(r) && !unicode.IsSpace(r)
	}) {
		v.Text = string(text)
		return v
	}
	v.Hex, v.Text = true, hex.EncodeToString(shown)
	return v
}
