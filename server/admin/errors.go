package admin

import "errors"

// Errors of the admin server. Compare with errors.Is.
var (
	// ErrInvalidOptions wraps every error New returns for bad Options; the message names
	// the field.
	ErrInvalidOptions = errors.New("admin: invalid options")
	// ErrServerClosed is returned by Serve and ListenAndServe after Shutdown, and by a
	// second Shutdown.
	ErrServerClosed = errors.New("admin: server closed")
)
