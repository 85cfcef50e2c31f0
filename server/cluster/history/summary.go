package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Summary counts what a history holds: what a report states beside the violations.
type Summary struct {
	Ops      map[string]int // "submit ok", "cancel unknown", ...
	Tasks    map[string]int // confirmed versions by shape: "one-shot", "every", "cron", "exclusive"
	Runs     int
	AcksOK   int // runs whose ACK or NACK the server confirmed
	Unacked  int // runs whose report was refused or never answered
	Repeats  int // runs of an occurrence beyond its first (same task, version, due, attempt)
	Epochs   int // distinct epochs that dispatched
	Faults   map[FaultKind]int
	LockPuts [2]int // run-lock writes in etcd's history: attributed to runs, not
	Events   int    // etcd changes replayed
}

// Summarize counts h.
func Summarize(h *History) Summary {
	s := Summary{Ops: map[string]int{}, Tasks: map[string]int{}, Faults: map[FaultKind]int{}}
	for _, op := range h.Ops {
		s.Ops[op.Kind.String()+" "+op.Outcome.String()]++
		if op.Kind == Submit && op.Outcome == OK && op.Durable {
			switch {
			case op.Spec.Exclusive:
				s.Tasks["exclusive"]++
			case op.Spec.Recurring():
				s.Tasks[op.Spec.Schedule.Kind.String()]++
			default:
				s.Tasks["one-shot"]++
			}
		}
	}
	type occurrence struct {
		id      string
		v       uint64
		due     time.Time
		attempt int
	}
	seen := map[occurrence]bool{}
	epochs := map[uint64]bool{}
	for _, r := range h.Runs {
		s.Runs++
		if r.AckOK {
			s.AcksOK++
		} else {
			s.Unacked++
		}
		k := occurrence{r.Task, r.Version, r.Due, r.Attempt}
		if seen[k] {
			s.Repeats++
		}
		seen[k] = true
		epochs[r.Epoch] = true
	}
	s.Epochs = len(epochs)
	for _, f := range h.Faults {
		s.Faults[f.Kind]++
	}
	s.LockPuts[0], s.LockPuts[1] = LockWrites(h)
	s.Events = len(h.Events)
	return s
}

func (s Summary) String() string {
	var b strings.Builder
	keys := func(m map[string]int) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	b.WriteString("ops:")
	for _, k := range keys(s.Ops) {
		fmt.Fprintf(&b, " %s %d,", k, s.Ops[k])
	}
	b.WriteString(" confirmed tasks:")
	for _, k := range keys(s.Tasks) {
		fmt.Fprintf(&b, " %s %d,", k, s.Tasks[k])
	}
	fmt.Fprintf(&b, " runs %d (reports confirmed %d, not %d; repeated occurrences %d) over %d epochs; faults:",
		s.Runs, s.AcksOK, s.Unacked, s.Repeats, s.Epochs)
	for _, k := range FaultKinds {
		fmt.Fprintf(&b, " %s %d,", k, s.Faults[k])
	}
	fmt.Fprintf(&b, " etcd changes replayed %d, run-lock writes attributed %d, unattributed %d", s.Events, s.LockPuts[0], s.LockPuts[1])
	return b.String()
}
