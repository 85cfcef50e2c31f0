package tockd

import "errors"

// Errors of the server. Compare with errors.Is.
var (
	// ErrServerClosed is returned by Serve and ListenAndServe after Shutdown.
	ErrServerClosed = errors.New("tockd: server closed")
	// ErrInvalidOption: an Options field is out of range; the message names it.
	ErrInvalidOption = errors.New("tockd: invalid option")
	// ErrInvalidArgument: an argument of an operator's call (SetPaused) is bad; the
	// message names it.
	ErrInvalidArgument = errors.New("tockd: invalid argument")
)
