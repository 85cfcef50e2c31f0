package notify

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tock-sched/tock/core/task"
)

// Kind names what an alert is about. The kinds below are the ones tockd raises; any other
// non-empty string is passed through as is.
type Kind string

const (
	KindDeadLetter   Kind = "dead_letter"   // a task occurrence failed for good
	KindLeaderChange Kind = "leader_change" // another node became leader
	KindBacklog      Kind = "backlog"       // too many due tasks waiting for a worker
	KindLateness     Kind = "lateness"      // tasks start too long after they are due
)

// Severity grades an alert; it picks the Feishu card's colour.
type Severity string

const (
	SeverityInfo     Severity = "info"
	SeverityWarning  Severity = "warning"
	SeverityCritical Severity = "critical"
)

// Field is one key/value pair of an alert; an alert's fields keep their order.
type Field struct {
	Key   string
	Value string
}

// Alert is one notification. Only Kind or Key is needed: Notify fills the rest (see
// normalize).
type Alert struct {
	Kind Kind
	// Key identifies the condition for deduplication: at most one alert per Key and
	// state (firing or resolved) is sent per Options.DedupWindow. Default string(Kind).
	Key      string
	Severity Severity // default SeverityWarning
	Title    string   // default string(Kind)
	Text     string   // at most Options.MaxText bytes are kept
	Fields   []Field  // at most Options.MaxFields; duplicate keys after the first are dropped
	Time     time.Time
	Node     string // default Options.Node
	// Resolved marks the end of the condition Key names.
	Resolved bool
}

// normalize fills an alert's defaults and truncates it to the limits, so that what is
// queued is bounded. It copies Fields, so the caller may reuse its slice. Cost: O(fields).
func (a Alert) normalize(o *Options, now time.Time) Alert {
	if a.Kind == "" {
		a.Kind = "alert"
	}
	if a.Key == "" {
		a.Key = string(a.Kind)
	}
	if a.Severity == "" {
		a.Severity = SeverityWarning
	}
	if a.Title == "" {
		a.Title = string(a.Kind)
	}
	if a.Time.IsZero() {
		a.Time = now
	}
	if a.Node == "" {
		a.Node = o.Node
	}
	a.Key = truncate(a.Key, o.MaxText)
	a.Title = truncate(a.Title, o.MaxText)
	a.Text = truncate(a.Text, o.MaxText)
	fields := make([]Field, 0, min(len(a.Fields), o.MaxFields))
	for _, f := range a.Fields {
		if len(fields) == o.MaxFields {
			break
		}
		dup := false
		for _, g := range fields {
			if g.Key == f.Key {
				dup = true
				break
			}
		}
		if !dup {
			fields = append(fields, Field{truncate(f.Key, o.MaxText), truncate(f.Value, o.MaxText)})
		}
	}
	a.Fields = fields
	return a
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence, marking the cut
// with "…" (which counts towards n when n allows it).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n
	if n > len(mark) {
		cut = n - len(mark)
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if n > len(mark) {
		return s[:cut] + mark
	}
	return s[:cut]
}

// DeadLetterAlert describes a task that failed for good (task.EventDead). Its Key is
// "dead_letter/<namespace>/<id>", so each task alerts once per DedupWindow.
func DeadLetterAlert(ev task.Event) Alert {
	a := Alert{
		Kind:     KindDeadLetter,
		Key:      "dead_letter/" + ev.Namespace + "/" + ev.ID,
		Severity: SeverityCritical,
		Title:    fmt.Sprintf("Task %s/%s is dead", ev.Namespace, ev.ID),
		Text:     fmt.Sprintf("Task %s/%s (type %q) failed for good after %d attempt(s) and is in the dead-letter queue.", ev.Namespace, ev.ID, ev.Type, ev.Attempt),
		Fields: []Field{
			{"namespace", ev.Namespace},
			{"id", ev.ID},
			{"type", ev.Type},
			{"attempt", strconv.Itoa(ev.Attempt)},
		},
	}
	if ev.Err != nil {
		a.Fields = append(a.Fields, Field{"error", ev.Err.Error()})
	}
	if ev.Duration > 0 {
		a.Fields = append(a.Fields, Field{"last_run", ev.Duration.String()})
	}
	return a
}

// LeaderChangeAlert tells that leader became the leader at epoch. Its Key is
// "leader_change/<epoch>", so each change alerts once.
func LeaderChangeAlert(leader string, epoch uint64) Alert {
	e := strconv.FormatUint(epoch, 10)
	return Alert{
		Kind:     KindLeaderChange,
		Key:      "leader_change/" + e,
		Severity: SeverityWarning,
		Title:    "Leader changed to " + leader,
		Text:     fmt.Sprintf("Node %s is the leader from epoch %s.", leader, e),
		Fields:   []Field{{"leader", leader}, {"epoch", e}},
	}
}

// LeaderLostAlert tells that node stopped leading at epoch (its etcd session was lost, or
// it resigned while draining): until a leader is elected, nothing is dispatched. Its Key
// is "leader_lost/<epoch>".
func LeaderLostAlert(node string, epoch uint64) Alert {
	e := strconv.FormatUint(epoch, 10)
	return Alert{
		Kind:     KindLeaderChange,
		Key:      "leader_lost/" + e,
		Severity: SeverityCritical,
		Title:    "Node " + node + " stopped leading",
		Text:     fmt.Sprintf("Node %s no longer leads (epoch %s): it dispatches nothing until a leader is elected.", node, e),
		Fields:   []Field{{"node", node}, {"epoch", e}},
	}
}
