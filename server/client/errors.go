package client

import "errors"

// Sentinels; compare with errors.Is. Errors the server sent (ERROR replies) are
// *protocol.Error values, which match protocol's sentinels (protocol.ErrNotFound, ...)
// and keep the code, field and message.
var (
	// ErrConnectionLost: the connection broke while the call was waiting (or writing);
	// the request may or may not have been executed.
	ErrConnectionLost = errors.New("client: connection lost")
	// ErrClosed: the Client (or the Worker's connection) was closed.
	ErrClosed = errors.New("client: closed")
	// ErrInvalidOption: an Option or argument is out of range; the message names it.
	ErrInvalidOption = errors.New("client: invalid option")
	// ErrUnexpectedReply: the server answered with a message of the wrong type.
	ErrUnexpectedReply = errors.New("client: unexpected reply")
	// ErrHandshake: the server's WELCOME could not be accepted (version, frame size).
	ErrHandshake = errors.New("client: handshake failed")
)
