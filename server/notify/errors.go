package notify

import "errors"

// Errors of the package. Compare with errors.Is.
var (
	// ErrInvalidOption: an Options or MonitorOptions field is out of range; the message
	// names it.
	ErrInvalidOption = errors.New("notify: invalid option")
	// ErrDelivery: a webhook did not accept an alert (a non-2xx status, a Feishu reply
	// with a non-zero code, or a network error) after the retries allowed.
	ErrDelivery = errors.New("notify: delivery failed")
	// ErrClosed: SetWebhooks was called after Close.
	ErrClosed = errors.New("notify: closed")
)
