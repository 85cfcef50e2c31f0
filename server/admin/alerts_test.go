package admin

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"

	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// ruleFile is the shape of a Prometheus rules file, as far as alerts.yml uses it.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func parseRules(t *testing.T) ruleFile {
	t.Helper()
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(AlertRules))
	dec.KnownFields(true) // a misspelt key (anotations:) is an error, not silently dropped
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	return f
}

// TestAlertRulesWellFormed: every rule is an alert with a severity of warning or
// critical, a summary and a description; names are unique; every group the rules are
// meant to cover is there.
func TestAlertRulesWellFormed(t *testing.T) {
	f := parseRules(t)
	seen := map[string]bool{}
	var groups []string
	for _, g := range f.Groups {
		groups = append(groups, g.Name)
		if len(g.Rules) == 0 {
			t.Errorf("group %s: no rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("group %s: a rule without alert name or expr: %+v", g.Name, r)
			}
			if seen[r.Alert] {
				t.Errorf("alert %s: defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: needs summary and description annotations", r.Alert)
			}
		}
	}
	for _, want := range []string{"tock-queue", "tock-failures", "tock-dead-letters", "tock-leadership", "tock-lateness"} {
		if !slices.Contains(groups, want) {
			t.Errorf("group %s: missing (groups: %v)", want, groups)
		}
	}
	for _, want := range []string{"TockQueueBacklog", "TockHighFailureRate", "TockDeadLettersGrowing", "TockNoLeader", "TockLatenessHigh", "TockLeaderFlapping", "TockPartitionsWithoutOwner", "TockPartitionWithoutHolder"} {
		if !seen[want] {
			t.Errorf("alert %s: missing", want)
		}
	}
}

// metricName matches a tock_ metric name in a PromQL expression.
var metricName = regexp.MustCompile(`\btock_[a-zA-Z0-9_]*`)

// TestAlertRulesUseExistingMetrics: every tock_* series an expression names exists in a
// real /metrics scrape (for a histogram: name_bucket, name_sum, name_count), so renaming
// a metric without its alerts fails here.
func TestAlertRulesUseExistingMetrics(t *testing.T) {
	_, base := start(t, Options{Snapshot: fixedStats})
	series := map[string]bool{}
	for name, fam := range scrape(t, base) {
		if fam.GetType() == dto.MetricType_HISTOGRAM {
			series[name+"_bucket"], series[name+"_sum"], series[name+"_count"] = true, true, true
		} else {
			series[name] = true
		}
	}
	used := 0
	for _, g := range parseRules(t).Groups {
		for _, r := range g.Rules {
			names := metricName.FindAllString(r.Expr, -1)
			if len(names) == 0 {
				t.Errorf("alert %s: names no tock_ metric: %s", r.Alert, r.Expr)
			}
			for _, n := range names {
				used++
				if !series[n] {
					t.Errorf("alert %s: %s is not in /metrics", r.Alert, n)
				}
			}
		}
	}
	if used == 0 {
		t.Fatal("no metric names found in alerts.yml")
	}
}

// TestAlertRulesPromtool runs `promtool check rules` on alerts.yml, which parses every
// expression as PromQL and every template. It needs promtool (Debian: the prometheus
// package) on PATH.
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH (install Prometheus, e.g. apt-get install prometheus); alerts.yml not checked by it")
	}
	if _, err := os.Stat("alerts.yml"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tockdtest.Limit)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "rules", "alerts.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules alerts.yml: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
