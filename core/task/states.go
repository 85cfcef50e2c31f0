package task

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// State is where a task stands in its life. The zero State is not a state: it marks a
// field that was never set, so that forgetting to set one is caught, not read as PENDING.
type State uint8

const (
	Pending   State = iota + 1 // waiting for its due time (a timer is armed)
	Due                        // its timer fired; waiting for a worker, or for a limit (limits.go)
	Running                    // a handler is executing an attempt
	Succeeded                  // a one-shot task's attempt returned nil
	Failed                     // an attempt failed and a retry is scheduled after a backoff
	Dead                       // retries are exhausted (or impossible): in the dead-letter queue
	Cancelled                  // cancelled by the user, or by a parent's failure (dag.go)
	// Waiting: the task depends on others (Task.DependsOn) and waits for them to end;
	// no timer is armed. Declared last so that the others keep their numbers.
	Waiting

	numStates = Waiting + 1 // one past the last State, for sizing tables
)

var stateNames = [numStates]string{
	Pending:   "PENDING",
	Due:       "DUE",
	Running:   "RUNNING",
	Succeeded: "SUCCEEDED",
	Failed:    "FAILED",
	Dead:      "DEAD",
	Cancelled: "CANCELLED",
	Waiting:   "WAITING",
}

// valid reports whether s is one of the declared states.
func (s State) valid() bool { return s >= Pending && s < numStates }

// String returns the state's upper-case name, or "State(n)" for a value that is not a
// state (so a corrupt value shows up in logs instead of masquerading as a real one).
func (s State) String() string {
	if s.valid() {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// ParseState is the inverse of String for the declared states, ignoring case. Anything
// else, including "State(n)", is ErrUnknownState.
func ParseState(name string) (State, error) {
	for s := Pending; s < numStates; s++ {
		if strings.EqualFold(name, stateNames[s]) {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownState, name)
}

// ParseStateBytes is ParseState for a name held in bytes (a decoder's view of a frame),
// without allocating: ok is false where ParseState returns ErrUnknownState.
func ParseStateBytes(name []byte) (s State, ok bool) {
	for s := Pending; s < numStates; s++ {
		if bytes.EqualFold(name, []byte(stateNames[s])) {
			return s, true
		}
	}
	return 0, false
}

// Terminal reports whether a task in state s makes no further progress by itself:
// SUCCEEDED, DEAD and CANCELLED. Terminal is not final: a user action can still move such
// a task (a resubmit with a higher version, or a requeue from the dead-letter queue), and
// the transition table says which.
func (s State) Terminal() bool {
	return s == Succeeded || s == Dead || s == Cancelled
}

// transitions is the state machine: transitions[from][to] is true exactly for the legal
// moves. Every pair not listed is illegal, self-loops included: an update that keeps a
// task in its state is not a transition.
//
// The normal path of a one-shot task is PENDING -> DUE -> RUNNING -> SUCCEEDED; a failure
// goes RUNNING -> FAILED -> DUE -> RUNNING ... until it succeeds or RUNNING -> DEAD.
// Recurring tasks (every, cron) never reach SUCCEEDED: each occurrence ends with
// RUNNING -> PENDING, which is how they go round. A task submitted with parents that
// have not all ended starts WAITING instead of PENDING, and leaves it for PENDING when
// they have (released) or for CANCELLED (a parent failed, or the user cancelled it).
var transitions = [numStates][numStates]bool{
	Pending: {
		Due:       true, // its timer fired
		Cancelled: true,
	},
	Due: {
		Running:   true, // handed to a handler
		Pending:   true, // misfire skip to a later occurrence, or re-queued while paused
		Cancelled: true,
	},
	Running: {
		Succeeded: true, // a one-shot task's attempt returned nil
		Failed:    true, // the attempt failed; a retry is scheduled
		Dead:      true, // retries exhausted, a non-retryable error, or no handler
		// A recurring task's run succeeded, or failed for good (its dead letter is
		// recorded), and its next occurrence is scheduled: recurring tasks go round here.
		Pending:   true,
		Cancelled: true, // cancelled during the run: the run's result is ignored
	},
	Failed: {
		Due:       true, // the backoff elapsed
		Pending:   true, // resubmitted with a higher version while waiting out its backoff
		Cancelled: true,
	},
	Succeeded: {
		Pending: true, // resubmitted with a higher version
	},
	Dead: {
		Pending: true, // requeued from the dead-letter queue, or resubmitted
	},
	Cancelled: {
		Pending: true, // resubmitted with a higher version: a cancelled ID is not lost
	},
	Waiting: {
		Pending:   true, // every parent ended as the task's ParentPolicy asks: released
		Cancelled: true, // a parent failed (ParentCancel), or the user cancelled it
	},
}

// canTransition reports whether the table allows from -> to. Values that are not states
// never transition. O(1).
func canTransition(from, to State) bool {
	return from.valid() && to.valid() && transitions[from][to]
}

// Transition returns nil when from -> to is legal, and otherwise an error wrapping
// ErrIllegalTransition that names both states. O(1); it allocates only on error.
func transition(from, to State) error {
	if canTransition(from, to) {
		return nil
	}
	return fmt.Errorf("%w: %s -> %s", ErrIllegalTransition, from, to)
}
