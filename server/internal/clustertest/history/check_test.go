package history

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
)

var t0 = time.Unix(1_000_000, 0)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

var (
	oneShot   = Spec{Schedule: task.After(0)}
	exclusive = Spec{Schedule: task.EveryAfterDone(100 * time.Millisecond), Exclusive: true}
	everySec  = Spec{Schedule: task.Every(time.Second)}
	everySkip = Spec{Schedule: task.Every(time.Second), Misfire: task.MisfireSkip}
	cronSec   = Spec{Schedule: task.Cron("* * * * * *", nil)}
)

// submitted is an OK durable submit of id at v over [start, end], announcing next.
func submitted(id string, v uint64, sp Spec, start, end, next float64) Op {
	return Op{Kind: Submit, Task: id, Version: v, Spec: sp, Start: at(start), End: at(end), Outcome: OK,
		NextRun: at(next), ReplyVersion: v, Durable: true}
}

func cancelOp(id string, start, end float64, out Outcome, code string) Op {
	return Op{Kind: Cancel, Task: id, Start: at(start), End: at(end), Outcome: out, Code: code}
}

// ran is a run of id v received at recv and returned 10 ms later, its ACK confirmed
// 20 ms after that.
func ran(id string, v, runID, epoch uint64, attempt int, due, recv float64) Run {
	return Run{Task: id, Version: v, RunID: runID, Epoch: epoch, Attempt: attempt, Due: at(due), Received: at(recv),
		Returned: at(recv + 0.01), Answered: true, AckOK: true, AckAt: at(recv + 0.03)}
}

// unacked is ran whose report was never answered.
func unacked(r Run) Run {
	r.Answered, r.AckOK, r.AckAt = false, false, time.Time{}
	return r
}

// every runs id (v1, epoch) first attempts due at each of dues, received 50 ms late,
// with run IDs from id0.
func every(id string, epoch, id0 uint64, dues ...float64) []Run {
	var rs []Run
	for i, d := range dues {
		rs = append(rs, ran(id, 1, id0+uint64(i), epoch, 1, d, d+0.05))
	}
	return rs
}

func lockValue(runID uint64) []byte { return binary.BigEndian.AppendUint64(nil, runID) }

func checks(vs []Violation) []string {
	var names []string
	for _, v := range vs {
		if !slices.Contains(names, v.Check) {
			names = append(names, v.Check)
		}
	}
	slices.Sort(names)
	return names
}

// Each property has histories that must pass and ones that must fail it; a passing
// history passes every check, a failing one fails the named one (and only a named
// consequence besides).
func TestCheck(t *testing.T) {
	cases := []struct {
		name string
		h    History
		want string // the check that must fail; "" for a history that must pass all
		also string // another check it fails, as a consequence ("" for none)
	}{
		{"durable-runs/ran", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1)}, Runs: []Run{ran("a", 1, 1, 2, 1, 0.1, 0.2)}}, "", ""},
		{"durable-runs/lost", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1)}}, "durable-runs", ""},
		{"durable-runs/unknown-submit-need-not-run", History{Ops: []Op{{Kind: Submit, Task: "a", Version: 1, Spec: oneShot,
			Start: at(0), End: at(1), Outcome: Unknown, Code: "connection lost"}}}, "", ""},
		{"durable-runs/cancelled-need-not-run", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 5), cancelOp("a", 1, 1.1, OK, "")}}, "", ""},
		{"durable-runs/replaced-v1-need-not-run", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 5), submitted("a", 2, oneShot, 1, 1.1, 1.1)},
			Runs: []Run{ran("a", 2, 1, 2, 1, 1.1, 1.2)}}, "", ""},
		{"durable-runs/replacement-lost", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1), submitted("a", 2, oneShot, 1, 1.1, 1.1)},
			Runs: []Run{ran("a", 1, 1, 2, 1, 0.1, 0.2)}}, "durable-runs", ""},
		{"durable-runs/recurring-never-ran", History{Ops: []Op{submitted("r", 1, everySec, 0, 0.1, 1), cancelOp("r", 9, 9.1, OK, "")}}, "durable-runs", "recurring-kept"},

		{"no-run-after-ack/redelivered-after-unconfirmed-ack", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1)},
			Runs: []Run{unacked(ran("a", 1, 1, 2, 1, 0.1, 0.2)), ran("a", 1, 2, 3, 1, 0.1, 3)}}, "", ""},
		{"no-run-after-ack/ran-after-confirmed-ack", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1)},
			Runs: []Run{ran("a", 1, 1, 2, 1, 0.1, 0.2), ran("a", 1, 2, 3, 1, 0.1, 3)}}, "no-run-after-ack", ""},

		{"no-run-after-cancel/ran-after-confirmed-cancel", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 2), cancelOp("a", 1, 1.1, OK, "")},
			Runs: []Run{ran("a", 1, 1, 2, 1, 2, 2.1)}}, "no-run-after-cancel", ""},
		{"no-run-after-cancel/fire-raced-the-cancel", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 1), cancelOp("a", 1.01, 1.1, OK, "")},
			Runs: []Run{ran("a", 1, 1, 2, 1, 1, 1.103)}}, "", ""},
		{"no-run-after-cancel/ran-long-after-confirmed-cancel", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 1), cancelOp("a", 1.01, 1.1, OK, "")},
			Runs: []Run{ran("a", 1, 1, 2, 1, 1, 4)}}, "no-run-after-cancel", ""},
		{"no-run-after-cancel/unknown-cancel", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 2), cancelOp("a", 1, 1.1, Unknown, "timeout")},
			Runs: []Run{ran("a", 1, 1, 2, 1, 2, 2.1)}}, "", ""},
		{"no-run-after-cancel/replaced-version-ran", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 2), submitted("a", 2, oneShot, 1, 1.1, 1.1)},
			Runs: []Run{ran("a", 2, 1, 2, 1, 1.1, 1.2), ran("a", 1, 2, 2, 1, 2, 2.1)}}, "no-run-after-cancel", ""},

		{"cancel-finds-live/one-shot-done", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1), cancelOp("a", 2, 2.1, Refused, "NOT_FOUND")},
			Runs: []Run{ran("a", 1, 1, 2, 1, 0.1, 0.2)}}, "", ""},
		{"cancel-finds-live/one-shot-pending", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 5), cancelOp("a", 2, 2.1, Refused, "NOT_FOUND")},
			Runs: []Run{ran("a", 1, 1, 2, 1, 5, 5.1)}}, "cancel-finds-live", ""},
		{"cancel-finds-live/recurring", History{Ops: []Op{submitted("r", 1, exclusive, 0, 0.1, 0.2), cancelOp("r", 2, 2.1, Refused, "NOT_FOUND")},
			Runs: []Run{ran("r", 1, 1, 2, 1, 0.2, 0.3)}}, "cancel-finds-live", ""},
		{"cancel-finds-live/retry-after-unknown-cancel", History{Ops: []Op{submitted("r", 1, exclusive, 0, 0.1, 0.2),
			cancelOp("r", 2, 2.1, Unknown, "timeout"), cancelOp("r", 3, 3.1, Refused, "NOT_FOUND")},
			Runs: []Run{ran("r", 1, 1, 2, 1, 0.2, 0.3)}}, "", ""},

		{"exclusive-overlap/back-to-back", History{Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			Runs: []Run{
				{Task: "x", Version: 1, RunID: 1, Epoch: 2, Attempt: 1, Due: at(0.2), Received: at(1), Returned: at(2)},
				{Task: "x", Version: 1, RunID: 2, Epoch: 3, Attempt: 1, Due: at(2), Received: at(2), Returned: at(3)}}}, "", ""},
		{"exclusive-overlap/overlap", History{Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			Runs: []Run{
				{Task: "x", Version: 1, RunID: 1, Epoch: 2, Attempt: 1, Due: at(0.2), Received: at(1), Returned: at(3)},
				{Task: "x", Version: 1, RunID: 2, Epoch: 3, Attempt: 1, Due: at(1.5), Received: at(2), Returned: at(2.5)}}}, "exclusive-overlap", ""},
		{"exclusive-overlap/never-returned", History{Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			Runs: []Run{
				{Task: "x", Version: 1, RunID: 1, Epoch: 2, Attempt: 1, Due: at(0.2), Received: at(1)},
				{Task: "x", Version: 1, RunID: 2, Epoch: 3, Attempt: 1, Due: at(4), Received: at(5), Returned: at(6)}}}, "exclusive-overlap", ""},

		{"run-id-unique/same-fire-twice", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1)},
			Runs: []Run{unacked(ran("a", 1, 7, 2, 1, 0.1, 0.2)), ran("a", 1, 7, 2, 1, 0.1, 0.3)}}, "", ""},
		{"run-id-unique/new-leader-reuses-id", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1)},
			Runs: []Run{unacked(ran("a", 1, 7, 2, 1, 0.1, 0.2)), ran("a", 1, 7, 3, 1, 0.1, 3)}}, "run-id-unique", ""},
		{"run-id-unique/two-tasks", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1), submitted("b", 1, oneShot, 0, 0.1, 0.1)},
			Runs: []Run{ran("a", 1, 7, 2, 1, 0.1, 0.2), ran("b", 1, 7, 3, 1, 0.1, 3)}}, "run-id-unique", ""},

		{"never-early", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 2)}, Runs: []Run{ran("a", 1, 1, 2, 1, 2, 1.999)}}, "never-early", ""},

		{"recurring/on-time", History{Ops: []Op{submitted("r", 1, everySec, 0, 0.1, 10), cancelOp("r", 15, 15.1, OK, "")},
			Runs: every("r", 2, 1, 10, 11, 12, 13, 14)}, "", ""},
		{"recurring-lattice/drifted", History{Ops: []Op{submitted("r", 1, everySec, 0, 0.1, 10), cancelOp("r", 15, 15.1, OK, "")},
			Runs: every("r", 2, 1, 10, 11, 12, 13.4, 14.4)}, "recurring-lattice", "recurring-kept"},
		{"recurring-lattice/armed-by-an-earlier-try", History{Ops: []Op{
			{Kind: Submit, Task: "r", Version: 0, Spec: cronSec, Start: at(0), End: at(1.5), Outcome: Unknown, Code: "connection lost"},
			submitted("r", 0, cronSec, 1.6, 3.1, 4), cancelOp("r", 7, 7.1, OK, "")},
			// the first try created the task (first due 1); the retry's answer, at 3.1,
			// names the next run then: 4.
			Runs: []Run{ran("r", 0, 1, 2, 1, 1, 1.05), ran("r", 0, 2, 2, 1, 2, 2.05), ran("r", 0, 3, 2, 1, 3, 3.05),
				ran("r", 0, 4, 2, 1, 4, 4.05), ran("r", 0, 5, 2, 1, 5, 5.05), ran("r", 0, 6, 2, 1, 6, 6.05)}}, "", ""},
		{"recurring-lattice/early-without-an-earlier-try", History{Ops: []Op{
			submitted("r", 0, cronSec, 1.6, 3.1, 4), cancelOp("r", 7, 7.1, OK, "")},
			Runs: []Run{ran("r", 0, 3, 2, 1, 3, 3.05), ran("r", 0, 4, 2, 1, 4, 4.05), ran("r", 0, 5, 2, 1, 5, 5.05), ran("r", 0, 6, 2, 1, 6, 6.05)}}, "recurring-lattice", ""},
		{"recurring-lattice/off-the-lattice-before-the-retry", History{Ops: []Op{
			{Kind: Submit, Task: "r", Version: 0, Spec: everySec, Start: at(0), End: at(1.5), Outcome: Unknown, Code: "connection lost"},
			submitted("r", 0, everySec, 1.6, 3.1, 4), cancelOp("r", 7, 7.1, OK, "")},
			Runs: []Run{ran("r", 0, 1, 2, 1, 2.5, 2.55), ran("r", 0, 4, 2, 1, 4, 4.05), ran("r", 0, 5, 2, 1, 5, 5.05), ran("r", 0, 6, 2, 1, 6, 6.05)}}, "recurring-lattice", ""},
		{"recurring-kept/skip-missed-on-time", History{Ops: []Op{submitted("r", 1, everySkip, 0, 0.1, 10), cancelOp("r", 15, 15.1, OK, "")},
			Runs: every("r", 2, 1, 10, 11, 13, 14)}, "recurring-kept", ""},
		{"recurring-kept/skip-missed-in-fault", History{Ops: []Op{submitted("r", 1, everySkip, 0, 0.1, 10), cancelOp("r", 25, 25.1, OK, "")},
			Faults: []Fault{{Kind: Kill, Start: at(11.5), End: at(12.5)}},
			Runs:   every("r", 2, 1, 10, 11, 18, 19, 20, 21, 22, 23)}, "", ""},
		{"recurring-kept/skip-missed-while-behind", History{Ops: []Op{submitted("r", 1, everySkip, 0, 0.1, 10), submitted("a", 1, oneShot, 0, 0.1, 11)},
			Runs: append(every("r", 2, 1, 10, 11, 13, 14), ran("a", 1, 100, 2, 1, 11.9, 13.5))}, "", ""},
		{"recurring-kept/cron-made-up-at-takeover", History{Ops: []Op{submitted("r", 1, cronSec, 0, 0.1, 10), cancelOp("r", 25, 25.1, OK, "")},
			Faults: []Fault{{Kind: Kill, Start: at(12.5), End: at(15)}},
			// epoch 3 dispatches from 15.2: it runs the occurrence due at 15 (standing in
			// for 13-15) at once, then keeps the schedule.
			Runs: append(every("r", 2, 1, 10, 11, 12), every("r", 3, 10, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24)...)}, "", ""},
		{"recurring-kept/cron-skipped-at-takeover", History{Ops: []Op{submitted("r", 1, cronSec, 0, 0.1, 10), submitted("a", 1, oneShot, 14, 14.1, 14.1),
			cancelOp("r", 25, 25.1, OK, "")},
			Faults: []Fault{{Kind: Kill, Start: at(12.5), End: at(14)}},
			// epoch 3 dispatches from 14.2 (task a) but restarts r from its own clock,
			// after an outage seen late: r's first run at the new epoch is due 19.
			Runs: append(append(every("r", 2, 1, 10, 11, 12), ran("a", 1, 100, 3, 1, 14.1, 14.2)), every("r", 3, 10, 19, 20, 21, 22, 23, 24)...)}, "recurring-kept", ""},

		{"recurring-kept/cancelled-too-soon-after-takeover-to-tell", History{Ops: []Op{submitted("r", 1, cronSec, 0, 0.1, 10),
			submitted("a", 1, oneShot, 14, 14.1, 14.1), submitted("b", 1, oneShot, 16, 16.1, 16.1), cancelOp("r", 15, 15.1, OK, "")},
			Faults: []Fault{{Kind: Kill, Start: at(12.5), End: at(14)}},
			// epoch 3 dispatches from 14.2, but r may have stopped at 15, before the
			// Lateness its make-up run is allowed had passed.
			Runs: append(every("r", 2, 1, 10, 11, 12), ran("a", 1, 100, 3, 1, 14.1, 14.2), ran("b", 1, 101, 3, 1, 16.1, 16.2))}, "", ""},
		{"deposed-fire/old-epoch-before-new-ack", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1), submitted("b", 1, oneShot, 0, 0.1, 0.1)},
			Runs: []Run{ran("a", 1, 1, 3, 1, 0.1, 9), ran("b", 1, 2, 5, 1, 0.1, 9.5)}}, "", ""},
		{"deposed-fire/old-epoch-after-new-ack", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1), submitted("b", 1, oneShot, 0, 0.1, 0.1)},
			Runs: []Run{ran("b", 1, 2, 5, 1, 0.1, 9.5), ran("a", 1, 1, 3, 1, 0.1, 11)}}, "deposed-fire", ""},

		{"deposed-lock/leader-wrote", History{Prefix: "/tock/", Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			Events: []KeyEvent{{Rev: 2, Key: "/tock/leader/a", CreateRev: 2}, {Rev: 5, Key: "/tock/locks/default/x", Value: lockValue(7), CreateRev: 5},
				{Rev: 6, Key: "/tock/locks/default/x", Delete: true}},
			Runs: []Run{ran("x", 1, 7, 2, 1, 0.2, 0.3)}}, "", ""},
		{"deposed-lock/deposed-wrote", History{Prefix: "/tock/", Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			Events: []KeyEvent{{Rev: 2, Key: "/tock/leader/a", CreateRev: 2}, {Rev: 3, Key: "/tock/leader/b", CreateRev: 3},
				{Rev: 6, Key: "/tock/leader/a", Delete: true},
				{Rev: 8, Key: "/tock/locks/default/x", Value: lockValue(7), CreateRev: 8}},
			Runs: []Run{ran("x", 1, 7, 2, 1, 0.2, 0.3)}}, "deposed-lock", ""},

		{"stale-fire/cut-leader-after-successor-seen", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1)},
			Faults: []Fault{{Kind: Cut, Epoch: 3, Start: at(5), End: at(9), NewEpoch: 5, LeaderSeen: at(7.5)}},
			Runs:   []Run{ran("a", 1, 1, 3, 1, 0.1, 8)}}, "stale-fire", ""},
		{"stale-fire/cut-leader-before-successor-seen", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1)},
			Faults: []Fault{{Kind: Cut, Epoch: 3, Start: at(5), End: at(9), NewEpoch: 5, LeaderSeen: at(7.5)}},
			Runs:   []Run{ran("a", 1, 1, 3, 1, 0.1, 6)}}, "", ""},
		{"stale-fire/stalled-leader-fires-what-came-due-while-stopped", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 6)},
			Faults: []Fault{{Kind: Stall, Epoch: 3, Start: at(5), End: at(9), NewEpoch: 5, LeaderSeen: at(7.5)}},
			Runs:   []Run{ran("a", 1, 1, 3, 1, 6, 9)}}, "stale-fire", ""},
		{"stale-fire/stalled-leader-flushes-a-fire-sent-before", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 4.9)},
			Faults: []Fault{{Kind: Stall, Epoch: 3, Start: at(5), End: at(9), NewEpoch: 5, LeaderSeen: at(7.5)}},
			Runs:   []Run{ran("a", 1, 1, 3, 1, 4.9, 9)}}, "", ""},
		{"deposed-lock/run-id-reused-by-a-later-leader", History{Prefix: "/tock/", Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			// epoch 2 writes run 7's lock and dies before its FIRE arrives; epoch 10
			// fires its own run 7 (IDs repeat across leaders), with a lock written at 12.
			Events: []KeyEvent{{Rev: 2, Key: "/tock/leader/a", CreateRev: 2}, {Rev: 5, Key: "/tock/locks/default/x", Value: lockValue(7), CreateRev: 5},
				{Rev: 9, Key: "/tock/leader/a", Delete: true}, {Rev: 10, Key: "/tock/leader/b", CreateRev: 10},
				{Rev: 12, Key: "/tock/locks/default/x", Value: lockValue(7), CreateRev: 5}},
			Runs: []Run{ran("x", 1, 7, 10, 1, 3, 4)}}, "", ""},
		{"recurring-kept/deposed-leader-late-after-its-stall", History{Ops: []Op{submitted("r", 1, cronSec, 0, 0.1, 10), cancelOp("r", 20, 20.1, OK, "")},
			// epoch 2 is stalled over 12.5-16; at SIGCONT it fires the occurrence of 13
			// (a deposed-fire, judged there), and epoch 3 keeps the schedule from 16.
			Faults: []Fault{{Kind: Stall, Epoch: 2, Start: at(12.5), End: at(16.2), NewEpoch: 3, LeaderSeen: at(15.5)}},
			Runs: append(append(every("r", 2, 1, 10, 11, 12), ran("r", 1, 50, 2, 1, 13, 16.05)),
				every("r", 3, 60, 16, 17, 18, 19)...)}, "stale-fire", ""},
		{"deposed-lock/ambiguous-run-id", History{Prefix: "/tock/", Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			// the lock of run 7 is written while epoch 2 leads, epoch 3 campaigns; epoch 3
			// later fires a run 7, but so did epoch 2 (for another task): either may have
			// written it. Only the reuse is judged.
			Events: []KeyEvent{{Rev: 2, Key: "/tock/leader/a", CreateRev: 2}, {Rev: 3, Key: "/tock/leader/b", CreateRev: 3},
				{Rev: 5, Key: "/tock/locks/default/x", Value: lockValue(7), CreateRev: 5},
				{Rev: 6, Key: "/tock/leader/a", Delete: true}},
			Runs: []Run{ran("y", 1, 7, 2, 1, 0.2, 0.3), ran("x", 1, 7, 3, 1, 3, 4)}}, "run-id-unique", ""},
		// Re-election of one node (Reelect): its election key (one name per session) is
		// deleted at revision 6, the frozen follower's key (3) leads the replay until its
		// lease lapses at 9, and the same key, created again at 8, leads from then on at
		// epoch 8. The checks tell the node's two terms apart by epoch.
		{"deposed-lock/reelected-node-each-term-writes-its-own", History{Prefix: "/tock/", Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			Events: reelected(KeyEvent{Rev: 4, Key: "/tock/locks/default/x", Value: lockValue(7), CreateRev: 4},
				KeyEvent{Rev: 10, Key: "/tock/locks/default/x", Value: lockValue(9), CreateRev: 4}),
			Runs: []Run{ran("x", 1, 7, 2, 1, 0.2, 0.3), ran("x", 1, 9, 8, 1, 3, 4)}}, "", ""},
		{"deposed-lock/reelected-node-old-term-writes-after-its-key-went", History{Prefix: "/tock/", Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			Events: reelected(KeyEvent{Rev: 10, Key: "/tock/locks/default/x", Value: lockValue(7), CreateRev: 10}),
			Runs:   []Run{ran("x", 1, 7, 2, 1, 0.2, 0.3)}}, "deposed-lock", ""},
		{"deposed-lock/reelected-node-old-term-writes-before-it-leads-again", History{Prefix: "/tock/", Ops: []Op{submitted("x", 1, exclusive, 0, 0.1, 0.2), cancelOp("x", 9, 9.1, OK, "")},
			Events: reelected(KeyEvent{Rev: 7, Key: "/tock/locks/default/x", Value: lockValue(7), CreateRev: 7}),
			Runs:   []Run{ran("x", 1, 7, 2, 1, 0.2, 0.3)}}, "deposed-lock", ""},
		{"stale-fire/reelected-node-fires-at-its-old-epoch", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 6)},
			Faults: []Fault{{Kind: Reelect, Target: "n1 (epoch 2)", Epoch: 2, Start: at(5), End: at(9), NewEpoch: 8, LeaderSeen: at(7.5)}},
			Runs:   []Run{ran("a", 1, 1, 2, 1, 6, 8)}}, "stale-fire", ""},
		{"stale-fire/reelected-node-fires-at-its-new-epoch", History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 6)},
			Faults: []Fault{{Kind: Reelect, Target: "n1 (epoch 2)", Epoch: 2, Start: at(5), End: at(9), NewEpoch: 8, LeaderSeen: at(7.5)}},
			Runs:   []Run{ran("a", 1, 1, 8, 1, 6, 8)}}, "", ""},
		{"etcd-leftovers", History{Prefix: "/tock/", Leftover: []string{"/tock/locks/default/x"}}, "etcd-leftovers", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vs := Check(&tc.h, Options{})
			got := checks(vs)
			var want []string
			for _, c := range []string{tc.want, tc.also} {
				if c != "" {
					want = append(want, c)
				}
			}
			slices.Sort(want)
			if slices.Equal(got, want) {
				return
			}
			t.Errorf("checks failed: %v, want %v", got, want)
			for _, v := range vs {
				t.Log(v)
			}
		})
	}
}

// reelected is etcd's history of one node's re-election, with more events among it:
// node a leads from revision 2 (epoch 2), b campaigns at 3; a's key is deleted at 6 (a
// forced resign), a campaigns again at 8 under the same key name, b's key goes with its
// lease at 9, and a leads again at epoch 8.
func reelected(more ...KeyEvent) []KeyEvent {
	evs := []KeyEvent{{Rev: 2, Key: "/tock/leader/a", CreateRev: 2}, {Rev: 3, Key: "/tock/leader/b", CreateRev: 3},
		{Rev: 6, Key: "/tock/leader/a", Delete: true}, {Rev: 8, Key: "/tock/leader/a", CreateRev: 8},
		{Rev: 9, Key: "/tock/leader/b", Delete: true}}
	evs = append(evs, more...)
	slices.SortStableFunc(evs, func(x, y KeyEvent) int { return int(x.Rev - y.Rev) })
	return evs
}

// A violation's excerpt shows the task's calls and runs, in time order, and the faults.
func TestExcerpt(t *testing.T) {
	h := History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1), cancelOp("a", 1, 1.1, OK, "")},
		Runs:   []Run{ran("a", 1, 1, 2, 1, 0.1, 3.5)},
		Faults: []Fault{{Kind: Stall, Target: "n1", Start: at(0.5), End: at(0.9), Note: "n2 leads at epoch 9"}}}
	vs := Check(&h, Options{})
	if len(vs) != 1 || vs[0].Check != "no-run-after-cancel" {
		t.Fatalf("want one no-run-after-cancel, got %v", vs)
	}
	want := []string{"client 0 submit v1: ok", "nemesis stall n1", "client 0 cancel v0: ok", "worker 0 FIRE v1 run 1 epoch 2"}
	ex := vs[0].Excerpt
	if len(ex) != len(want) {
		t.Fatalf("excerpt of %d lines, want %d:\n%s", len(ex), len(want), strings.Join(ex, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(ex[i], w) {
			t.Errorf("excerpt line %d: %q does not contain %q", i, ex[i], w)
		}
	}
}

func TestOutcomeOfCode(t *testing.T) {
	for code, want := range map[string]Outcome{"NOT_LEADER": Refused, "EXISTS": Refused, "NOT_FOUND": Refused,
		"OVERLOADED": Unknown, "INTERNAL": Unknown, "SOME_NEW_CODE": Unknown} {
		if got := OutcomeOfCode(code); got != want {
			t.Errorf("OutcomeOfCode(%q) = %v, want %v", code, got, want)
		}
	}
}

func TestSummarize(t *testing.T) {
	h := History{Ops: []Op{submitted("a", 1, oneShot, 0, 0.1, 0.1), submitted("r", 1, cronSec, 0, 0.1, 1), cancelOp("r", 2, 2.1, Unknown, "timeout")},
		Runs:   []Run{unacked(ran("a", 1, 1, 2, 1, 0.1, 0.2)), ran("a", 1, 2, 3, 1, 0.1, 3)},
		Faults: []Fault{{Kind: Kill, Target: "n1", Start: at(1), NewEpoch: 3}, {Kind: Cut, Start: at(5)}, {Kind: Cut, Start: at(6)}}}
	s := Summarize(&h)
	if len(s.Takeovers) != 1 || s.Takeovers[0] != "kill n1: first run at epoch 3 after 2.00s" {
		t.Errorf("takeovers %q", s.Takeovers)
	}
	if s.Ops["submit ok"] != 2 || s.Ops["cancel unknown"] != 1 || s.Tasks["one-shot"] != 1 || s.Tasks["cron"] != 1 ||
		s.Runs != 2 || s.AcksOK != 1 || s.Repeats != 1 || s.LeaderChanges != 1 || s.Epochs != 2 || s.Faults[Cut] != 2 || s.Faults[Kill] != 1 {
		t.Errorf("summary %s", s)
	}
}

// Lock writes no run matches are listed, with the epoch leading when they were made.
func TestLockWrites(t *testing.T) {
	h := History{Prefix: "/tock/", Runs: []Run{ran("x", 1, 7, 2, 1, 0.2, 0.3)},
		Events: []KeyEvent{{Rev: 2, Key: "/tock/leader/a", CreateRev: 2},
			{Rev: 5, Key: "/tock/locks/default/x", Value: lockValue(7), CreateRev: 5},
			{Rev: 6, Key: "/tock/locks/default/x", Value: lockValue(8), CreateRev: 5}}}
	n, un := LockWrites(&h)
	if n != 1 || len(un) != 1 || un[0] != "/tock/locks/default/x run 8 at revision 6 (epoch 2 leading)" {
		t.Errorf("LockWrites = %d, %q", n, un)
	}
}

// A history survives a round trip through JSON (the form make chaos keeps), cancels'
// zero Specs included, and is judged the same after it.
func TestHistoryJSON(t *testing.T) {
	h := History{Prefix: "/tock/", Ops: []Op{submitted("r", 1, cronSec, 0, 0.1, 10), cancelOp("r", 15, 15.1, OK, "")},
		Runs: every("r", 2, 1, 10, 11, 13, 14)}
	b, err := json.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	var back History
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got, want := checks(Check(&back, Options{})), checks(Check(&h, Options{})); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("after a round trip: %v, before: %v", got, want)
	}
}
