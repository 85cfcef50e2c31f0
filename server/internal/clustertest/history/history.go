package history

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// OpKind is what a client asked.
type OpKind uint8

const (
	Submit OpKind = iota + 1
	Cancel
)

func (k OpKind) String() string {
	switch k {
	case Submit:
		return "submit"
	case Cancel:
		return "cancel"
	}
	return fmt.Sprintf("OpKind(%d)", k)
}

// Outcome is what a client learned from a call.
type Outcome uint8

const (
	// OK: the call succeeded and the reply is recorded.
	OK Outcome = iota + 1
	// Refused: the reply says the request was not executed; Op.Code names it.
	Refused
	// Unknown: a timeout, a lost connection, or a reply that does not say whether the
	// request was executed; Op.Code says which.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", o)
}

// refusingCodes are the protocol error codes that say a request was not executed
// (server/PROTOCOL.md); every other code is an Unknown outcome.
var refusingCodes = map[string]bool{
	"NOT_LEADER": true, "EXISTS": true, "NOT_FOUND": true, "INVALID_TASK": true, "BAD_FIELD": true,
	"UNAUTHORIZED": true, "UNKNOWN_TYPE": true, "UNEXPECTED": true,
}

// OutcomeOfCode classifies an ERROR reply by its code's name: Refused when the code says
// the request was not executed, Unknown otherwise (OVERLOADED and INTERNAL may follow a
// write that happened).
func OutcomeOfCode(code string) Outcome {
	if refusingCodes[code] {
		return Refused
	}
	return Unknown
}

// Spec is the task a SUBMIT carried, as far as the checks need it.
type Spec struct {
	Schedule  task.Schedule
	Misfire   task.MisfirePolicy
	Exclusive bool
}

// MarshalJSON writes the zero Spec (a cancel's) as null: core/task's enums have no name
// for their zero values. Unmarshalling null leaves a Spec zero, so no UnmarshalJSON is
// needed.
func (s Spec) MarshalJSON() ([]byte, error) {
	if s == (Spec{}) {
		return []byte("null"), nil
	}
	type plain Spec // without this method
	return json.Marshal(plain(s))
}

// Recurring reports whether the task has more than one occurrence.
func (s Spec) Recurring() bool { return s.Schedule.Recurring() }

// Op is one client call.
type Op struct {
	Client  int
	Kind    OpKind
	Task    string // the task ID (one namespace: the default)
	Version uint64 // Submit: the task's version
	Spec    Spec   // Submit: the task
	Start   time.Time
	End     time.Time
	Outcome Outcome
	Code    string // Refused: the code; Unknown: the code or the error's text
	// The reply, when Outcome is OK.
	NextRun      time.Time // Submit: the first due time it announced (zero: none)
	ReplyVersion uint64
	Durable      bool // Submit: the reply's durability is durable
}

// Run is one FIRE a worker received, and what became of it.
type Run struct {
	Worker   int
	Task     string
	Version  uint64 // from the payload (the FIRE does not carry it)
	RunID    uint64
	Epoch    uint64
	Attempt  int
	Due      time.Time
	Received time.Time // the handler started
	Returned time.Time // the handler returned (zero: never, as far as the log knows)
	Failed   bool      // the handler returned an error (a NACK), not nil (an ACK)
	Answered bool      // the report's answer arrived (OnAcked)
	AckOK    bool      // ... and the server took it
	AckAt    time.Time // when the answer arrived
	AckErr   string    // the refusal or loss, when not AckOK
}

// FaultKind is a nemesis action.
type FaultKind uint8

const (
	Kill     FaultKind = iota + 1 // SIGKILL of the leading tockd, then a restart
	Stall                         // SIGSTOP of the leading tockd past its session TTL, then SIGCONT
	EtcdStop                      // SIGTERM of an etcd member, then a restart
	Cut                           // the leading tockd's etcd connections blackholed, then restored
	// Reelect: the leading tockd's election key deleted (a forced resign) while the other
	// nodes are SIGSTOPped until their campaign keys' leases lapse, so that the same node
	// campaigns again and is elected at a new epoch; then SIGCONT. Epoch and NewEpoch are
	// then two terms of one node.
	Reelect
)

// FaultKinds lists every kind, in order.
var FaultKinds = []FaultKind{Kill, Stall, EtcdStop, Cut, Reelect}

func (k FaultKind) String() string {
	switch k {
	case Kill:
		return "kill"
	case Stall:
		return "stall"
	case EtcdStop:
		return "etcd-stop"
	case Cut:
		return "cut"
	case Reelect:
		return "reelect"
	}
	return fmt.Sprintf("FaultKind(%d)", k)
}

// Fault is one nemesis action, from its start until the nemesis saw it healed.
type Fault struct {
	Kind   FaultKind
	Target string // the node or member
	Start  time.Time
	End    time.Time
	Note   string // what the nemesis saw (the next leader, its epoch)
	// Epoch is the faulted leader's (0 for an etcd member): from Start on it cannot
	// dispatch (killed, stopped) or may not (cut: it must step down).
	Epoch uint64
	// NewEpoch is the epoch the nemesis saw lead next, at LeaderSeen (0: none moved).
	NewEpoch   uint64
	LeaderSeen time.Time
}

// KeyEvent is one change in etcd's revision history (a watch event).
type KeyEvent struct {
	Rev       int64 // the revision of the change
	Key       string
	Delete    bool
	Value     []byte
	CreateRev int64 // of a put: the key's create revision
}

// History is everything one run of the test recorded.
type History struct {
	Seed   uint64
	Ops    []Op
	Runs   []Run
	Faults []Fault
	// Prefix is tock's etcd prefix ("/tock/"); Events its revision history, oldest first;
	// Leftover the record, progress and lock keys left after the load drained.
	Prefix   string
	Events   []KeyEvent
	Leftover []string
}

// Violation is one failed check.
type Violation struct {
	Check   string // the property's name (see the package doc)
	Task    string // the task it concerns ("" for none)
	Detail  string
	Excerpt []string // the history's lines about the task, in time order
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s: %s", v.Check, v.Task, v.Detail)
	for _, l := range v.Excerpt {
		b.WriteString("\n    ")
		b.WriteString(l)
	}
	return b.String()
}

// origin is the time every excerpt's offsets count from: the first recorded event.
func (h *History) origin() time.Time {
	var t0 time.Time
	early := func(t time.Time) {
		if !t.IsZero() && (t0.IsZero() || t.Before(t0)) {
			t0 = t
		}
	}
	for _, o := range h.Ops {
		early(o.Start)
	}
	for _, r := range h.Runs {
		early(r.Received)
	}
	for _, f := range h.Faults {
		early(f.Start)
	}
	return t0
}

func rel(t0, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%.3fs", t.Sub(t0).Seconds())
}

// excerptWindow is how far from a violation's time an excerpt reaches for runs and
// faults (a recurring task's whole life would be hundreds of lines); its client calls
// are always shown.
const excerptWindow = 10 * time.Second

// Excerpt returns the history's lines about task id, and the faults, in time order:
// what a report shows beside a violation. Runs and faults are those within
// excerptWindow of one of the times around (all of them when none is given); client
// calls are all shown. Times are seconds since the first event.
func (h *History) Excerpt(id string, around ...time.Time) []string {
	near := func(t time.Time) bool {
		if len(around) == 0 || t.IsZero() {
			return true
		}
		for _, a := range around {
			if t.After(a.Add(-excerptWindow)) && t.Before(a.Add(excerptWindow)) {
				return true
			}
		}
		return false
	}
	t0 := h.origin()
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, o := range h.Ops {
		if o.Task != id {
			continue
		}
		s := fmt.Sprintf("[%s, %s] client %d %s v%d: %s", rel(t0, o.Start), rel(t0, o.End), o.Client, o.Kind, o.Version, o.Outcome)
		if o.Code != "" {
			s += " " + o.Code
		}
		if o.Outcome == OK && o.Kind == Submit {
			s += fmt.Sprintf(" (version %d, next run %s, durable %v)", o.ReplyVersion, rel(t0, o.NextRun), o.Durable)
		}
		lines = append(lines, line{o.Start, s})
	}
	for _, r := range h.Runs {
		if r.Task != id || !near(r.Received) {
			continue
		}
		ack := "no answer"
		switch {
		case r.AckOK:
			ack = "confirmed at " + rel(t0, r.AckAt)
		case r.Answered:
			ack = "refused at " + rel(t0, r.AckAt) + ": " + r.AckErr
		}
		kind := "ACK"
		if r.Failed {
			kind = "NACK"
		}
		lines = append(lines, line{r.Received, fmt.Sprintf("[%s, %s] worker %d FIRE v%d run %d epoch %d attempt %d due %s; %s %s",
			rel(t0, r.Received), rel(t0, r.Returned), r.Worker, r.Version, r.RunID, r.Epoch, r.Attempt, rel(t0, r.Due), kind, ack)})
	}
	for _, f := range h.Faults {
		if !near(f.Start) && !near(f.End) {
			continue
		}
		lines = append(lines, line{f.Start, fmt.Sprintf("[%s, %s] nemesis %s %s %s", rel(t0, f.Start), rel(t0, f.End), f.Kind, f.Target, f.Note)})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.text
	}
	return out
}
