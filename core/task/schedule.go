package task

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/tock-sched/tock/core/timer"
)

// Kind says how a Schedule computes its due times. The zero Kind is invalid, so that a
// zero Schedule is rejected rather than read as "at the zero time".
type Kind uint8

const (
	KindAt    Kind = iota + 1 // once, at Schedule.At
	KindAfter                 // once, Schedule.Delay after submission
	KindEvery                 // every Schedule.Interval, anchored per Schedule.Anchor
	KindCron                  // at the occurrences of Schedule.Cron in Schedule.Location
)

// Anchor says what an interval (KindEvery) is measured from.
type Anchor uint8

const (
	// FixedRate: next due = previous due + Interval. Occurrences stay on a fixed lattice; a
	// slow run does not push later ones back (it makes the next one late instead).
	FixedRate Anchor = iota
	// FixedDelay: next due = previous run's completion + Interval. Runs are always at
	// least Interval apart; the schedule drifts by every run's duration.
	FixedDelay
)

// MisfirePolicy says what happens to the occurrences of a recurring task that came due
// while the engine was stopped or behind, or while an earlier occurrence was still
// running or backing off between its retries (a task never has two attempts at once).
// Each occurrence missed is counted (Stats.Misfired, EventMisfired). See
// Schedule.CatchUp.
type MisfirePolicy uint8

const (
	// MisfireFireOnce (the default) runs once, now, in place of all the missed occurrences.
	MisfireFireOnce MisfirePolicy = iota
	// MisfireSkip runs none of them and waits for the next occurrence in the future.
	MisfireSkip
)

// Limits on schedules.
const (
	// MaxHorizon is the furthest ahead a schedule may reach (100 years of 365 days): the
	// timer core's own limit (timer.MaxDelay), so every due time a valid schedule yields
	// can be armed.
	MaxHorizon = timer.MaxDelay
	// MinInterval is the shortest KindEvery interval: the timer core's default tick. A
	// shorter interval would only be rounded up to the tick and fire back to back.
	MinInterval = time.Millisecond
	// MaxMissedCount bounds the missed count CatchUp reports. A cron schedule is counted by
	// walking its occurrences, one library call each (0.15 µs for "* * * * * *", 3.5 µs
	// for "30 2 * * *" on the 2-core dev machine), so the walk stops here: a count is for
	// metrics, and an every-minute job after a week's outage must not hold a shard lock
	// for 15 ms. Intervals are counted in O(1) but saturate here too, for one rule.
	MaxMissedCount = 1000
)

// Schedule says when a task runs. It is plain data: it holds no parsed state, so copies
// are independent, == compares what the user wrote, and the zero Schedule is invalid.
// A cron expression is parsed on use, through a process-wide cache (costs on Validate).
// Build one with At, After, Every, EveryAfterDone or Cron.
type Schedule struct {
	Kind Kind
	// Anchor (KindEvery): FixedRate (default) or FixedDelay. Beside Kind: the two bytes
	// share one word (record's size class: engine_test.go's TestRecordSize).
	Anchor   Anchor
	At       time.Time     // KindAt: the due time (a past time is due at once)
	Delay    time.Duration // KindAfter: how long after submission (or a child's release), in [0, MaxHorizon]
	Interval time.Duration // KindEvery: in [MinInterval, MaxHorizon]
	// Cron (KindCron): 5 fields (minute hour day-of-month month day-of-week), or 6 with a
	// leading seconds field; or a descriptor: @yearly, @annually, @monthly, @weekly,
	// @daily, @midnight, @hourly, @every <duration>. Parsed by github.com/robfig/cron/v3.
	// A "TZ=" or "CRON_TZ=" prefix is rejected: the zone is Location, in one place.
	Cron string
	// Location is the time zone a KindCron expression's wall-clock fields are read in;
	// nil means UTC (never the machine's local zone, which differs between hosts).
	Location *time.Location
}

// At schedules one run at t (a past t is due immediately).
func At(t time.Time) Schedule { return Schedule{Kind: KindAt, At: t} }

// After schedules one run d after submission.
func After(d time.Duration) Schedule { return Schedule{Kind: KindAfter, Delay: d} }

// Every schedules a run every d at a fixed rate: occurrence n is due at submission + n*d,
// however long each run takes and however its retries went (a retry belongs to its
// occurrence and never moves the ones after it; those that come due while it runs or
// backs off are misfires, handled by the task's MisfirePolicy).
func Every(d time.Duration) Schedule { return Schedule{Kind: KindEvery, Interval: d} }

// EveryAfterDone schedules a run d after the previous run completed (fixed delay); the
// first run is due d after submission.
func EveryAfterDone(d time.Duration) Schedule {
	return Schedule{Kind: KindEvery, Interval: d, Anchor: FixedDelay}
}

// Cron schedules runs at the occurrences of a cron expression (see Schedule.Cron for the
// syntax) in loc's wall clock; nil loc means UTC. Day-of-month and day-of-week both
// restricted means either matches (classic cron); "?" is a synonym for "*". "@every d"
// needs d to be a whole number of seconds of at least 1s (the library would silently
// round anything else); use Every for other intervals.
//
// Daylight saving time (and any other change of loc's offset) follows Vixie cron and
// cronie. A job is fixed-time when neither its minute field nor its hour field is a
// wildcard or a step: no "*", "?" or "/" in either ("30 2 * * *", "0 9,17 * * 1-5",
// "*/10 30 2 * * *": a seconds field does not count; @daily, @weekly, @monthly, @yearly).
// Every other job has a wildcard or step ("0 * * * *", "*/5 * * * *", "30 */2 * * *",
// "0-59/5 2 * * *", @hourly).
//
//   - Clocks jump forward, and wall times in between never happen. A fixed-time job
//     whose time falls there runs at the first instant after the jump, once however many
//     of its times fell there. On 2026-03-29 Berlin's clocks jump from 02:00 CET to
//     03:00 CEST: "30 2 * * *" runs at 03:00 CEST (01:00 UTC), as does "0,30 2 * * *",
//     once. A job with a wildcard or step runs at the wall times that happen: "0 * * * *"
//     runs 23 times that day (no 02:00), "*/20 2 * * *" not at all.
//   - Clocks fall back, and wall times in between happen twice. A fixed-time job runs
//     once, on the first pass. On 2026-10-25 Berlin's clocks fall back from 03:00 CEST to
//     02:00 CET: "30 2 * * *" runs at 02:30 CEST (00:30 UTC) and not at 02:30 CET (a task
//     submitted after 02:30 CEST, on either pass, next runs the next day). A job with a
//     wildcard or step runs on both passes: "0 * * * *" runs 25 times that day,
//     "*/20 2 * * *" six times.
//   - Wall times outside the changed span are unaffected: "30 1 * * *" runs once on both
//     days (2026-10-25 01:30 CEST = 2026-10-24 23:30 UTC).
//
// So a job meant to run once a day at a fixed time does, every day. The rules are the same in every
// zone, half-hour changes included (pinned by tests across both 2026 changes of
// Europe/Berlin, America/New_York and Australia/Lord_Howe, on the engine's fake clock
// too). Every and EveryAfterDone measure real elapsed time and ignore DST altogether.
func Cron(expr string, loc *time.Location) Schedule {
	return Schedule{Kind: KindCron, Cron: expr, Location: loc}
}

// Recurring reports whether s has more than one occurrence (KindEvery, KindCron). O(1).
func (s Schedule) Recurring() bool { return s.Kind == KindEvery || s.Kind == KindCron }

// Validate returns nil for a usable schedule, and otherwise an error wrapping
// ErrInvalidSchedule that names the field (for cron, the expression and the parser's
// message). A cron expression that can never fire (day 30 of February) is invalid.
// Cost: O(1), plus for KindCron a cache lookup, and a parse on a miss (~3 µs).
func (s Schedule) Validate() error {
	_, err := s.compile()
	return err
}

// First returns the first due time of a task submitted at now: At for KindAt (which must
// lie within MaxHorizon of now); now+Delay or now+Interval for KindAfter and KindEvery;
// for KindCron the first occurrence strictly after now. An invalid schedule, or a cron
// expression with no occurrence within the library's 5-year search, is an error wrapping
// ErrInvalidSchedule. Cost: Validate's, plus for KindCron one search (see Cron); no
// allocation once the expression is cached.
func (s Schedule) First(now time.Time) (time.Time, error) {
	c, err := s.compile()
	if err != nil {
		return time.Time{}, err
	}
	switch s.Kind {
	case KindAt:
		if s.At.Sub(now) > MaxHorizon {
			return time.Time{}, invalid("At %v is more than MaxHorizon (%v) after now", s.At, MaxHorizon)
		}
		return s.At, nil
	case KindAfter:
		return now.Add(s.Delay), nil
	case KindEvery:
		return now.Add(s.Interval), nil
	}
	t := c.next(now)
	if t.IsZero() {
		return time.Time{}, invalid("cron %q has no occurrence within 5 years of %v", s.Cron, now)
	}
	return t, nil
}

// Next returns the due time of the occurrence after the one that was due at prevDue and
// whose run completed at done. FixedRate: prevDue + Interval; FixedDelay: done + Interval
// (a done before prevDue, such as the zero time, counts as prevDue: a run cannot end
// before it was due); cron: the first occurrence strictly after prevDue. Next does not
// look at the clock: if the result is already past, the engine applies CatchUp.
// ok is false for one-shot kinds, invalid schedules, and a cron expression with no
// further occurrence. Cost as for First.
func (s Schedule) Next(prevDue, done time.Time) (next time.Time, ok bool) {
	c, err := s.compile()
	if err != nil {
		return time.Time{}, false
	}
	switch s.Kind {
	case KindEvery:
		if s.Anchor == FixedDelay {
			if done.Before(prevDue) {
				done = prevDue
			}
			return done.Add(s.Interval), true
		}
		return prevDue.Add(s.Interval), true
	case KindCron:
		t := c.next(prevDue)
		return t, !t.IsZero()
	}
	return time.Time{}, false
}

// CatchUp handles an occurrence that was due at due but is only being considered at now,
// because the engine was stopped or behind. Whether lateness counts as a misfire is the
// caller's decision (a threshold); CatchUp only counts and chooses. due must be an
// occurrence of s. Let k be the number of occurrences in [due, now]:
//
//   - now <= due: nothing is late: (due, 0).
//   - one-shot kinds (and invalid schedules): a single run is never skipped; it runs
//     late: (now, 0), whatever the policy.
//   - MisfireFireOnce: one run stands in for all k occurrences, so k-1 are missed.
//     runAt is the latest occurrence <= now: run it now, and record runAt as its due
//     time, so that Next(runAt, done) continues on the schedule (passing the original
//     due would yield occurrences that are already past, and catch up again).
//   - MisfireSkip: none of them runs, so k are missed; runAt is the first occurrence
//     after now. A zero runAt means a cron expression has no further occurrence.
//
// FixedDelay intervals are counted as if every run took no time (due, due+Interval, ...).
// Cost: O(1) for intervals and "@every"; a cron expression is counted by walking its
// occurrences, one Next each, stopping at MaxMissedCount: past that the count saturates
// and FireOnce's runAt is now (Next(now, done) is then still correct for cron).
func (s Schedule) CatchUp(p MisfirePolicy, due, now time.Time) (runAt time.Time, missed int) {
	if !now.After(due) {
		return due, 0
	}
	c, err := s.compile()
	if err != nil || !s.Recurring() {
		return now, 0
	}
	var k int64               // occurrences in [due, now]
	var last, after time.Time // the latest occurrence <= now, and the first one after it
	if c.every > 0 {
		k = int64(now.Sub(due)/c.every) + 1
		// (k-1)*every <= now-due, which is a valid Duration, so neither step overflows.
		last = due.Add(time.Duration(k-1) * c.every)
		after = last.Add(c.every)
	} else {
		k, last = 1, due
		for {
			t := c.next(last)
			if t.IsZero() || t.After(now) {
				after = t
				break
			}
			k, last = k+1, t
			if k > MaxMissedCount {
				last, after = now, c.next(now)
				break
			}
		}
	}
	if p == MisfireSkip {
		return after, int(min(k, MaxMissedCount))
	}
	return last, int(min(k-1, MaxMissedCount))
}

// compiled is a validated Schedule with its cron expression parsed.
type compiled struct {
	// spec is the parsed field expression, evaluated on wall clocks written as UTC
	// times (see next). Valid when every == 0 and the kind is KindCron.
	spec cron.SpecSchedule
	loc  *time.Location // KindCron: the zone whose wall clock spec describes
	// fixed: spec is a fixed-time job, whose minute and hour fields are neither wildcards
	// nor steps (cronie's rule): it follows the daylight-saving rules on Cron.
	fixed bool
	// every is the period of a lattice schedule: KindEvery's Interval (FixedRate and
	// FixedDelay alike, for CatchUp's count) or a cron "@every" duration.
	every time.Duration
}

// maxOffsetChange bounds how far one change of a zone's offset can move its clocks: the
// span of offsets in use, UTC-12 to UTC+14. A span that began longer ago than this
// holds no wall time repeated from the one before.
const maxOffsetChange = 26 * time.Hour

// maxZoneSpans bounds next's walk over a zone's offset changes: five years (the
// library's own search limit) of the busiest real zones (four changes a year) need 21.
const maxZoneSpans = 64

// next returns the first cron occurrence strictly after t, or the zero time when there is
// none within the library's 5-year search. For "@every d" occurrences are whole seconds:
// t truncated to the second, plus d (robfig/cron's ConstantDelaySchedule).
//
// Occurrences are those documented on Cron. The library is asked only about wall clocks,
// in UTC, where no clock ever changes, and the zone's offsets are applied here, one span
// of constant offset at a time: the first matching wall clock whose instant lies inside
// the span it was computed for wins, else the search goes on from the start of the next
// span. For a fixed-time job (c.fixed) two more rules apply at the span's edges:
//
//   - a forward change at the span's end skips the wall times [end+off, end+nextOff):
//     a match among them (the first one past the span is the one found) runs at end,
//     the first instant after the jump, and once: the search after end starts from
//     end's own wall clock, past the gap;
//   - after a backward change at the span's start, the wall times below start+prevOff
//     came on the previous span already: the search starts above them.
//
// This holds in every zone (pinned by tests in Berlin, New York and Lord Howe, and
// against a brute-force oracle in five zones). (robfig/cron v3.0.1 evaluated in the zone
// itself skips occurrences and even returns t itself around the 30-minute and 02:45
// changes of Australia/Lord_Howe and Pacific/Chatham; an engine given t back would fire
// in a loop.)
//
// Cost: one library call per span crossed (0.15 to 4 µs, depending on how far the
// library steps field by field), plus for a fixed-time job a zone lookup per span that
// began within maxOffsetChange or ends in a jump forward; one call and no lookup on the
// common path, where no clock change lies near t or between t and the result. No
// allocation.
func (c *compiled) next(t time.Time) time.Time {
	if c.every > 0 {
		return t.Add(c.every - time.Duration(t.Nanosecond()))
	}
	x, first := t, true
	for range maxZoneSpans {
		z := x.In(c.loc)
		_, off := z.Zone()
		start, end := z.ZoneBounds() // zero: the offset never changed, or never changes again
		offset := time.Duration(off) * time.Second
		from := x.Add(offset).UTC() // x's wall clock, as a UTC time
		if !first {
			// The span starts at x, which is itself a candidate; occurrences are
			// whole seconds and the library searches from the next whole second.
			from = from.Add(-time.Second)
		}
		if c.fixed && !start.IsZero() && x.Sub(start) < maxOffsetChange {
			if _, prev := start.Add(-1).In(c.loc).Zone(); prev > off {
				// The clocks went back at start: wall times below start+prev were on
				// the previous span, and a fixed-time job does not run them again.
				if lo := start.Add(time.Duration(prev)*time.Second - time.Second).UTC(); lo.After(from) {
					from = lo
				}
			}
		}
		w := c.spec.Next(from)
		if w.IsZero() {
			return time.Time{}
		}
		if at := w.Add(-offset); end.IsZero() || at.Before(end) {
			return at.In(c.loc)
		}
		if c.fixed {
			// The clocks go forward at end: a wall time they skip runs at end.
			if _, nextOff := end.In(c.loc).Zone(); nextOff > off && w.Before(end.Add(time.Duration(nextOff)*time.Second).UTC()) {
				return end.In(c.loc)
			}
		}
		// That wall clock falls in a later span (or in a gap, where it never happens):
		// search again from where the offset changes.
		x, first = end, false
	}
	return time.Time{}
}

// invalid formats an ErrInvalidSchedule.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSchedule}, args...)...)
}

// compile checks s and prepares what its methods need. Cost: O(1), plus a cache lookup
// for KindCron (and a parse on a miss).
func (s Schedule) compile() (compiled, error) {
	switch s.Kind {
	case KindAt:
		if s.At.IsZero() {
			return compiled{}, invalid("At is the zero time")
		}
	case KindAfter:
		if s.Delay < 0 || s.Delay > MaxHorizon {
			return compiled{}, invalid("Delay %v is outside [0, MaxHorizon (%v)]", s.Delay, MaxHorizon)
		}
	case KindEvery:
		if s.Interval < MinInterval || s.Interval > MaxHorizon {
			return compiled{}, invalid("Interval %v is outside [MinInterval (%v), MaxHorizon (%v)]", s.Interval, MinInterval, MaxHorizon)
		}
		if s.Anchor != FixedRate && s.Anchor != FixedDelay {
			return compiled{}, invalid("unknown Anchor %d", s.Anchor)
		}
		return compiled{every: s.Interval}, nil
	case KindCron:
		p := parseCron(s.Cron)
		if p.err != nil {
			return compiled{}, p.err
		}
		c := compiled{spec: p.spec, every: p.every, loc: s.Location, fixed: p.fixed}
		if c.loc == nil {
			c.loc = time.UTC
		}
		return c, nil
	default:
		return compiled{}, invalid("unknown Kind %d", s.Kind)
	}
	return compiled{}, nil
}

// parsedCron is the cached outcome of parsing one expression: a field expression (spec,
// in UTC), an "@every" period, or the error that explains why neither.
type parsedCron struct {
	spec  cron.SpecSchedule
	every time.Duration
	fixed bool // see compiled.fixed
	err   error
}

// The cron cache maps an expression to its *parsedCron. Schedule is plain data, so the
// parse cannot live in it; without a cache the engine would reparse (~3 µs) at every
// occurrence of every cron task. It is bounded by clearing it whenever it passes
// cronCacheMax entries: real deployments use few distinct expressions, and a flood of
// distinct ones (say, from clients) then costs a reparse, never unbounded memory.
const cronCacheMax = 4096

var (
	cronCache     sync.Map     // string -> *parsedCron
	cronCacheSize atomic.Int64 // approximate entry count; reset on clear
)

// cronParser accepts 5 fields or 6 with a leading seconds field, and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseCron returns expr's parse, from the cache when it can. Safe for concurrent use.
func parseCron(expr string) *parsedCron {
	if v, ok := cronCache.Load(expr); ok {
		return v.(*parsedCron)
	}
	p := parseCronUncached(expr)
	if cronCacheSize.Add(1) > cronCacheMax {
		cronCache.Clear()
		cronCacheSize.Store(0)
	}
	cronCache.Store(expr, p)
	return p
}

// referenceTime is where the "can it ever fire" check searches from: 2000 is a leap year,
// so a 29 February expression is found within the library's 5-year window.
var referenceTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// starBit is robfig/cron's marker bit for a "*" field (unexported there as starBit too);
// it is not a value.
const starBit = 1 << 63

func parseCronUncached(expr string) (p *parsedCron) {
	p = &parsedCron{}
	bad := func(format string, args ...any) *parsedCron {
		p.err = invalid("cron %q: "+format, append([]any{expr}, args...)...)
		return p
	}
	switch {
	case strings.TrimSpace(expr) == "":
		return bad("empty expression")
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		// Also sidesteps a robfig/cron v3.0.1 panic on a prefix with no fields ("TZ=UTC").
		return bad("time zone prefixes are not accepted; set Schedule.Location")
	}
	sched, err := safeParse(expr)
	if err != nil {
		return bad("%v", err)
	}
	switch v := sched.(type) {
	case cron.ConstantDelaySchedule:
		// The library rounds "@every" up to 1s and truncates to whole seconds without a
		// word; a user who wrote 1500ms would get 1s. Refuse rather than surprise.
		asked, err := time.ParseDuration(strings.TrimPrefix(expr, "@every "))
		if err != nil || asked != v.Delay {
			return bad("@every needs a whole number of seconds, at least 1s (the library would run every %v); use Every for other intervals", v.Delay)
		}
		if v.Delay > MaxHorizon {
			return bad("@every %v exceeds MaxHorizon (%v)", v.Delay, MaxHorizon)
		}
		p.every = v.Delay
	case *cron.SpecSchedule:
		p.spec = *v
		// A field such as "," parses to no values at all; the search below would then
		// step second by second through five years before giving up.
		for _, bits := range [...]uint64{v.Second, v.Minute, v.Hour, v.Dom, v.Month, v.Dow} {
			if bits&^starBit == 0 {
				return bad("a field matches no value")
			}
		}
		p.spec.Location = time.UTC // wall clocks are evaluated as UTC times (compiled.next)
		p.fixed = fixedTime(expr)
		if p.spec.Next(referenceTime).IsZero() {
			return bad("never fires (no day matches its day-of-month, month and day-of-week fields)")
		}
	default:
		return bad("unsupported schedule type %T", sched)
	}
	return p
}

// fixedTime reports whether expr, a field expression the library has parsed, is a
// fixed-time job in cronie's sense: neither its minute nor its hour field is a wildcard
// or a step (has no "*", "?" or "/"). The parsed fields cannot tell: the library keeps
// its "*" marker for neither "*/5" nor "0-59/5", so the text is read (5 fields, or 6
// with seconds first, as the parser splits them). Of the descriptors, @hourly is not
// fixed-time; @daily, @midnight, @weekly, @monthly, @yearly and @annually are.
func fixedTime(expr string) bool {
	if strings.HasPrefix(expr, "@") {
		return expr != "@hourly"
	}
	f := strings.Fields(expr)
	if len(f) == 6 {
		f = f[1:] // the seconds field
	}
	return len(f) >= 2 && !strings.ContainsAny(f[0], "*?/") && !strings.ContainsAny(f[1], "*?/")
}

// safeParse calls the library's parser, turning a panic into an error: the public API
// never panics on bad input, and we cannot vouch for every path of code we do not own.
func safeParse(expr string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("parser panicked: %v", r)
		}
	}()
	return cronParser.Parse(expr)
}
