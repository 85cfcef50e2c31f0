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

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

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

func utcStrings(ts []time.Time) string {
	var b strings.Builder
	for i, x := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(x.UTC().Format("01-02 15:04Z"))
	}
	return b.String()
}

// TestCronDST pins what robfig/cron v3.0.1 does across Europe/Berlin's 2026 transitions,
// as documented on Cron. If an upgrade changes any of it, the doc must change too.
func TestCronDST(t *testing.T) {
	loc := berlin(t)
	tests := []struct {
		name     string
		expr     string
		from, to time.Time // local wall times
		want     string    // the occurrences in UTC
	}{
		{
			// 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist and is skipped.
			name: "spring forward: a nonexistent time is skipped",
			expr: "30 2 * * *", from: time.Date(2026, 3, 27, 12, 0, 0, 0, loc), to: time.Date(2026, 3, 31, 12, 0, 0, 0, loc),
			want: "03-28 01:30Z, 03-30 00:30Z, 03-31 00:30Z",
		},
		{
			// 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice, and so does the job.
			name: "fall back: a repeated time runs twice",
			expr: "30 2 * * *", from: time.Date(2026, 10, 23, 12, 0, 0, 0, loc), to: time.Date(2026, 10, 26, 12, 0, 0, 0, loc),
			want: "10-24 00:30Z, 10-25 00:30Z, 10-25 01:30Z, 10-26 01:30Z",
		},
		{
			name: "fall back: 01:30 is outside the repeated hour and runs once",
			expr: "30 1 * * *", from: time.Date(2026, 10, 23, 12, 0, 0, 0, loc), to: time.Date(2026, 10, 26, 12, 0, 0, 0, loc),
			want: "10-23 23:30Z, 10-24 23:30Z, 10-26 00:30Z",
		},
		{
			name: "spring forward: 01:30 runs once",
			expr: "30 1 * * *", from: time.Date(2026, 3, 27, 12, 0, 0, 0, loc), to: time.Date(2026, 3, 30, 12, 0, 0, 0, loc),
			want: "03-28 00:30Z, 03-29 00:30Z, 03-29 23:30Z", // 01:30 CET, 01:30 CET, 01:30 CEST
		},
		{
			name: "fall back: every 20 minutes in hour 2 covers both 02:00 hours",
			expr: "*/20 2 * * *", from: time.Date(2026, 10, 25, 0, 0, 0, 0, loc), to: time.Date(2026, 10, 25, 12, 0, 0, 0, loc),
			want: "10-25 00:00Z, 10-25 00:20Z, 10-25 00:40Z, 10-25 01:00Z, 10-25 01:20Z, 10-25 01:40Z",
		},
		{
			name: "spring forward: hour 2 simply does not happen",
			expr: "*/20 2 * * *", from: time.Date(2026, 3, 29, 0, 0, 0, 0, loc), to: time.Date(2026, 3, 29, 23, 0, 0, 0, loc),
			want: "",
		},
	}
	for _, tc := range tests {
		got := utcStrings(occurrences(t, Cron(tc.expr, loc), tc.from, tc.to))
		if got != tc.want {
			t.Errorf("%s: %q\n got  %s\n want %s", tc.name, tc.expr, got, tc.want)
		}
	}

	// Hourly: 23 runs on the short day, 25 on the long one.
	for _, day := range []struct {
		date time.Time
		want int
	}{
		{time.Date(2026, 3, 29, 0, 0, 0, 0, loc), 23},
		{time.Date(2026, 10, 25, 0, 0, 0, 0, loc), 25},
		{time.Date(2026, 6, 1, 0, 0, 0, 0, loc), 24},
	} {
		end := day.date.AddDate(0, 0, 1).Add(-time.Second)
		if got := len(occurrences(t, Cron("0 * * * *", loc), day.date.Add(-time.Second), end)); got != day.want {
			t.Errorf("hourly on %s: %d runs, want %d", day.date.Format("2006-01-02"), got, day.want)
		}
	}

	// Submitted inside the repeated hour: the second 02:30 (CET) is still to come,
	// whether now reads 02:40 CEST (the first pass) or 02:10 CET (the second).
	for _, now := range []time.Time{utc(2026, 10, 25, 0, 40, 0), utc(2026, 10, 25, 1, 10, 0)} {
		first, err := Cron("30 2 * * *", loc).First(now)
		if err != nil || !first.Equal(utc(2026, 10, 25, 1, 30, 0)) {
			t.Errorf("First(%v) = %v, %v; want 01:30Z (02:30 CET)", now.In(loc), first, err)
		}
	}

	// Intervals are real time: 24h after 12:00 CET on the eve of spring-forward is 13:00 CEST.
	eve := time.Date(2026, 3, 28, 12, 0, 0, 0, loc)
	if first, _ := Every(24 * time.Hour).First(eve); first.In(loc).Hour() != 13 {
		t.Errorf("Every(24h) from %v = %v; want 13:00 CEST", eve, first.In(loc))
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
		// 2026-09-27 02:45 +1245 -> 03:45 +1345: 02:54 does not exist that day.
		{"chatham, a wall time in the gap", "31 54 2 * * *", chatham, at(2026, 9, 27, 2, 43, 46, 12*h+45*time.Minute), at(2026, 9, 28, 2, 54, 31, 13*h+45*time.Minute)},
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

// wallMatches is the oracle: does the wall clock of x in loc satisfy expression c? It
// reads the parsed fields directly, second by second, with no search to get wrong.
func wallMatches(c *compiled, x time.Time) bool {
	s := &c.spec
	x = x.In(c.loc)
	dom := s.Dom&(1<<uint(x.Day())) != 0
	dow := s.Dow&(1<<uint(x.Weekday())) != 0
	day := dom || dow
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		day = dom && dow
	}
	return x.Nanosecond() == 0 && day && s.Month&(1<<uint(x.Month())) != 0 && s.Hour&(1<<uint(x.Hour())) != 0 &&
		s.Minute&(1<<uint(x.Minute())) != 0 && s.Second&(1<<uint(x.Second())) != 0
}

// TestCronAgainstBruteForce compares next with a second-by-second scan around every
// 2026 clock change of five zones (whole-hour, half-hour, 02:45 and negative DST).
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
			for range 8 {
				// Hours near the changes, so that the oracle's scan stays short.
				expr := fmt.Sprintf("%d %s %s * * *", rng.IntN(60), []string{"*", "*/7", "0", "30", "45", "59"}[rng.IntN(6)], []string{"*", "*/2", "0-3", "1,2", "2,3"}[rng.IntN(5)])
				c, err := Cron(expr, loc).compile()
				if err != nil {
					t.Fatal(err)
				}
				from := change.Add(time.Duration(rng.IntN(4*3600)-2*3600) * time.Second)
				got := c.next(from)
				want := from.Truncate(time.Second).Add(time.Second)
				for ; !wallMatches(&c, want) && want.Before(got); want = want.Add(time.Second) {
				}
				if !got.Equal(want) || !wallMatches(&c, got) {
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
		// Fall back in Berlin: 02:30 CEST (00:30Z) and 02:30 CET (01:30Z) both missed.
		{"dst fall back, fire once", Cron("30 2 * * *", loc), MisfireFireOnce, utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 25, 2, 0, 0), utc(2026, 10, 25, 1, 30, 0), 1, false},
		{"dst fall back, skip", Cron("30 2 * * *", loc), MisfireSkip, utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 25, 2, 0, 0), utc(2026, 10, 26, 1, 30, 0), 2, false},
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
		{FixedRate.String(), "fixed-rate"}, {FixedDelay.String(), "fixed-delay"}, {Anchor(2).String(), "Anchor(2)"},
		{MisfireFireOnce.String(), "fire-once"}, {MisfireSkip.String(), "skip"}, {MisfirePolicy(9).String(), "MisfirePolicy(9)"},
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
	from := utc(2026, 10, 24, 23, 59, 59)
	f.Fuzz(func(t *testing.T, expr string) {
		for _, loc := range []*time.Location{nil, berlin(t)} {
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
