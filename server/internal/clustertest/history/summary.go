package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Summary counts what a history holds: what a report states beside the violations.
type Summary struct {
	Ops     map[string]int // "submit ok", "cancel unknown", ...
	Tasks   map[string]int // confirmed versions by shape: "one-shot", "every", "cron", "exclusive"
	Runs    int
	AcksOK  int // runs whose ACK or NACK the server confirmed
	Unacked int // runs whose report was refused or never answered
	Repeats int // runs of an occurrence beyond its first: duplicates (see Summarize)
	Epochs  int // distinct epochs that dispatched
	Faults  map[FaultKind]int
	// LeaderChanges counts the faults after which the nemesis saw another epoch lead.
	LeaderChanges int
	LockPuts      int      // run-lock writes in etcd's history attributed to runs
	Unattributed  []string // and those no run matches (LockWrites)
	Events        int      // etcd changes replayed
	// Takeovers: for each fault that moved leadership, from its start to the first run
	// received at a higher epoch (the dispatch gap clients saw).
	Takeovers []string
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
	recurring := map[version]bool{}
	for _, op := range h.Ops {
		if op.Kind == Submit && op.Spec.Recurring() {
			recurring[version{op.Task, op.Version}] = true
		}
	}
	// An occurrence: a one-shot version's attempt (a re-run after a failover may carry
	// another due time: an "after" task's is recomputed), or a recurring one's due time
	// and attempt.
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
		if !recurring[version{r.Task, r.Version}] {
			k.due = time.Time{}
		}
		if seen[k] {
			s.Repeats++
		}
		seen[k] = true
		epochs[r.Epoch] = true
	}
	s.Epochs = len(epochs)
	for _, f := range h.Faults {
		s.Faults[f.Kind]++
		if f.NewEpoch != 0 {
			s.LeaderChanges++
		}
	}
	s.LockPuts, s.Unattributed = LockWrites(h)
	s.Events = len(h.Events)
	for _, f := range h.Faults {
		var before uint64 // the highest epoch dispatching before the fault
		var first *Run    // the first run received after it, at a higher epoch
		for i := range h.Runs {
			r := &h.Runs[i]
			if r.Received.Before(f.Start) {
				before = max(before, r.Epoch)
			}
		}
		for i := range h.Runs {
			r := &h.Runs[i]
			if r.Epoch > before && !r.Received.Before(f.Start) && (first == nil || r.Received.Before(first.Received)) {
				first = r
			}
		}
		if first != nil && f.Kind != EtcdStop {
			s.Takeovers = append(s.Takeovers, fmt.Sprintf("%s %s: first run at epoch %d after %.2fs",
				f.Kind, f.Target, first.Epoch, first.Received.Sub(f.Start).Seconds()))
		}
	}
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
	perChange := 0.0
	if s.LeaderChanges > 0 {
		perChange = float64(s.Repeats) / float64(s.LeaderChanges)
	}
	fmt.Fprintf(&b, " runs %d (reports confirmed %d, not %d; duplicate runs %d, %.1f per leader change) over %d epochs; faults:",
		s.Runs, s.AcksOK, s.Unacked, s.Repeats, perChange, s.Epochs)
	for _, k := range FaultKinds {
		fmt.Fprintf(&b, " %s %d,", k, s.Faults[k])
	}
	fmt.Fprintf(&b, " etcd changes replayed %d, run-lock writes attributed %d, unattributed %d", s.Events, s.LockPuts, len(s.Unattributed))
	for _, tk := range s.Takeovers {
		b.WriteString("\n    takeover: " + tk)
	}
	for _, u := range s.Unattributed {
		b.WriteString("\n    unattributed run lock: " + u)
	}
	return b.String()
}
