package notify

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// Sample is what a Monitor reads at each check: the server hands it a closure over its
// engine's Stats.
type Sample struct {
	Queued   int            // due tasks waiting for a worker (task.Stats.Queued)
	Lateness task.Histogram // cumulative, since start (task.Stats.Lateness)
}

// Thresholds are the conditions a Monitor alerts on; a zero threshold disables its check.
type Thresholds struct {
	// Backlog: a breach while Sample.Queued > Backlog.
	Backlog int
	// LatenessP95: a breach while the p95 of the lateness observed during the last
	// interval (the delta of two samples' histograms, estimated as Quantile does) is above
	// it. An interval with no observations is not a breach.
	LatenessP95 time.Duration
	// For is how long a breach must last, from the first check that saw it, before it
	// alerts. Default 0: alert at the first check that sees it.
	For time.Duration
}

// Sink receives a Monitor's alerts; *Notifier is one.
type Sink interface {
	Notify(Alert) bool
}

// DefaultInterval is MonitorOptions.Interval's default.
const DefaultInterval = 15 * time.Second

// MonitorOptions configures a Monitor. Sample and Sink are required; a zero Interval
// takes its default, and a zero threshold disables its check.
type MonitorOptions struct {
	Thresholds
	// Sample is called once per check from Run's goroutine; required.
	Sample func() Sample
	// Sink receives the alerts; required.
	Sink Sink
	// Interval between checks; the lateness p95 covers one interval. Default 15 s.
	Interval time.Duration
}

// MonitorOption sets a field of MonitorOptions.
type MonitorOption func(*MonitorOptions)

// WithMonitorOptions replaces the whole MonitorOptions struct (fields left zero take
// their defaults).
func WithMonitorOptions(o MonitorOptions) MonitorOption {
	return func(dst *MonitorOptions) { *dst = o }
}

// WithThresholds sets MonitorOptions.Thresholds.
func WithThresholds(t Thresholds) MonitorOption {
	return func(o *MonitorOptions) { o.Thresholds = t }
}

// WithSample sets MonitorOptions.Sample.
func WithSample(f func() Sample) MonitorOption { return func(o *MonitorOptions) { o.Sample = f } }

// WithSink sets MonitorOptions.Sink.
func WithSink(s Sink) MonitorOption { return func(o *MonitorOptions) { o.Sink = s } }

// WithInterval sets MonitorOptions.Interval.
func WithInterval(d time.Duration) MonitorOption { return func(o *MonitorOptions) { o.Interval = d } }

func (o *MonitorOptions) setDefaults() {
	setDefault(&o.Interval, DefaultInterval)
}

// validate checks the fields after setDefaults and names the first bad one.
func (o *MonitorOptions) validate() error {
	switch {
	case o.Sample == nil:
		return bad("MonitorOptions.Sample is nil")
	case o.Sink == nil:
		return bad("MonitorOptions.Sink is nil")
	case o.Interval < 0:
		return bad("MonitorOptions.Interval %v is negative", o.Interval)
	}
	return o.Thresholds.validate()
}

// validate names the first negative threshold.
func (t Thresholds) validate() error {
	switch {
	case t.Backlog < 0:
		return bad("Thresholds.Backlog %d is negative", t.Backlog)
	case t.LatenessP95 < 0:
		return bad("Thresholds.LatenessP95 %v is negative", t.LatenessP95)
	case t.For < 0:
		return bad("Thresholds.For %v is negative", t.For)
	}
	return nil
}

// Monitor checks Thresholds over Samples on an interval. For each condition it sends one
// alert when a breach has lasted For, and one resolved alert (same Key) at the first
// check that sees it cleared. An alert the Sink does not take (Notify returns false) is
// offered again at the next check, so a dropped alert delays, not loses, the news.
type Monitor struct {
	opts MonitorOptions // Thresholds: the ones NewMonitor was given; thr holds those in effect
	// thr is the thresholds in effect (SetThresholds), read once by each check. Atomic.
	thr atomic.Pointer[Thresholds]

	// Owner goroutine only (Run's, or a test calling check).
	prev     task.Histogram
	havePrev bool
	backlog  condition
	lateness condition
}

// condition is one threshold's state.
type condition struct {
	since  time.Time // first check of the current breach; zero when not breached
	firing bool      // a breach alert was taken and no resolved one yet
}

// NewMonitor checks the options and returns a Monitor; Run starts it.
func NewMonitor(options ...MonitorOption) (*Monitor, error) {
	var opts MonitorOptions
	for _, opt := range options {
		opt(&opts)
	}
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	m := &Monitor{opts: opts}
	m.thr.Store(&opts.Thresholds)
	return m, nil
}

// Thresholds returns the thresholds in effect.
func (m *Monitor) Thresholds() Thresholds { return *m.thr.Load() }

// SetThresholds replaces the thresholds from the next check on (a runtime setting
// changed); a negative one is refused, naming it, and nothing changes. A breach goes on
// being measured from its first check; a check disabled (0) while its alert fires sends
// the resolved alert. Safe to call from any goroutine.
func (m *Monitor) SetThresholds(t Thresholds) error {
	if err := t.validate(); err != nil {
		return err
	}
	m.thr.Store(&t)
	return nil
}

// Run checks every Interval until ctx ends, then returns. The first check only records
// the lateness baseline. Call it once, on a goroutine of the caller's.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.opts.Interval)
	defer t.Stop()
	m.run(ctx, t.C)
}

// run checks at every tick until ctx ends.
func (m *Monitor) run(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick:
			m.check(now)
		}
	}
}

// check takes one sample and updates both conditions. Owner goroutine only.
func (m *Monitor) check(now time.Time) {
	s := m.opts.Sample()
	th := m.Thresholds()
	if th.Backlog > 0 || m.backlog.firing {
		breached := th.Backlog > 0 && s.Queued > th.Backlog
		fields := []Field{{"queued", strconv.Itoa(s.Queued)}, {"threshold", strconv.Itoa(th.Backlog)}}
		m.update(&m.backlog, now, th.For, breached, func(resolved bool) Alert {
			a := Alert{Kind: KindBacklog, Key: string(KindBacklog), Severity: SeverityWarning, Fields: fields, Time: now, Resolved: resolved}
			if resolved {
				a.Title = "Backlog back to normal"
				a.Text = fmt.Sprintf("%d due task(s) wait for a worker, at most the threshold of %d.", s.Queued, th.Backlog)
			} else {
				a.Title = "Backlog above threshold"
				a.Text = fmt.Sprintf("%d due task(s) wait for a worker, above the threshold of %d for at least %v.", s.Queued, th.Backlog, th.For)
			}
			return a
		})
	}
	d := delta(s.Lateness, m.prev)
	first := !m.havePrev
	m.prev, m.havePrev = s.Lateness, true
	if (th.LatenessP95 > 0 || m.lateness.firing) && !first {
		p95, ok := Quantile(0.95, d)
		breached := th.LatenessP95 > 0 && ok && p95 > th.LatenessP95
		fields := []Field{{"p95", p95.String()}, {"threshold", th.LatenessP95.String()}, {"observations", strconv.FormatUint(d.Count, 10)}}
		m.update(&m.lateness, now, th.For, breached, func(resolved bool) Alert {
			a := Alert{Kind: KindLateness, Key: string(KindLateness), Severity: SeverityWarning, Fields: fields, Time: now, Resolved: resolved}
			if resolved {
				a.Title = "Lateness back to normal"
				a.Text = fmt.Sprintf("Tasks start on time again: lateness p95 over the last interval is %v, threshold %v (%d started).", p95, th.LatenessP95, d.Count)
			} else {
				a.Title = "Lateness p95 above threshold"
				a.Text = fmt.Sprintf("Tasks start late: lateness p95 over the last interval is %v, above the threshold of %v for at least %v (%d started).", p95, th.LatenessP95, th.For, d.Count)
			}
			return a
		})
	}
}

// update moves c by one check and sends the alert that change calls for: a breach
// alerts once it has lasted forDur.
func (m *Monitor) update(c *condition, now time.Time, forDur time.Duration, breached bool, alert func(resolved bool) Alert) {
	if !breached {
		c.since = time.Time{}
		if c.firing && m.opts.Sink.Notify(alert(true)) {
			c.firing = false
		}
		return
	}
	if c.since.IsZero() {
		c.since = now
	}
	if !c.firing && now.Sub(c.since) >= forDur && m.opts.Sink.Notify(alert(false)) {
		c.firing = true
	}
}
