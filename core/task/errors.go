package task

import "errors"

// Errors of the task model: states, schedules, retry policies and the dead-letter queue.
// They are sentinels: compare with errors.Is. Messages that wrap them name the offending
// value or field.
var (
	// ErrIllegalTransition: a state change that the transition table (states.go) does not
	// allow; the wrapping message names both states.
	ErrIllegalTransition = errors.New("task: illegal state transition")
	// ErrUnknownState: ParseState was given a name that is not a State.
	ErrUnknownState = errors.New("task: unknown state")
	// ErrUnknownName: UnmarshalText of a Kind, Anchor or MisfirePolicy was given a name
	// that is none of its values' (or MarshalText a value that has no name).
	ErrUnknownName = errors.New("task: unknown name")
	// ErrInvalidSchedule: Schedule.Validate (or First) rejected a schedule; the message
	// names the field, and for cron the expression and the parser's complaint.
	ErrInvalidSchedule = errors.New("task: invalid schedule")
	// ErrInvalidRetry: RetryPolicy.Validate rejected a policy; the message names the field.
	ErrInvalidRetry = errors.New("task: invalid retry policy")
	// ErrBadCursor: a paging cursor that this queue never issued.
	ErrBadCursor = errors.New("task: bad cursor")
	// ErrNonRetryable marks a handler error that must not be retried. Wrap it
	// (fmt.Errorf("%w: ...", ErrNonRetryable)) or use NonRetryable(err); IsNonRetryable
	// sees both.
	ErrNonRetryable = errors.New("task: non-retryable error")
)

// Errors of the engine: submits, lookups and runs.
var (
	// ErrInvalidTask: Submit or Register was given a task or type that fails validation;
	// the message names the field.
	ErrInvalidTask = errors.New("task: invalid task")
	// ErrInvalidOption: an Options field is out of range; the message names it.
	ErrInvalidOption = errors.New("task: invalid option")
	// ErrExists: the ID is taken in its namespace and the submit's Version is not higher.
	ErrExists = errors.New("task: already exists")
	// ErrNotFound: no such task (or dead letter).
	ErrNotFound = errors.New("task: not found")
	// ErrOverloaded: the task's shard holds its share of Options.MaxTasks.
	ErrOverloaded = errors.New("task: overloaded")
	// ErrClosed: the engine has been closed.
	ErrClosed = errors.New("task: engine closed")
	// ErrNoHandler: a task ran with no handler registered for its type (never retried).
	ErrNoHandler = errors.New("task: no handler registered")
	// ErrTimeout: an attempt outlived its timeout.
	ErrTimeout = errors.New("task: attempt timed out")
	// ErrPanic: the handler panicked; the message carries the panic value.
	ErrPanic = errors.New("task: handler panicked")
	// ErrDeferred, returned by a Handler, says the attempt's outcome will be reported
	// later with Engine.Complete(run.RunID, err): the task stays RUNNING until then, or
	// until its timeout fails it. A server uses it to hand a task to a remote worker
	// without holding one of the engine's workers while the remote one runs it.
	ErrDeferred = errors.New("task: outcome deferred")
	// ErrUnknownRun: Complete named no deferred attempt that is still running.
	ErrUnknownRun = errors.New("task: unknown run")
	// ErrParentFailed: a task was cancelled because a parent it depends on ended DEAD or
	// CANCELLED (ParentCancel); the message (its EventCancelled's Err, its Info's
	// LastError) names the parent.
	ErrParentFailed = errors.New("task: a parent failed")
)
