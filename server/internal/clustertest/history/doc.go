// Package history is the pure half of tock's randomized failover test (in the style of
// Jepsen): the record of what clients, workers and a nemesis did against a cluster, and
// the checks over it. It starts nothing and reads no clock: the harness in
// server/internal/clustertest (chaos_test.go) fills a History while it runs, then calls
// Check; the unit tests here feed it small synthetic histories, one that passes and one
// that fails per property.
//
// # What is recorded
//
//   - Op: one client call (SUBMIT or CANCEL) with its start and end by the client's clock
//     and its outcome: OK with the reply (next run, version, durability), Refused with
//     the code of a reply that says the request was not executed (NOT_LEADER, EXISTS,
//     NOT_FOUND, INVALID_TASK, BAD_FIELD), or Unknown: a timeout, a lost connection, or an
//     error code that does not say either way (OVERLOADED, INTERNAL, any code this
//     package does not know).
//   - Run: one FIRE a worker received, by the worker's clock: when its handler started
//     (Received) and returned (Returned; the ACK or NACK is sent after that), the run ID,
//     epoch, attempt and due time the FIRE carried, the task version (which the FIRE does
//     not carry: the harness puts it in the payload), and the answer to its report:
//     confirmed (AckOK, at AckAt) or not.
//   - Fault: one nemesis action (kill, stall, etcd member stop, cut from etcd, a forced
//     resign of the leader that the same node wins again) from its start to the moment
//     the nemesis saw it healed (a leader again, etcd healthy). The checks judge epochs,
//     not nodes: two terms of one node are two epochs like any others.
//   - KeyEvent: etcd's revision history of tock's keys, and the keys left at the end.
//
// # The checks (names as in Violation.Check)
//
// A task is confirmed when a SUBMIT of it was answered OK with durability durable; a
// cancel is confirmed when answered OK. A version is superseded when a SUBMIT of a higher
// version of the same ID was not refused (OK or Unknown).
//
//   - durable-runs: every confirmed version that is neither superseded nor cancelled (a
//     cancel OK or Unknown) runs: some Run of that ID and version exists. A recurring
//     task is excused when its cancel began before its first due time plus Lateness.
//   - no-run-after-ack: no Run of a one-shot version is received after an ACK of it was
//     confirmed (AckAt).
//   - no-run-after-cancel: no FIRE of a task is sent after a cancel of it was confirmed
//     (the cancel's End), nor one of version v after a SUBMIT of a higher version was
//     confirmed. A FIRE is surely sent after t when it came due after t (FIREs are never
//     early) or arrived more than Lateness after t; one due before t that arrives just
//     after it raced the cancel's answer on another connection and is not judged.
//   - cancel-finds-live: a CANCEL answered NOT_FOUND names a task that had ended: for a
//     one-shot confirmed before the cancel began, some Run of it was received before the
//     cancel's End; a recurring task confirmed before the cancel began, and not cancelled
//     or superseded before, is never NOT_FOUND.
//   - exclusive-overlap: the runs of an exclusive task, each from Received to Returned
//     (a subset of FIRE receipt to ACK send, so an overlap found is real), never overlap.
//   - run-id-unique: a run ID names one FIRE: two Runs with one ID agree on the task,
//     the version, the attempt, the due time and the epoch. A new leader's re-run of a
//     run in flight at the failover is another FIRE (PROTOCOL.md: unique per attempt),
//     so it may not reuse the old leader's ID, even for the same task.
//   - never-early: no Run is received before its Due.
//   - recurring-lattice: every first attempt of a fixed-rate every or a cron task is due
//     at an occurrence of its schedule, counted from the next run the SUBMIT's reply
//     announced (task.Schedule.Next): a schedule restarted from a new leader's clock
//     drifts off it (reported once per version, with the count of runs off it). A run
//     due before that time counts only when an earlier try of the same submit (same
//     version, Unknown or OK) may have created the task, and then only on the lattice
//     extended backwards: the reply to a retry names the next run at its own time.
//   - recurring-kept: the occurrences a misfire policy keeps run. core/task's promise
//     (Schedule.CatchUp): an occurrence considered no more than the engine's
//     MisfireThreshold late runs with its own due time; one considered later is merged
//     into a single run now (MisfireFireOnce, that run due at the latest occurrence
//     passed) or dropped (MisfireSkip). So, for every occurrence D from the first due
//     time until the cancel began (less Lateness):
//     with MisfireFireOnce, while some epoch was seen dispatching for Lateness after
//     max(D, its first run), a first attempt due at or after D came within that
//     Lateness: a run made up after a failover comes as soon as the new leader
//     dispatches, not at the next occurrence after its takeover (an epoch is seen
//     dispatching from its first run received until its last run whose ACK was
//     confirmed, or a fault on its leader if earlier, and only until the task may have
//     stopped);
//     with either policy, an occurrence outside every fault's window (from Start -
//     Lateness to End + Recovery) and outside any time the cluster was seen behind (a
//     first attempt of any task received more than MisfireThreshold after its due time)
//     runs as itself: a first attempt due exactly at D is received by D + Lateness.
//   - deposed-fire: a deposed leader stops dispatching before a new one starts, so no
//     run at an epoch below E is received once a run at E has had its ACK confirmed.
//   - stale-fire: the same, against the nemesis's log: no run at a faulted leader's
//     epoch is received after the nemesis saw its successor lead (Fault.LeaderSeen,
//     which is after the old lease expired: a killed node is dead, and a cut one must
//     have stopped dispatching SessionTTL-LeaseGuard after its last keep-alive; for a
//     re-election the successor is the same node's next term, and its old term ended
//     when its election key went, before it campaigned again). For a
//     stall only runs that came due after SIGSTOP count: the decision to send them was
//     taken after SIGCONT, with the lease long gone (a FIRE sent before the stop and
//     flushed after it is not judged; fencing refuses its ACK).
//   - deposed-lock: in etcd's history, every write of a run lock that matches a run
//     happened while that run's epoch led (its election key existed and had the lowest
//     create revision). Run IDs may repeat across leaders, so a write matches a run of
//     the task with its run ID fired at an epoch no later than the write's revision and
//     not matched before (the leading epoch's run if there is one, else the latest).
//     Lock writes no run matches are listed by LockWrites (the Summary), not judged: a
//     leader killed between the write and its FIRE leaves one too; so are writes whose
//     run ID FIREs of several epochs carry, when none of them is the leader's (the
//     leader's own run of that ID may never have reached a worker).
//   - etcd-leftovers: after the load drained, no durable record, progress key or run
//     lock is left in etcd.
//
// Costs: Check is O(n log n) in the history's size, plus, for recurring-kept, one
// Schedule.Next per occurrence checked.
package history
