package timer

import "errors"

// Errors returned by the scheduler. They are sentinels: compare with errors.Is.
var (
	// ErrClosed: the scheduler has been closed; nothing new is accepted.
	ErrClosed = errors.New("timer: scheduler closed")
	// ErrFull: the shard the timer maps to already holds its share of Options.MaxPending.
	ErrFull = errors.New("timer: too many pending timers (Options.MaxPending)")
	// ErrInvalidDelay: a delay is negative or beyond MaxDelay, or a deadline beyond
	// MaxDeadline.
	ErrInvalidDelay = errors.New("timer: delay is negative or beyond MaxDelay, or deadline beyond MaxDeadline")
	// ErrInvalidInterval: a periodic interval is shorter than the tick or beyond MaxDelay.
	ErrInvalidInterval = errors.New("timer: interval is shorter than the tick or beyond MaxDelay")
	// ErrUnknownHandler: the Handler was not returned by this scheduler's Register.
	ErrUnknownHandler = errors.New("timer: unknown handler")
	// ErrNilFunc: a nil callback was given.
	ErrNilFunc = errors.New("timer: nil callback")
	// ErrTooManyHandlers: Register was called more than MaxHandlers times.
	ErrTooManyHandlers = errors.New("timer: too many handlers")
	// ErrInvalidOption: an Options field is out of range; the message names the field.
	ErrInvalidOption = errors.New("timer: invalid option")
)
