package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// systemGoal is a DESIGN.md goal decided from a recorded loadgen run (record-system.sh):
// the run's file, and how to read its verdict from the output.
type systemGoal struct {
	run   string // results/system/<run>.txt
	what  string
	goal  string
	check func(out string) (met bool, evidence string, ok bool)
}

var (
	endToEnd  = regexp.MustCompile(`\((\d+)/s end to end\)`)
	ratioLine = regexp.MustCompile(`ratio server/beanstalkd: end to end (\d+)/s / (\d+)/s = ([\d.]+)x.*p99 lateness (\S+) \(server\) vs (\S+) \(beanstalkd\)`)
	durable   = regexp.MustCompile(`durable submits/s: (\d+)`)
	lostZero  = regexp.MustCompile(`\b0 lost\b|lost 0\b`)
	// loadgen -dag's line, one per target run.
	earlyChildren = regexp.MustCompile(`workflows \d+ \(-dag [^)]*\): early children (\d+)`)
	// TestDurableFailover's and TestDurableFailoverStall's summaries ("5 rounds, leader
	// killed: ..."; before the stall test, "5 rounds: ..." for the kill).
	killDispatch  = regexp.MustCompile(`rounds(?:, leader killed)?: [^\n]*first dispatches \[([^\]]*)\]`)
	stallDispatch = regexp.MustCompile(`rounds, leader stalled: [^\n]*first dispatches \[([^\]]*)\]`)
	// The history checker's summary (server/internal/clustertest TestChaosHistory) and its verdict line.
	historyOps = regexp.MustCompile(`seed (\d+): ops: .*?; faults: kill (\d+), stall (\d+), etcd-stop (\d+), cut (\d+)(?:, reelect (\d+))?`)
	violations = regexp.MustCompile(`seed \d+: (\d+) violations \(([^)]*)\)`)
)

// rateAtLeast checks that the first rate re finds in the output (its first group, an
// integer) is no less than least; the evidence is the rate in format.
func rateAtLeast(re *regexp.Regexp, least int, format string) func(out string) (met bool, evidence string, ok bool) {
	return func(out string) (bool, string, bool) {
		m := re.FindStringSubmatch(out)
		if m == nil {
			return false, "", false
		}
		r, _ := strconv.Atoi(m[1])
		return r >= least, fmt.Sprintf(format, r), true
	}
}

var systemGoals = []systemGoal{
	{"core-1e6", "loadgen core target, 1e6 tasks", "1,000,000 tasks/s end to end, 0 lost, 0 early",
		func(out string) (bool, string, bool) {
			met, evidence, ok := rateAtLeast(endToEnd, 1e6, "%d tasks/s")(out)
			return met && strings.Contains(out, "lost 0  early 0"), evidence, ok
		}},
	{"make-loadgen", "one tockd over loopback, 1e6 ephemeral tasks", "1,000,000 tasks/s end to end",
		func(out string) (bool, string, bool) {
			ms := endToEnd.FindAllStringSubmatch(out, -1)
			if len(ms) < 2 { // the core run, then the server run
				return false, "", false
			}
			r, _ := strconv.Atoi(ms[len(ms)-1][1])
			return r >= 1e6, fmt.Sprintf("%d tasks/s", r), true
		}},
	{"make-loadgen-peer", "tockd vs beanstalkd, immediate tasks", "20x beanstalkd's end-to-end rate",
		func(out string) (bool, string, bool) {
			m := ratioLine.FindStringSubmatch(out)
			if m == nil {
				return false, "", false
			}
			x, _ := strconv.ParseFloat(m[3], 64)
			return x >= 20, fmt.Sprintf("%sx: %s/s vs %s/s", m[3], m[1], m[2]), true
		}},
	{"make-loadgen-peer", "tockd vs beanstalkd, delayed tasks", "lower p99 lateness than beanstalkd",
		func(out string) (bool, string, bool) {
			ms := ratioLine.FindAllStringSubmatch(out, -1)
			if len(ms) < 2 {
				return false, "", false
			}
			m := ms[1]
			a, errA := time.ParseDuration(m[4])
			b, errB := time.ParseDuration(m[5])
			if errA != nil || errB != nil {
				return false, "", false
			}
			return a < b, fmt.Sprintf("p99 %s vs %s", m[4], m[5]), true
		}},
	{"loadgen-dag", "loadgen workflows (-dag) under a concurrency key, core then tockd", "every task run once, 0 early children (issue 16)",
		func(out string) (bool, string, bool) {
			ms := earlyChildren.FindAllStringSubmatch(out, -1)
			if len(ms) < 2 { // the core run, then the server run
				return false, "", false
			}
			var early []string
			for _, m := range ms {
				early = append(early, m[1])
			}
			met := strings.Count(out, "lost 0  early 0  duplicates 0") == len(ms) && !strings.Contains(out, "FAILED") &&
				!slices.ContainsFunc(early, func(e string) bool { return e != "0" })
			return met, "early children " + strings.Join(early, ", "), true
		}},
	{"cluster-durable", "durable submits through make cluster", "30,000 durable submits/s",
		rateAtLeast(durable, 30000, "%d/s")},
	{"make-chaos", "leader SIGKILLed under durable load (make chaos)", "dispatching again within the session TTL + 1 s (3 s), no durable task lost",
		dispatchWithin(killDispatch)},
	{"make-chaos", "leader SIGSTOPped past its TTL under durable load (make chaos)", "dispatching again within the session TTL + 1 s (3 s), no durable task lost",
		dispatchWithin(stallDispatch)},
	{"make-chaos", "history checker over seeded faults (make chaos)", "every check holds over the whole history (issue 11: nothing lost, nothing run after a confirmed ACK or cancel, exclusive runs never overlap, no write of a deposed leader, nothing left in etcd)",
		func(out string) (bool, string, bool) {
			m := historyOps.FindStringSubmatch(out)
			if m == nil {
				return false, "", false
			}
			faults := fmt.Sprintf("seed %s; faults: kill %s, stall %s, etcd-stop %s, cut %s", m[1], m[2], m[3], m[4], m[5])
			if m[6] != "" { // a run recorded before the reelect fault has none
				faults += ", reelect " + m[6]
			}
			if v := violations.FindStringSubmatch(out); v != nil {
				return false, fmt.Sprintf("%s violations: %s; %s", v[1], v[2], faults), true
			}
			return true, "0 violations; " + faults, true
		}},
}

// dispatchWithin reads a failover test's summary line (matched by re, its first group
// the first dispatches): met when the slowest is within 3 s and the line says 0 lost.
func dispatchWithin(re *regexp.Regexp) func(out string) (bool, string, bool) {
	return func(out string) (bool, string, bool) {
		m := re.FindStringSubmatch(out)
		if m == nil {
			return false, "", false
		}
		var worst time.Duration
		for _, f := range strings.Fields(m[1]) {
			d, err := time.ParseDuration(f)
			if err != nil {
				return false, "", false
			}
			worst = max(worst, d)
		}
		lost := lostZero.MatchString(m[0])
		return worst <= 3*time.Second && lost, fmt.Sprintf("slowest first dispatch %v; lost 0: %v", worst.Round(time.Millisecond), lost), true
	}
}

// writeSystemGoals appends the system goals' rows to the verdict table.
func writeSystemGoals(w interface{ Write([]byte) (int, error) }, dir string) {
	for _, g := range systemGoals {
		out, err := os.ReadFile(filepath.Join(dir, g.run+".txt"))
		verdict := "not run (no recorded run)"
		if err == nil {
			if met, ev, ok := g.check(string(out)); !ok {
				verdict = "not decided: the recorded output has no figure for it"
			} else if met {
				verdict = "**met** (" + ev + ")"
			} else {
				verdict = "**not met** (" + ev + ")"
			}
		}
		fmt.Fprintf(w, "| [%s](#system-runs-loadgen) | %s | %s |\n", g.what, g.goal, verdict)
	}
}
