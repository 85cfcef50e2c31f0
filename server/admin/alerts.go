package admin

import _ "embed"

// AlertRules is a Prometheus alerting-rules file (alerts.yml in this package) over the
// metrics the Collector emits: queue backlog, failure rate, dead-letter growth, no
// leader, p95 lateness and leader flapping. Load it with Prometheus's rule_files; the
// thresholds are starting points to tune per deployment.
//
//go:embed alerts.yml
var AlertRules []byte
