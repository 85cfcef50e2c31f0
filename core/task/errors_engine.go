package task

import "errors"

// Errors of the engine itself.
var (
	ErrInvalidTask   = errors.New("task: invalid task")
	ErrInvalidOption = errors.New("task: invalid option")
	ErrExists        = errors.New("task: already exists")
	ErrNotFound      = errors.New("task: not found")
	ErrOverloaded    = errors.New("task: overloaded")
	ErrClosed        = errors.New("task: engine closed")
	ErrNoHandler     = errors.New("task: no handler registered")
	ErrTimeout       = errors.New("task: attempt timed out")
	ErrPanic         = errors.New("task: handler panicked")
)
