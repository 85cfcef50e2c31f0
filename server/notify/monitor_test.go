package notify

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// sink records alerts; while refuse is set it takes none.
type sink struct {
	alerts []Alert
	refuse bool
}

func (s *sink) Notify(a Alert) bool {
	if s.refuse {
		return false
	}
	s.alerts = append(s.alerts, a)
	return true
}

func TestMonitorBacklog(t *testing.T) {
	var s sink
	var sample Sample
	m, err := NewMonitor(WithThresholds(Thresholds{Backlog: 100, For: 30 * time.Second}),
		WithSample(func() Sample { return sample }), WithSink(&s))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at     time.Duration
		queued int
		alerts int // total alerts after this check
	}{
		{0, 50, 0},
		{10 * time.Second, 101, 0}, // breach starts
		{20 * time.Second, 500, 0},
		{39 * time.Second, 500, 0}, // 29 s < For
		{40 * time.Second, 500, 1}, // lasted For: one alert
		{50 * time.Second, 900, 1}, // still breached: no repeat
		{60 * time.Second, 100, 2}, // at the threshold: resolved
		{70 * time.Second, 10, 2},  // stays resolved: no repeat
		{80 * time.Second, 200, 2}, // a new breach starts the For over
		{90 * time.Second, 50, 2},  // cleared before For: nothing to resolve
		{100 * time.Second, 50, 2},
	}
	for _, st := range steps {
		sample.Queued = st.queued
		m.check(t0.Add(st.at))
		if len(s.alerts) != st.alerts {
			t.Fatalf("after the check at %v (queued %d): %d alerts, want %d", st.at, st.queued, len(s.alerts), st.alerts)
		}
	}
	fire, res := s.alerts[0], s.alerts[1]
	if fire.Kind != KindBacklog || fire.Key != "backlog" || fire.Resolved || !fire.Time.Equal(t0.Add(40*time.Second)) || fire.Fields[0] != (Field{"queued", "500"}) {
		t.Errorf("breach alert %+v", fire)
	}
	if res.Key != fire.Key || !res.Resolved {
		t.Errorf("resolved alert %+v", res)
	}
}

func TestMonitorRetriesRefusedAlert(t *testing.T) {
	s := sink{refuse: true}
	m, _ := NewMonitor(WithThresholds(Thresholds{Backlog: 1}), WithSample(func() Sample { return Sample{Queued: 5} }), WithSink(&s))
	t0 := time.Unix(0, 0)
	m.check(t0)
	s.refuse = false
	m.check(t0.Add(time.Second))
	m.check(t0.Add(2 * time.Second))
	if len(s.alerts) != 1 || s.alerts[0].Resolved {
		t.Errorf("alerts %+v, want one breach alert, offered again after the refusal", s.alerts)
	}
}

// lateness builds a cumulative lateness snapshot over bounds 10, 20, 40 ms from counts
// per bucket (not cumulative) and those above every bound.
func lateness(per [3]uint64, above uint64) task.Histogram {
	var cum [3]uint64
	run := uint64(0)
	for i, c := range per {
		run += c
		cum[i] = run
	}
	return hist(cum, run+above)
}

func TestMonitorLatenessFromDeltas(t *testing.T) {
	var s sink
	var sample Sample
	m, err := NewMonitor(WithThresholds(Thresholds{LatenessP95: 25 * ms}),
		WithSample(func() Sample { return sample }), WithSink(&s))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	check := func(at int, h task.Histogram, want int) {
		t.Helper()
		sample.Lateness = h
		m.check(t0.Add(time.Duration(at) * time.Second))
		if len(s.alerts) != want {
			t.Fatalf("check %d: %d alerts %+v, want %d", at, len(s.alerts), s.alerts, want)
		}
	}
	// Since start: 1000 very late starts (p95 over all time stays above 25 ms below).
	h := lateness([3]uint64{0, 0, 1000}, 0)
	check(0, h, 0) // the first sample is the baseline only
	// Interval 1: 1000 starts, all within 10 ms. Since start p95 would be ~38 ms; over
	// the interval it is ~9.5 ms: no breach.
	h = lateness([3]uint64{1000, 0, 1000}, 0)
	if p, _ := Quantile(0.95, h); p <= 25*ms {
		t.Fatalf("test premise: cumulative p95 %v should breach", p)
	}
	check(1, h, 0)
	// Interval 2: 100 starts in (20, 40] ms: p95 = 20 + 20*0.95 = 39 ms: breach.
	h = lateness([3]uint64{1000, 0, 1100}, 0)
	check(2, h, 1)
	if a := s.alerts[0]; a.Kind != KindLateness || a.Resolved || a.Fields[0] != (Field{"p95", "39ms"}) {
		t.Errorf("breach alert %+v", a)
	}
	// Interval 3: no starts at all: not a breach, so it resolves.
	check(3, h, 2)
	if a := s.alerts[1]; a.Key != "lateness" || !a.Resolved {
		t.Errorf("resolved alert %+v", a)
	}
	// Interval 4: the engine restarted (counters back near 0), all late: a breach again.
	check(4, lateness([3]uint64{0, 0, 0}, 10), 3)
}

func TestMonitorRun(t *testing.T) {
	var s sink
	checked := make(chan struct{})
	m, _ := NewMonitor(WithThresholds(Thresholds{Backlog: 1}), WithSink(&s),
		WithSample(func() Sample { checked <- struct{}{}; return Sample{Queued: 2} }))
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.run(ctx, tick); close(done) }()
	tick <- time.Unix(0, 0)
	<-checked
	cancel()
	<-done // run returns once ctx ends (goleak checks nothing is left)
	if len(s.alerts) != 1 {
		t.Errorf("alerts %+v", s.alerts)
	}

	// Run with a real ticker returns when ctx ends too.
	m2, _ := NewMonitor(WithSink(&s), WithSample(func() Sample { return Sample{} }), WithInterval(time.Hour))
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	m2.Run(ctx2)
}

func TestMonitorBadOptions(t *testing.T) {
	sample := func() Sample { return Sample{} }
	for _, c := range []struct {
		o    MonitorOptions
		want string
	}{
		{MonitorOptions{Sink: &sink{}}, "Sample"},
		{MonitorOptions{Sample: sample}, "Sink"},
		{MonitorOptions{Sample: sample, Sink: &sink{}, Interval: -1}, "Interval"},
		{MonitorOptions{Sample: sample, Sink: &sink{}, Thresholds: Thresholds{Backlog: -1}}, "Backlog"},
		{MonitorOptions{Sample: sample, Sink: &sink{}, Thresholds: Thresholds{LatenessP95: -1}}, "LatenessP95"},
		{MonitorOptions{Sample: sample, Sink: &sink{}, Thresholds: Thresholds{For: -1}}, "For"},
	} {
		if _, err := NewMonitor(WithMonitorOptions(c.o)); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewMonitor(%+v) = %v, want ErrInvalidOption naming %q", c.o, err, c.want)
		}
	}
}

// TestMonitorThroughNotifier runs a breach and its end through a real Notifier.
func TestMonitorThroughNotifier(t *testing.T) {
	rc := newReceiver(t, nil)
	n := mustNew(t, Options{Webhooks: []Webhook{{URL: rc.URL}}})
	queued := 10
	m, _ := NewMonitor(WithThresholds(Thresholds{Backlog: 5}), WithSink(n), WithSample(func() Sample { return Sample{Queued: queued} }))
	m.check(time.Unix(0, 0))
	queued = 0
	m.check(time.Unix(1, 0))
	closeDrained(t, n)
	if s := n.Stats(); s.Sent != 2 || s.Deduplicated != 0 {
		t.Errorf("stats %+v, want breach and resolved sent", s)
	}
}

// TestMonitorOptionSetters: each WithX sets its own field (TestMonitorBadOptions builds
// with WithMonitorOptions).
func TestMonitorOptionSetters(t *testing.T) {
	th := Thresholds{Backlog: 1, LatenessP95: 2, For: 3}
	s := &sink{}
	var o MonitorOptions
	for _, opt := range []MonitorOption{WithThresholds(th), WithSample(func() Sample { return Sample{Queued: 4} }),
		WithSink(s), WithInterval(5)} {
		opt(&o)
	}
	if o.Thresholds != th || o.Sink != s || o.Interval != 5 || o.Sample == nil || o.Sample().Queued != 4 {
		t.Errorf("options set field by field = %+v", o)
	}
}

// TestMonitorSetThresholds: new thresholds apply from the next check; a breach measured
// under the old For alerts under the new one; disabling a firing check resolves it; a
// negative threshold is refused and changes nothing.
func TestMonitorSetThresholds(t *testing.T) {
	var s sink
	sample := Sample{Queued: 50}
	m, err := NewMonitor(WithThresholds(Thresholds{Backlog: 100, For: time.Hour}),
		WithSample(func() Sample { return sample }), WithSink(&s))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	m.check(t0)
	if len(s.alerts) != 0 {
		t.Fatalf("50 queued under a threshold of 100: %d alerts", len(s.alerts))
	}
	if err := m.SetThresholds(Thresholds{Backlog: 10, For: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	m.check(t0.Add(time.Second))      // breach starts under the new threshold
	m.check(t0.Add(11 * time.Second)) // lasted the new For
	if len(s.alerts) != 1 || s.alerts[0].Resolved || s.alerts[0].Fields[1] != (Field{"threshold", "10"}) {
		t.Fatalf("after lowering the backlog threshold to 10: %+v, want one breach alert naming 10", s.alerts)
	}
	if err := m.SetThresholds(Thresholds{Backlog: -1}); err == nil || !strings.Contains(err.Error(), "Backlog") {
		t.Fatalf("a negative backlog: %v, want an error naming Backlog", err)
	}
	if got := m.Thresholds(); got.Backlog != 10 {
		t.Fatalf("after a refused change the thresholds are %+v, want Backlog 10 kept", got)
	}
	if err := m.SetThresholds(Thresholds{}); err != nil {
		t.Fatal(err)
	}
	m.check(t0.Add(12 * time.Second))
	if len(s.alerts) != 2 || !s.alerts[1].Resolved {
		t.Fatalf("after disabling the firing check: %+v, want its resolved alert", s.alerts)
	}
	m.check(t0.Add(13 * time.Second))
	if len(s.alerts) != 2 {
		t.Fatalf("a disabled check alerted again: %+v", s.alerts)
	}
}
