package task

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the DST tests must not depend on the host's zoneinfo
)

func utc(y int, mo time.Month, d, h, mi, s int) time.Time {
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

func berlin(t testing.TB) *time.Location { t.Helper(); return zone(t, "Europe/Berlin") }

func TestScheduleValidate(t *testing.T) {
	valid := []Schedule{
		At(utc(2026, 1, 1, 0, 0, 0)),
		After(0),
		After(MaxHorizon),
		Every(MinInterval),
		Every(MaxHorizon),
		EveryAfterDone(time.Minute),
		Cron("0 * * * *", nil),
		Cron("*/5 * * * * *", nil),
		Cron("0 30 2 * * mon-fri", time.UTC),
		Cron("? * * * *", nil),
		Cron("0 0 29 2 *", nil), // leap days only
		Cron("@hourly", nil),
		Cron("@every 5m", nil),
		Cron("@every 1h30m", nil),
	}
	for _, s := range valid {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	invalid := []struct {
		s    Schedule
		want []string // substrings of the message
	}{
		{Schedule{}, []string{"unknown Kind 0"}},
		{Schedule{Kind: 9}, []string{"unknown Kind 9"}},
		{At(time.Time{}), []string{"At is the zero time"}},
		{After(-time.Nanosecond), []string{"Delay -1ns"}},
		{After(MaxHorizon + 1), []string{"Delay", "MaxHorizon"}},
		{Every(0), []string{"Interval 0s", "MinInterval"}},
		{Every(MinInterval - 1), []string{"Interval 999.999µs"}},
		{Every(-time.Second), []string{"Interval -1s"}},
		{Every(MaxHorizon + 1), []string{"Interval", "MaxHorizon"}},
		{Schedule{Kind: KindEvery, Interval: time.Second, Anchor: 7}, []string{"unknown Anchor 7"}},
		{Cron("", nil), []string{`cron "": empty expression`}},
		{Cron("   ", nil), []string{`cron "   ": empty expression`}},
		{Cron("* * * *", nil), []string{`cron "* * * *"`, "expected 5 to 6 fields, found 4"}},
		{Cron("* * * * * * *", nil), []string{"expected 5 to 6 fields, found 7"}},
		{Cron("61 * * * *", nil), []string{`cron "61 * * * *"`, "above maximum (59)"}},
		{Cron("0 24 * * *", nil), []string{"above maximum (23)"}},
		{Cron("0 0 0 * *", nil), []string{"below minimum (1)"}},
		{Cron("0 0 * 13 *", nil), []string{"above maximum (12)"}},
		{Cron("0 0 * * 7", nil), []string{"above maximum (6)"}},
		{Cron("*/0 * * * *", nil), []string{"step of range should be a positive number"}},
		{Cron("1-2-3 * * * *", nil), []string{"too many hyphens"}},
		{Cron("a b c d e", nil), []string{`cron "a b c d e"`, "failed to parse int from a"}},
		{Cron(", * * * *", nil), []string{"a field matches no value"}},
		{Cron("0 0 30 2 *", nil), []string{`cron "0 0 30 2 *"`, "never fires"}},
		{Cron("0 0 31 4,6,9,11 *", nil), []string{"never fires"}},
		{Cron("@fortnightly", nil), []string{`cron "@fortnightly"`, "unrecognized descriptor"}},
		{Cron("@every banana", nil), []string{"failed to parse duration"}},
		{Cron("@every 1500ms", nil), []string{"whole number of seconds", "every 1s"}},
		{Cron("@every 500ms", nil), []string{"whole number of seconds"}},
		{Cron("@every -5s", nil), []string{"whole number of seconds"}},
		{Cron("@every 876001h", nil), []string{"MaxHorizon"}},
		{Cron("TZ=UTC", nil), []string{"time zone prefixes are not accepted"}}, // panics inside robfig/cron v3.0.1
		{Cron("TZ=Europe/Berlin 0 * * * *", nil), []string{"set Schedule.Location"}},
		{Cron("CRON_TZ=UTC 0 * * * *", nil), []string{"time zone prefixes"}},
	}
	for _, tc := range invalid {
		err := tc.s.Validate()
		if !errors.Is(err, ErrInvalidSchedule) {
			t.Errorf("%+v: Validate() = %v, want ErrInvalidSchedule", tc.s, err)
			continue
		}
		for _, w := range append(tc.want, "task: invalid schedule: ") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q lacks %q", tc.s, err, w)
			}
		}
		// The other entry points agree.
		if _, ferr := tc.s.First(utc(2026, 1, 1, 0, 0, 0)); !errors.Is(ferr, ErrInvalidSchedule) {
			t.Errorf("%+v: First accepted it: %v", tc.s, ferr)
		}
		if _, ok := tc.s.Next(utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 1, 0, 0, 0)); ok {
			t.Errorf("%+v: Next accepted it", tc.s)
		}
	}
}

func TestScheduleFirstAndNext(t *testing.T) {
	loc := berlin(t)
	now := time.Date(2026, 1, 10, 10, 0, 7, 500_000_000, time.UTC) // 10:00:07.5
	tests := []struct {
		name      string
		s         Schedule
		now       time.Time
		first     time.Time
		prev      time.Time // Next(prev, done)
		done      time.Time
		next      time.Time
		recurring bool
	}{
		{name: "at", s: At(utc(2026, 2, 1, 0, 0, 0)), now: now, first: utc(2026, 2, 1, 0, 0, 0)},
		{name: "at in the past is due at once", s: At(utc(2020, 1, 1, 0, 0, 0)), now: now, first: utc(2020, 1, 1, 0, 0, 0)},
		{name: "after", s: After(90 * time.Second), now: now, first: now.Add(90 * time.Second)},
		{name: "after zero", s: After(0), now: now, first: now},
		{
			name: "every: fixed rate ignores the run's length", s: Every(time.Minute), now: now, first: now.Add(time.Minute),
			prev: utc(2026, 1, 10, 11, 0, 0), done: utc(2026, 1, 10, 11, 5, 0), next: utc(2026, 1, 10, 11, 1, 0), recurring: true,
		},
		{
			name: "every after done: fixed delay follows completion", s: EveryAfterDone(time.Minute), now: now, first: now.Add(time.Minute),
			prev: utc(2026, 1, 10, 11, 0, 0), done: utc(2026, 1, 10, 11, 5, 0), next: utc(2026, 1, 10, 11, 6, 0), recurring: true,
		},
		{
			name: "fixed delay with a zero done counts from prevDue", s: EveryAfterDone(time.Minute), now: now, first: now.Add(time.Minute),
			prev: utc(2026, 1, 10, 11, 0, 0), next: utc(2026, 1, 10, 11, 1, 0), recurring: true,
		},
		{
			name: "cron, 5 fields", s: Cron("30 2 * * *", nil), now: now, first: utc(2026, 1, 11, 2, 30, 0),
			prev: utc(2026, 1, 11, 2, 30, 0), done: utc(2026, 1, 11, 3, 0, 0), next: utc(2026, 1, 12, 2, 30, 0), recurring: true,
		},
		{
			name: "cron: first is strictly after now", s: Cron("30 2 * * *", nil), now: utc(2026, 1, 11, 2, 30, 0), first: utc(2026, 1, 12, 2, 30, 0),
			prev: utc(2026, 1, 12, 2, 30, 0), next: utc(2026, 1, 13, 2, 30, 0), recurring: true,
		},
		{
			name: "cron, seconds field", s: Cron("*/15 * * * * *", nil), now: now, first: utc(2026, 1, 10, 10, 0, 15),
			prev: utc(2026, 1, 10, 10, 0, 45), next: utc(2026, 1, 10, 10, 1, 0), recurring: true,
		},
		{
			name: "cron @hourly", s: Cron("@hourly", nil), now: now, first: utc(2026, 1, 10, 11, 0, 0),
			prev: utc(2026, 1, 10, 11, 0, 0), next: utc(2026, 1, 10, 12, 0, 0), recurring: true,
		},
		{
			name: "cron @every truncates to the second", s: Cron("@every 5m", nil), now: now, first: utc(2026, 1, 10, 10, 5, 7),
			prev: utc(2026, 1, 10, 10, 5, 7), done: utc(2026, 1, 10, 10, 9, 0), next: utc(2026, 1, 10, 10, 10, 7), recurring: true,
		},
		{
			name: "cron in Berlin: 09:00 CET is 08:00 UTC", s: Cron("0 9 * * *", loc), now: now, first: utc(2026, 1, 11, 8, 0, 0),
			prev: utc(2026, 7, 1, 7, 0, 0), next: utc(2026, 7, 2, 7, 0, 0), recurring: true, // summer: CEST
		},
		{
			name: "cron with nil location is UTC, whatever now's zone", s: Cron("0 9 * * *", nil), now: now.In(loc), first: utc(2026, 1, 11, 9, 0, 0),
			prev: utc(2026, 1, 11, 9, 0, 0).In(loc), next: utc(2026, 1, 12, 9, 0, 0), recurring: true,
		},
		{
			name: "cron: day-of-month or day-of-week", s: Cron("0 0 13 * fri", nil), now: utc(2026, 2, 1, 0, 0, 0), first: utc(2026, 2, 6, 0, 0, 0),
			prev: utc(2026, 2, 6, 0, 0, 0), next: utc(2026, 2, 13, 0, 0, 0), recurring: true, // Fri 13 Feb 2026 is both
		},
	}
	for _, tc := range tests {
		if tc.s.Recurring() != tc.recurring {
			t.Errorf("%s: Recurring() = %v", tc.name, tc.s.Recurring())
		}
		first, err := tc.s.First(tc.now)
		if err != nil || !first.Equal(tc.first) {
			t.Errorf("%s: First(%v) = %v, %v; want %v", tc.name, tc.now, first, err, tc.first)
		}
		next, ok := tc.s.Next(tc.prev, tc.done)
		if ok != tc.recurring || !next.Equal(tc.next) {
			t.Errorf("%s: Next(%v, %v) = %v, %v; want %v, %v", tc.name, tc.prev, tc.done, next, ok, tc.next, tc.recurring)
		}
	}
}

func TestScheduleFirstLimits(t *testing.T) {
	now := utc(2026, 1, 1, 0, 0, 0)
	if _, err := At(now.Add(MaxHorizon)).First(now); err != nil {
		t.Errorf("At exactly MaxHorizon ahead: %v", err)
	}
	if _, err := At(now.Add(MaxHorizon + 1)).First(now); !errors.Is(err, ErrInvalidSchedule) || !strings.Contains(err.Error(), "MaxHorizon") {
		t.Errorf("At beyond MaxHorizon: %v", err)
	}
	// 29 February: from 2097 the next one is 2104, beyond the library's 5-year search.
	if _, err := Cron("0 0 29 2 *", nil).First(utc(2097, 3, 1, 0, 0, 0)); !errors.Is(err, ErrInvalidSchedule) || !strings.Contains(err.Error(), "no occurrence within 5 years") {
		t.Errorf("29 Feb from 2097: %v", err)
	}
	if _, ok := Cron("0 0 29 2 *", nil).Next(utc(2096, 2, 29, 0, 0, 0), time.Time{}); ok {
		t.Error("29 Feb after 2096: Next found one within 5 years")
	}
}

// occurrences walks s from `from` and returns the due times up to and including `to`.
func occurrences(t *testing.T, s Schedule, from, to time.Time) []time.Time {
	t.Helper()
	var out []time.Time
	next, err := s.First(from)
	for ok := err == nil; ok && !next.After(to); next, ok = s.Next(next, next) {
		out = append(out, next)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// zone loads a time zone or fails the test.
func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// utcSeconds formats due times in UTC, to the second.
func utcSeconds(ts []time.Time) string {
	var b strings.Builder
	for i, x := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(x.UTC().Format("01-02 15:04:05Z"))
	}
	return b.String()
}

// dstCase is a cron expression's occurrences across one clock change: from and to are
// wall times in the zone, want the occurrences in UTC.
type dstCase struct {
	zone, name, expr string
	from, to         [5]int // month, day, hour, minute, second of 2026
	want             string
}

// dstCases are the daylight-saving rules documented on Cron, across both 2026 changes
// of three zones (whole-hour changes in both hemispheres' senses, and Lord Howe's 30
// minutes). The 2026 changes, in UTC:
//
//	Europe/Berlin       03-29 01:00 (02:00 CET -> 03:00 CEST)   10-25 01:00 (03:00 CEST -> 02:00 CET)
//	America/New_York    03-08 07:00 (02:00 EST -> 03:00 EDT)    11-01 06:00 (02:00 EDT -> 01:00 EST)
//	Australia/Lord_Howe 10-03 15:30 (02:00 +1030 -> 02:30 +11)  04-04 15:00 (02:00 +11 -> 01:30 +1030)
var dstCases = []dstCase{
	// Berlin, spring forward: 02:00-02:59 does not exist on 03-29.
	{"Europe/Berlin", "fixed time in the gap runs at the jump (03:00 CEST)", "30 2 * * *", [5]int{3, 27, 12}, [5]int{3, 30, 12},
		"03-28 01:30:00Z, 03-29 01:00:00Z, 03-30 00:30:00Z"},
	{"Europe/Berlin", "two fixed times in the gap run once", "0,30 2 * * *", [5]int{3, 28, 12}, [5]int{3, 30, 1},
		"03-29 01:00:00Z"},
	{"Europe/Berlin", "03:00 itself, the jump's first instant", "0 3 * * *", [5]int{3, 28, 12}, [5]int{3, 30, 12},
		"03-29 01:00:00Z, 03-30 01:00:00Z"},
	{"Europe/Berlin", "fixed time outside the gap", "30 1 * * *", [5]int{3, 27, 12}, [5]int{3, 30, 12},
		"03-28 00:30:00Z, 03-29 00:30:00Z, 03-29 23:30:00Z"},
	{"Europe/Berlin", "seconds field, fixed minute and hour: once at the jump", "*/30 30 2 * * *", [5]int{3, 28, 12}, [5]int{3, 30, 1},
		"03-29 01:00:00Z"},
	{"Europe/Berlin", "minute step: hour 2 does not happen", "*/20 2 * * *", [5]int{3, 29, 0}, [5]int{3, 29, 23},
		""},
	{"Europe/Berlin", "hour wildcard: no 02:30", "30 * * * *", [5]int{3, 29, 0, 15}, [5]int{3, 29, 4},
		"03-28 23:30:00Z, 03-29 00:30:00Z, 03-29 01:30:00Z"},
	{"Europe/Berlin", "@daily is fixed-time, and untouched", "@daily", [5]int{3, 28, 12}, [5]int{3, 30, 12},
		"03-28 23:00:00Z, 03-29 22:00:00Z"},
	// Berlin, fall back: 02:00-02:59 happens twice on 10-25.
	{"Europe/Berlin", "fixed time in the repeated hour runs once, on the first pass", "30 2 * * *", [5]int{10, 23, 12}, [5]int{10, 26, 12},
		"10-24 00:30:00Z, 10-25 00:30:00Z, 10-26 01:30:00Z"},
	{"Europe/Berlin", "seconds field in the repeated hour: first pass only", "*/30 30 2 * * *", [5]int{10, 25, 0}, [5]int{10, 25, 12},
		"10-25 00:30:00Z, 10-25 00:30:30Z"},
	{"Europe/Berlin", "fixed time outside the repeated hour", "30 1 * * *", [5]int{10, 23, 12}, [5]int{10, 26, 12},
		"10-23 23:30:00Z, 10-24 23:30:00Z, 10-26 00:30:00Z"},
	{"Europe/Berlin", "minute step covers both passes", "*/20 2 * * *", [5]int{10, 25, 0}, [5]int{10, 25, 12},
		"10-25 00:00:00Z, 10-25 00:20:00Z, 10-25 00:40:00Z, 10-25 01:00:00Z, 10-25 01:20:00Z, 10-25 01:40:00Z"},
	{"Europe/Berlin", "hour step covers both passes", "30 */2 * * *", [5]int{10, 25, 1}, [5]int{10, 25, 5},
		"10-25 00:30:00Z, 10-25 01:30:00Z, 10-25 03:30:00Z"}, // 02:30 CEST, 02:30 CET, 04:30 CET
	// New York, spring forward: 02:00-02:59 does not exist on 03-08.
	{"America/New_York", "fixed time in the gap runs at the jump (03:00 EDT)", "30 2 * * *", [5]int{3, 6, 12}, [5]int{3, 9, 12},
		"03-07 07:30:00Z, 03-08 07:00:00Z, 03-09 06:30:00Z"},
	{"America/New_York", "fixed time after the gap", "30 3 * * *", [5]int{3, 7, 12}, [5]int{3, 9, 12},
		"03-08 07:30:00Z, 03-09 07:30:00Z"},
	{"America/New_York", "every minute: 02:00-02:59 simply does not happen", "* * * * *", [5]int{3, 8, 1, 58}, [5]int{3, 8, 3, 1},
		"03-08 06:59:00Z, 03-08 07:00:00Z, 03-08 07:01:00Z"},
	// New York, fall back: 01:00-01:59 happens twice on 11-01.
	{"America/New_York", "fixed time in the repeated hour runs once, on the first pass", "30 1 * * *", [5]int{10, 30, 12}, [5]int{11, 2, 12},
		"10-31 05:30:00Z, 11-01 05:30:00Z, 11-02 06:30:00Z"},
	{"America/New_York", "fixed time outside the repeated hour", "30 2 * * *", [5]int{10, 31, 12}, [5]int{11, 2, 12},
		"11-01 07:30:00Z, 11-02 07:30:00Z"},
	{"America/New_York", "minute step covers both passes", "*/15 1 * * *", [5]int{11, 1, 0}, [5]int{11, 1, 12},
		"11-01 05:00:00Z, 11-01 05:15:00Z, 11-01 05:30:00Z, 11-01 05:45:00Z, 11-01 06:00:00Z, 11-01 06:15:00Z, 11-01 06:30:00Z, 11-01 06:45:00Z"},
	// Lord Howe, spring forward by 30 minutes: 02:00-02:29 does not exist on 10-04.
	{"Australia/Lord_Howe", "fixed time in the half-hour gap runs at the jump (02:30 +11)", "15 2 * * *", [5]int{10, 2, 12}, [5]int{10, 5, 12},
		"10-02 15:45:00Z, 10-03 15:30:00Z, 10-04 15:15:00Z"},
	{"Australia/Lord_Howe", "fixed time in the hour's surviving half", "45 2 * * *", [5]int{10, 3, 12}, [5]int{10, 5, 12},
		"10-03 15:45:00Z, 10-04 15:45:00Z"},
	{"Australia/Lord_Howe", "half-hourly: 02:00 does not happen", "0,30 * * * *", [5]int{10, 4, 1, 15}, [5]int{10, 4, 3, 15},
		"10-03 15:00:00Z, 10-03 15:30:00Z, 10-03 16:00:00Z"}, // 01:30 +1030, 02:30 +11, 03:00 +11
	// Lord Howe, fall back by 30 minutes: 01:30-01:59 happens twice on 04-05.
	{"Australia/Lord_Howe", "fixed time in the repeated half hour runs once, on the first pass", "45 1 * * *", [5]int{4, 3, 12}, [5]int{4, 6, 12},
		"04-03 14:45:00Z, 04-04 14:45:00Z, 04-05 15:15:00Z"},
	{"Australia/Lord_Howe", "fixed time before the repeated half hour", "15 1 * * *", [5]int{4, 4, 12}, [5]int{4, 6, 12},
		"04-04 14:15:00Z, 04-05 14:45:00Z"},
	{"Australia/Lord_Howe", "minute step covers both passes", "*/10 1 * * *", [5]int{4, 5, 0}, [5]int{4, 5, 12},
		"04-04 14:00:00Z, 04-04 14:10:00Z, 04-04 14:20:00Z, 04-04 14:30:00Z, 04-04 14:40:00Z, 04-04 14:50:00Z, 04-04 15:00:00Z, 04-04 15:10:00Z, 04-04 15:20:00Z"},
}

func (tc dstCase) bounds(t testing.TB) (loc *time.Location, from, to time.Time) {
	loc = zone(t, tc.zone)
	at := func(f [5]int) time.Time { return time.Date(2026, time.Month(f[0]), f[1], f[2], f[3], f[4], 0, loc) }
	return loc, at(tc.from), at(tc.to)
}

// TestCronDST pins the daylight-saving rules documented on Cron (Vixie cron / cronie):
// a fixed-time job whose time falls in a skipped hour runs at the jump, a fixed-time job
// runs once in a repeated hour, and jobs with a wildcard or step in the minute or hour
// field run at every wall time that happens.
func TestCronDST(t *testing.T) {
	for _, tc := range dstCases {
		loc, from, to := tc.bounds(t)
		if got := utcSeconds(occurrences(t, Cron(tc.expr, loc), from, to)); got != tc.want {
			t.Errorf("%s, %s: %q\n got  %s\n want %s", tc.zone, tc.name, tc.expr, got, tc.want)
		}
	}

	// Whole days: hourly runs 23 times on the short day and 25 on the long one; a daily
	// fixed-time job in the changed hour runs once on both.
	berlin := berlin(t)
	for _, day := range []struct {
		date         time.Time
		hourly, once int
	}{
		{time.Date(2026, 3, 29, 0, 0, 0, 0, berlin), 23, 1},
		{time.Date(2026, 10, 25, 0, 0, 0, 0, berlin), 25, 1},
		{time.Date(2026, 6, 1, 0, 0, 0, 0, berlin), 24, 1},
	} {
		end := day.date.AddDate(0, 0, 1).Add(-time.Second)
		if got := len(occurrences(t, Cron("0 * * * *", berlin), day.date.Add(-time.Second), end)); got != day.hourly {
			t.Errorf("hourly on %s: %d runs, want %d", day.date.Format("2006-01-02"), got, day.hourly)
		}
		if got := len(occurrences(t, Cron("@hourly", berlin), day.date.Add(-time.Second), end)); got != day.hourly {
			t.Errorf("@hourly on %s: %d runs, want %d", day.date.Format("2006-01-02"), got, day.hourly)
		}
		if got := len(occurrences(t, Cron("30 2 * * *", berlin), day.date.Add(-time.Second), end)); got != day.once {
			t.Errorf("30 2 * * * on %s: %d runs, want %d", day.date.Format("2006-01-02"), got, day.once)
		}
	}

	// Submitted inside the repeated hour, on either pass: 02:30 has had its run (on the
	// first pass), so the next is the next day's.
	for _, now := range []time.Time{utc(2026, 10, 25, 0, 40, 0), utc(2026, 10, 25, 1, 10, 0)} {
		first, err := Cron("30 2 * * *", berlin).First(now)
		if err != nil || !first.Equal(utc(2026, 10, 26, 1, 30, 0)) {
			t.Errorf("First(%v) = %v, %v; want 10-26 01:30Z (02:30 CET)", now.In(berlin), first, err)
		}
	}
	// Submitted on the first pass before 02:30: that run is still to come.
	if first, _ := Cron("30 2 * * *", berlin).First(utc(2026, 10, 25, 0, 10, 0)); !first.Equal(utc(2026, 10, 25, 0, 30, 0)) {
		t.Errorf("First(02:10 CEST) = %v; want 00:30Z (02:30 CEST)", first)
	}
	// Submitted on the spring-forward day after the jump: the gap's run has been.
	if first, _ := Cron("30 2 * * *", berlin).First(utc(2026, 3, 29, 1, 0, 0)); !first.Equal(utc(2026, 3, 30, 0, 30, 0)) {
		t.Errorf("First(03:00 CEST) = %v; want 03-30 00:30Z", first)
	}

	// Intervals are real time: 24h after 12:00 CET on the eve of spring-forward is 13:00 CEST.
	eve := time.Date(2026, 3, 28, 12, 0, 0, 0, berlin)
	if first, _ := Every(24 * time.Hour).First(eve); first.In(berlin).Hour() != 13 {
		t.Errorf("Every(24h) from %v = %v; want 13:00 CEST", eve, first.In(berlin))
	}
}

// TestCronOddZones: zones whose clocks change by half an hour, or at 02:45, follow the
// same rules. robfig/cron v3.0.1 evaluated in these zones skips the first case's
// occurrence (by a day) and returns the input itself for the last: the cases come from a
// brute-force comparison over 12 zones.
func TestCronOddZones(t *testing.T) {
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	at := func(y int, mo time.Month, d, h, mi, s int, offset time.Duration) time.Time {
		return time.Date(y, mo, d, h, mi, s, 0, time.FixedZone("", int(offset/time.Second)))
	}
	const h = time.Hour
	lordHowe, chatham := zone("Australia/Lord_Howe"), zone("Pacific/Chatham")
	tests := []struct {
		name       string
		expr       string
		loc        *time.Location
		from, want time.Time
	}{
		// 2026-10-04 02:00 +1030 -> 02:30 +1100: 13:19:52 that afternoon is unaffected.
		{"lord howe, after a 30-minute spring forward", "52 19 13 * * *", lordHowe, at(2026, 10, 4, 0, 51, 25, 10*h+30*time.Minute), at(2026, 10, 4, 13, 19, 52, 11*h)},
		// 2026-09-27 02:45 +1245 -> 03:45 +1345: 02:54 does not exist that day, and the
		// fixed-time job runs at the jump.
		{"chatham, a wall time in the gap", "31 54 2 * * *", chatham, at(2026, 9, 27, 2, 43, 46, 12*h+45*time.Minute), at(2026, 9, 27, 3, 45, 0, 13*h+45*time.Minute)},
		{"chatham, after the gap's run", "31 54 2 * * *", chatham, at(2026, 9, 27, 3, 45, 0, 13*h+45*time.Minute), at(2026, 9, 28, 2, 54, 31, 13*h+45*time.Minute)},
		// 2016-04-03 03:45 +1345 -> 02:45 +1245: 03:52 exists only after the change.
		{"chatham, fall back", "24 52 3 * * *", chatham, at(2016, 4, 3, 2, 34, 56, 13*h+45*time.Minute), at(2016, 4, 3, 3, 52, 24, 12*h+45*time.Minute)},
		{"chatham, fall back, inside the repeated span", "40-48 59 3 29 4 */6", chatham, at(2018, 4, 1, 2, 59, 40, 12*h+45*time.Minute), at(2018, 4, 1, 3, 59, 40, 12*h+45*time.Minute)},
	}
	for _, tc := range tests {
		got, ok := Cron(tc.expr, tc.loc).Next(tc.from, tc.from)
		if !ok || !got.Equal(tc.want) {
			t.Errorf("%s: Next(%v) = %v, %v; want %v", tc.name, tc.from, got, ok, tc.want)
		}
	}
}

// wallMatches reports whether wall clock w (read as it is: w.In(loc) for an instant, or
// a UTC time that spells a wall clock) satisfies expression c. It reads the parsed fields
// directly, with no search to get wrong.
func wallMatches(c *compiled, x time.Time) bool {
	s := &c.spec
	dom := s.Dom&(1<<uint(x.Day())) != 0
	dow := s.Dow&(1<<uint(x.Weekday())) != 0
	day := dom || dow
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		day = dom && dow
	}
	return x.Nanosecond() == 0 && day && s.Month&(1<<uint(x.Month())) != 0 && s.Hour&(1<<uint(x.Hour())) != 0 &&
		s.Minute&(1<<uint(x.Minute())) != 0 && s.Second&(1<<uint(x.Second())) != 0
}

// occurs is the oracle: is instant x an occurrence of c, by the rules on Cron? For a job
// with a wildcard or step in its minute or hour field, exactly when its wall clock in
// loc matches. For a fixed-time job, not on the second pass of a repeated wall time, and
// also at the first instant after a forward jump when a wall time the jump skipped
// matches (scanned second by second).
// fixed is fixedTime(expr), from the text (TestFixedTime), not from c.
func occurs(c *compiled, fixed bool, x time.Time) bool {
	if x.Nanosecond() != 0 {
		return false
	}
	z := x.In(c.loc)
	if !fixed {
		return wallMatches(c, z)
	}
	_, off := z.Zone()
	if start, _ := z.ZoneBounds(); !start.IsZero() {
		_, prev := start.Add(-1).In(c.loc).Zone()
		switch {
		case prev > off && x.Before(start.Add(time.Duration(prev-off)*time.Second)):
			return false // the clocks went back at start: x's wall clock came before
		case prev < off && x.Equal(start):
			gapEnd := start.Add(time.Duration(off) * time.Second).UTC()
			for w := start.Add(time.Duration(prev) * time.Second).UTC(); w.Before(gapEnd); w = w.Add(time.Second) {
				if wallMatches(c, w) {
					return true
				}
			}
		}
	}
	return wallMatches(c, z)
}

func TestFixedTime(t *testing.T) {
	for expr, want := range map[string]bool{
		"30 2 * * *": true, "0,30 1-3 * * *": true, "*/10 30 2 * * *": true, "0 0 12 * * ?": true, "@daily": true, "@midnight": true,
		"@weekly": true, "@monthly": true, "@yearly": true, "@annually": true,
		"* 2 * * *": false, "*/5 2 * * *": false, "30 * * * *": false, "30 */2 * * *": false, "0-59/5 2 * * *": false,
		"30 0-23/2 * * *": false, "0 ? * * *": false, "5 30 * * * *": false, "@hourly": false,
	} {
		if err := Cron(expr, nil).Validate(); err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		if got := fixedTime(expr); got != want {
			t.Errorf("fixedTime(%q) = %v, want %v", expr, got, want)
		}
	}
}

// TestCronAgainstBruteForce compares next with a second-by-second scan around every
// 2026 clock change of five zones (whole-hour, half-hour, 02:45 and negative DST), for
// fixed-time jobs and jobs with wildcards or steps.
func TestCronAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	checked := 0
	for _, name := range []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "Europe/Dublin"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		var changes []time.Time
		for x := utc(2026, 1, 1, 0, 0, 0); x.Year() == 2026; {
			_, end := x.In(loc).ZoneBounds()
			if end.IsZero() || end.Year() != 2026 {
				break
			}
			changes, x = append(changes, end), end
		}
		if len(changes) != 2 {
			t.Fatalf("%s: %d clock changes in 2026", name, len(changes))
		}
		for _, change := range changes {
			for range 16 {
				// Hours near the changes, so that the oracle's scan stays short.
				expr := fmt.Sprintf("%d %s %s * * *", rng.IntN(60), []string{"*", "*/7", "0", "30", "45", "59"}[rng.IntN(6)], []string{"*", "*/2", "0-3", "1,2", "2,3"}[rng.IntN(5)])
				c, err := Cron(expr, loc).compile()
				if err != nil {
					t.Fatal(err)
				}
				from := change.Add(time.Duration(rng.IntN(4*3600)-2*3600) * time.Second)
				got := c.next(from)
				want := from.Truncate(time.Second).Add(time.Second)
				for ; !occurs(&c, fixedTime(expr), want) && want.Before(got); want = want.Add(time.Second) {
				}
				if !got.Equal(want) || !occurs(&c, fixedTime(expr), got) {
					t.Errorf("%s %q: next(%v) = %v, want %v", name, expr, from.In(loc), got.In(loc), want.In(loc))
				}
				checked++
			}
		}
	}
	t.Logf("%d cases", checked)
}

func TestCatchUp(t *testing.T) {
	loc := berlin(t)
	due := utc(2026, 1, 10, 10, 0, 0)
	sec := func(n int) time.Time { return due.Add(time.Duration(n) * time.Second) }
	tests := []struct {
		name       string
		s          Schedule
		p          MisfirePolicy
		due, now   time.Time
		runAt      time.Time
		missed     int
		nextIsPast bool // Next(runAt, runAt) may be <= now only when FireOnce saturated
	}{
		{"not late", Every(10 * time.Second), MisfireFireOnce, due, due, due, 0, false},
		{"not late, skip", Every(10 * time.Second), MisfireSkip, due, due, due, 0, false},
		{"early", Every(10 * time.Second), MisfireSkip, due, sec(-5), due, 0, false},
		// Occurrences due by now=+9s: only due itself (k=1).
		{"late within a period, fire once", Every(10 * time.Second), MisfireFireOnce, due, sec(9), due, 0, false},
		{"late within a period, skip", Every(10 * time.Second), MisfireSkip, due, sec(9), sec(10), 1, false},
		// now=+35s: due, +10, +20, +30 (k=4).
		{"fixed rate, fire once", Every(10 * time.Second), MisfireFireOnce, due, sec(35), sec(30), 3, false},
		{"fixed rate, skip", Every(10 * time.Second), MisfireSkip, due, sec(35), sec(40), 4, false},
		// now=+30s exactly: +30 is due too (k=4), and skipping goes strictly beyond now.
		{"on an occurrence, fire once", Every(10 * time.Second), MisfireFireOnce, due, sec(30), sec(30), 3, false},
		{"on an occurrence, skip", Every(10 * time.Second), MisfireSkip, due, sec(30), sec(40), 4, false},
		{"fixed delay counts the same lattice", EveryAfterDone(10 * time.Second), MisfireFireOnce, due, sec(35), sec(30), 3, false},
		{"fixed delay, skip", EveryAfterDone(10 * time.Second), MisfireSkip, due, sec(35), sec(40), 4, false},
		{"cron seconds, fire once", Cron("*/10 * * * * *", nil), MisfireFireOnce, due, sec(35), sec(30), 3, false},
		{"cron seconds, skip", Cron("*/10 * * * * *", nil), MisfireSkip, due, sec(35), sec(40), 4, false},
		{"cron @every, fire once", Cron("@every 10s", nil), MisfireFireOnce, due, sec(35), sec(30), 3, false},
		{"cron @every, skip", Cron("@every 10s", nil), MisfireSkip, due, sec(35), sec(40), 4, false},
		// Hourly from 10:00, considered at 15:30: 10..15 (k=6).
		{"cron hourly, fire once", Cron("0 * * * *", nil), MisfireFireOnce, due, utc(2026, 1, 10, 15, 30, 0), utc(2026, 1, 10, 15, 0, 0), 5, false},
		{"cron hourly, skip", Cron("0 * * * *", nil), MisfireSkip, due, utc(2026, 1, 10, 15, 30, 0), utc(2026, 1, 10, 16, 0, 0), 6, false},
		// Every second for 10 minutes: 601 occurrences, still counted exactly; up to the
		// bound and one past it.
		{"cron every second for 10m, fire once", Cron("* * * * * *", nil), MisfireFireOnce, due, sec(600), sec(600), 600, false},
		{"cron every second for 10m, skip", Cron("* * * * * *", nil), MisfireSkip, due, sec(600), sec(601), 601, false},
		{"cron count at the bound, fire once", Cron("* * * * * *", nil), MisfireFireOnce, due, sec(MaxMissedCount), sec(MaxMissedCount), MaxMissedCount, false},
		{"cron count at the bound, skip", Cron("* * * * * *", nil), MisfireSkip, due, sec(MaxMissedCount - 1), sec(MaxMissedCount), MaxMissedCount, false},
		// For a day: the walk stops at MaxMissedCount; FireOnce's runAt is then now.
		{"cron count saturates, fire once", Cron("* * * * * *", nil), MisfireFireOnce, due, sec(86400), sec(86400), MaxMissedCount, false},
		{"cron count saturates, skip", Cron("* * * * * *", nil), MisfireSkip, due, sec(86400), sec(86401), MaxMissedCount, false},
		{"cron count saturates mid-second, fire once", Cron("* * * * * *", nil), MisfireFireOnce, due, sec(86400).Add(time.Millisecond), sec(86400).Add(time.Millisecond), MaxMissedCount, false},
		{"interval count saturates, skip", Every(time.Millisecond), MisfireSkip, due, sec(86400).Add(500 * time.Microsecond), sec(86400).Add(time.Millisecond), MaxMissedCount, false},
		{"interval count saturates, fire once", Every(time.Millisecond), MisfireFireOnce, due, sec(86400).Add(500 * time.Microsecond), sec(86400), MaxMissedCount, false},
		// Fall back in Berlin: 02:30 runs once on 10-25 (CEST, 00:30Z), not again at 02:30
		// CET; then 10-26 01:30Z. Both missed by 10-26 02:00Z.
		{"dst fall back, fire once", Cron("30 2 * * *", loc), MisfireFireOnce, utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 26, 2, 0, 0), utc(2026, 10, 26, 1, 30, 0), 1, false},
		{"dst fall back, skip", Cron("30 2 * * *", loc), MisfireSkip, utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 26, 2, 0, 0), utc(2026, 10, 27, 1, 30, 0), 2, false},
		// Spring forward: 02:30 runs at the jump, 03:00 CEST (01:00Z).
		{"dst spring forward, skip", Cron("30 2 * * *", loc), MisfireSkip, utc(2026, 3, 28, 1, 30, 0), utc(2026, 3, 29, 2, 0, 0), utc(2026, 3, 30, 0, 30, 0), 2, false},
		// One-shots are never skipped: they run late.
		{"one-shot, fire once", At(due), MisfireFireOnce, due, sec(3600), sec(3600), 0, true},
		{"one-shot, skip", After(time.Second), MisfireSkip, due, sec(3600), sec(3600), 0, true},
		{"invalid schedule runs late", Cron("nonsense", nil), MisfireSkip, due, sec(60), sec(60), 0, true},
	}
	for _, tc := range tests {
		runAt, missed := tc.s.CatchUp(tc.p, tc.due, tc.now)
		if !runAt.Equal(tc.runAt) || missed != tc.missed {
			t.Errorf("%s: CatchUp(%v, %v, %v) = %v, %d; want %v, %d", tc.name, tc.p, tc.due, tc.now, runAt, missed, tc.runAt, tc.missed)
			continue
		}
		// The contract the engine relies on: a FireOnce runAt is not in the future, and
		// Next from it is; a Skip runAt is in the future.
		if !tc.now.After(tc.due) || tc.nextIsPast {
			continue
		}
		if tc.p == MisfireSkip {
			if !runAt.After(tc.now) {
				t.Errorf("%s: skip to %v, not after now %v", tc.name, runAt, tc.now)
			}
			continue
		}
		if runAt.After(tc.now) {
			t.Errorf("%s: fire-once runAt %v is after now %v", tc.name, runAt, tc.now)
		}
		if next, ok := tc.s.Next(runAt, runAt); !ok || !next.After(tc.now) {
			t.Errorf("%s: Next(runAt) = %v, %v; want after now %v", tc.name, next, ok, tc.now)
		}
	}
}

// TestCatchUpExtremes: the lattice arithmetic cannot overflow at the horizon.
func TestCatchUpExtremes(t *testing.T) {
	due := utc(2000, 1, 1, 0, 0, 0)
	now := due.Add(MaxHorizon)
	for _, s := range []Schedule{Every(MinInterval), Every(MaxHorizon), Every(MaxHorizon / 3)} {
		for _, p := range []MisfirePolicy{MisfireFireOnce, MisfireSkip} {
			runAt, missed := s.CatchUp(p, due, now)
			if missed < 0 || missed > MaxMissedCount || runAt.Before(due) || (p == MisfireSkip) != runAt.After(now) {
				t.Errorf("%v %v: CatchUp = %v, %d", s.Interval, p, runAt, missed)
			}
		}
	}
}

func TestScheduleIsPlainData(t *testing.T) {
	a := Cron("0 * * * *", nil)
	b := a
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.First(utc(2026, 1, 1, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	// Using a schedule leaves no trace in it: copies and fresh values stay ==.
	if a != b || a != Cron("0 * * * *", nil) {
		t.Error("using a Schedule changed its value")
	}
}

func TestCronCacheBounded(t *testing.T) {
	for i := range 2*cronCacheMax + 10 {
		if err := Cron(fmt.Sprintf("@every %ds", i+1), nil).Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if n := cronCacheSize.Load(); n > cronCacheMax {
		t.Errorf("cache holds %d entries, bound %d", n, cronCacheMax)
	}
	// A cached error is as good as a fresh one.
	for range 2 {
		if err := Cron("61 * * * *", nil).Validate(); !errors.Is(err, ErrInvalidSchedule) {
			t.Errorf("cached invalid expression: %v", err)
		}
	}
}

func TestScheduleEnumStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{KindAt.String(), "at"}, {KindAfter.String(), "after"}, {KindEvery.String(), "every"}, {KindCron.String(), "cron"},
		{Kind(0).String(), "Kind(0)"}, {Kind(5).String(), "Kind(5)"},
		{FixedRate.String(), "rate"}, {FixedDelay.String(), "delay"}, {Anchor(2).String(), "Anchor(2)"},
		{MisfireFireOnce.String(), "once"}, {MisfireSkip.String(), "skip"}, {MisfirePolicy(9).String(), "MisfirePolicy(9)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// FuzzCron: any expression either fails Validate with ErrInvalidSchedule or yields due
// times that move strictly forward; nothing panics.
func FuzzCron(f *testing.F) {
	for _, seed := range []string{
		"0 * * * *", "*/15 * * * * *", "30 2 * * *", "0 0 29 2 *", "0 0 30 2 *", "@hourly",
		"@every 5m", "@every 1500ms", "TZ=UTC", "CRON_TZ=", "1-2-3 * * * *", ", * * * *",
		"*/0 * * * *", "0 0 13 * fri", "? ? ? ? ?", "@", "@every ", "59 59 23 31 12 *",
	} {
		f.Add(seed)
	}
	from := utc(2026, 10, 24, 23, 59, 59) // a day before Berlin's, a week before New York's fall back
	zones := []*time.Location{nil, berlin(f), zone(f, "America/New_York"), zone(f, "Australia/Lord_Howe")}
	f.Fuzz(func(t *testing.T, expr string) {
		for _, loc := range zones {
			s := Cron(expr, loc)
			if err := s.Validate(); err != nil {
				if !errors.Is(err, ErrInvalidSchedule) {
					t.Fatalf("%q: %v", expr, err)
				}
				return
			}
			first, err := s.First(from)
			if err != nil {
				continue // no occurrence within 5 years of from (29 February and the like)
			}
			if !first.After(from) {
				t.Fatalf("%q: First(%v) = %v", expr, from, first)
			}
			if next, ok := s.Next(first, first); ok && !next.After(first) {
				t.Fatalf("%q: Next(%v) = %v", expr, first, next)
			}
		}
	})
}

// The engine calls these per occurrence; they must not allocate (a cron expression is
// parsed once, into the cache, before the measurement).
func TestScheduleNoAllocs(t *testing.T) {
	loc := berlin(t)
	prev := utc(2026, 1, 10, 10, 0, 0)
	for _, s := range []Schedule{Every(time.Second), EveryAfterDone(time.Second), Cron("*/5 * * * * *", nil), Cron("30 2 * * *", loc), Cron("@every 1m", nil), After(time.Second)} {
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() {
			s.First(prev)
			s.Next(prev, prev)
			s.CatchUp(MisfireFireOnce, prev, prev.Add(time.Minute))
			s.Recurring()
		}); n != 0 {
			t.Errorf("%+v: %v allocations per First+Next+CatchUp", s, n)
		}
	}
}
