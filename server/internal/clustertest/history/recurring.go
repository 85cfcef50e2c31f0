package history

import (
	"slices"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// maxOccurrences bounds the occurrences recurring walks per task: a schedule far denser
// than the harness submits (MinInterval over minutes) is not walked to its end.
const maxOccurrences = 100_000

// recurring: recurring-lattice and recurring-kept (package doc) for every confirmed
// version of a fixed-rate every or a cron task (a fixed-delay one has no lattice: its
// next due time follows the previous run's end).
func (c *checker) recurring() {
	behind := c.behind()
	for _, id := range c.ids {
		for _, v := range c.versions(id) {
			sp := c.spec[version{id, v}]
			sub := c.confirmed(id, v)
			if sub == nil || !sp.Recurring() || sub.NextRun.IsZero() ||
				(sp.Schedule.Kind == task.KindEvery && sp.Schedule.Anchor == task.FixedDelay) {
				continue
			}
			c.recurringVersion(id, v, sp, sub, behind)
		}
	}
}

// behind returns the intervals during which the cluster was seen late by more than the
// misfire threshold (a first attempt of any task received that long after its due
// time), widened by Lateness, sorted by start.
func (c *checker) behind() [][2]time.Time {
	var out [][2]time.Time
	for _, r := range c.h.Runs {
		if r.Attempt == 1 && r.Received.Sub(r.Due) > c.o.MisfireThreshold {
			out = append(out, [2]time.Time{r.Due.Add(-c.o.Lateness), r.Received.Add(c.o.Lateness)})
		}
	}
	slices.SortFunc(out, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	return out
}

func within(iv [][2]time.Time, t time.Time) bool {
	for _, w := range iv {
		if w[0].After(t) {
			return false
		}
		if !t.After(w[1]) {
			return true
		}
	}
	return false
}

func (c *checker) recurringVersion(id string, v uint64, sp Spec, sub *Op, behind [][2]time.Time) {
	// The window checked: from the first due time until the task may have stopped
	// (a cancel or a replacement began, or the log ended), less Lateness.
	stop := c.end
	if maybe, _ := c.cancelled(id); !maybe.IsZero() {
		stop = maybe
	}
	if maybe, _ := c.mayReplace(id, v); !maybe.IsZero() && maybe.Before(stop) {
		stop = maybe
	}
	until := stop.Add(-c.o.Lateness)

	var firsts []*Run // first attempts, by receipt
	var lastDue time.Time
	for _, r := range c.runs[id] {
		if r.Version == v && r.Attempt == 1 {
			firsts = append(firsts, r)
			if r.Due.After(lastDue) {
				lastDue = r.Due
			}
		}
	}
	slices.SortStableFunc(firsts, func(a, b *Run) int { return a.Received.Compare(b.Received) })

	// The occurrences, from the announced first due time.
	var occ []time.Time
	for d, n := sub.NextRun, 0; n < maxOccurrences && (!d.After(until) || !d.After(lastDue)); n++ {
		occ = append(occ, d)
		next, ok := sp.Schedule.Next(d, d)
		if !ok {
			break
		}
		d = next
	}
	onLattice := make(map[int64]bool, len(occ))
	for _, d := range occ {
		onLattice[d.UnixNano()] = true
	}
	// A run due before the announced first due time is the task's only when an earlier
	// try of this very submit (same version, not refused) may have created it: the
	// reply to the later try names the next run at its time, after that one. It must
	// then be on the schedule's lattice extended backwards.
	earlier := false
	for _, op := range c.ops[id] {
		earlier = earlier || (op.Kind == Submit && op.Version == v && op.Outcome != Refused && op.Start.Before(sub.Start))
	}
	var off []*Run
	for _, r := range firsts {
		if r.Due.Before(sub.NextRun) {
			if !earlier || !occursBefore(sp.Schedule, r.Due, sub.NextRun) {
				off = append(off, r)
			}
			continue
		}
		if !onLattice[r.Due.UnixNano()] {
			off = append(off, r)
		}
	}
	if len(off) > 0 {
		r := off[0]
		c.fail("recurring-lattice", id, times(r.Received, sub.End), "run %d (epoch %d) is due at %s, not an occurrence of %s from its announced first due time %s, nor one before it that an earlier try of the submit may have armed (%d of %d first attempts off it)",
			r.RunID, r.Epoch, c.rel(r.Due), describe(sp), c.rel(sub.NextRun), len(off), len(firsts))
	}

	for _, d := range occ {
		if d.After(until) {
			break
		}
		if sp.Misfire == task.MisfireFireOnce && !c.madeUp(id, sp, d, stop, firsts) {
			continue // one violation per occurrence
		}
		if c.faultNear(d, d) || within(behind, d) {
			continue
		}
		var own *Run
		for _, r := range firsts {
			if r.Due.Equal(d) {
				own = r
				break
			}
		}
		switch {
		case own == nil:
			c.fail("recurring-kept", id, times(d), "occurrence due at %s (%s, misfire %v), in no fault's window and with the cluster on time, never ran as itself",
				c.rel(d), describe(sp), sp.Misfire)
		case own.Received.After(d.Add(c.o.Lateness)):
			c.fail("recurring-kept", id, times(d), "occurrence due at %s (%s), in no fault's window, ran only at %s (run %d, epoch %d): more than %v late",
				c.rel(d), describe(sp), c.rel(own.Received), own.RunID, own.Epoch, c.o.Lateness)
		}
	}
}

// madeUp checks MisfireFireOnce's promise for the occurrence due at d (package doc):
// for every epoch seen dispatching from s = max(d, its first run) until s + Lateness,
// before stop, a first attempt due at or after d arrived by s + Lateness. It reports
// whether the check passed.
func (c *checker) madeUp(id string, sp Spec, d, stop time.Time, firsts []*Run) bool {
	var f *Run // the first to arrive of the runs that can stand in for d
	for _, r := range firsts {
		if !r.Due.Before(d) {
			f = r
			break
		}
	}
	for _, e := range c.epochs {
		s := c.first[e]
		if s.Before(d) {
			s = d
		}
		by := s.Add(c.o.Lateness)
		if by.After(c.lastOK[e]) || by.After(stop) {
			continue // not seen dispatching that long, or the task may have stopped
		}
		if f != nil && !f.Received.After(by) {
			continue
		}
		if f == nil {
			c.fail("recurring-kept", id, times(d), "occurrence due at %s (%s, misfire once) never ran, nor did a later one stand in for it, though epoch %d dispatched from %s to %s",
				c.rel(d), describe(sp), e, c.rel(c.first[e]), c.rel(c.lastOK[e]))
		} else {
			c.fail("recurring-kept", id, times(d, f.Received), "occurrence due at %s (%s, misfire once) was first stood in for by run %d (due %s, epoch %d) at %s, more than %v after %s, while epoch %d dispatched (%s to %s)",
				c.rel(d), describe(sp), f.RunID, c.rel(f.Due), f.Epoch, c.rel(f.Received), c.o.Lateness, c.rel(s), e, c.rel(c.first[e]), c.rel(c.lastOK[e]))
		}
		return false
	}
	return true
}

// occursBefore reports whether due, before next, is an occurrence of s on the lattice
// that reaches next: for a fixed-rate interval, a whole number of intervals before it;
// for cron, an occurrence of the expression.
func occursBefore(s task.Schedule, due, next time.Time) bool {
	if s.Kind == task.KindEvery {
		return next.Sub(due)%s.Interval == 0
	}
	at, ok := s.Next(due.Add(-time.Nanosecond), time.Time{})
	return ok && at.Equal(due)
}

func describe(sp Spec) string {
	switch sp.Schedule.Kind {
	case task.KindEvery:
		return "every " + sp.Schedule.Interval.String()
	case task.KindCron:
		return "cron " + sp.Schedule.Cron
	}
	return sp.Schedule.Kind.String()
}
