package protocol

import (
	"errors"
	"strconv"
)

// Code is an ERROR frame's error code. Codes are part of the protocol: their numbers
// never change, and a client that meets a code it does not know treats it as INTERNAL.
type Code uint16

// The error codes (PROTOCOL.md, "Errors", is the same table). "Closes" says whether the
// server closes the connection after sending the ERROR frame; any error before the
// handshake completes closes it too.
const (
	CodeBadFrame           Code = 1  // closes: the body is not one msgpack map with an integer "t"
	CodeFrameTooLarge      Code = 2  // closes: a length prefix above the maximum frame size
	CodeUnknownType        Code = 3  // a well-formed frame whose "t" this version does not know
	CodeBadField           Code = 4  // a field missing, of the wrong type, out of range; Field names it
	CodeVersionUnsupported Code = 5  // closes: HELLO asked for a version the server does not speak
	CodeUnauthorized       Code = 6  // closes: missing or wrong token
	CodeNotLeader          Code = 7  // this node does not lead; Leader names the one that does, if known
	CodeExists             Code = 8  // the task ID is taken and the submit's version is not higher
	CodeNotFound           Code = 9  // no such task, dead letter or run
	CodeInvalidTask        Code = 10 // the task breaks a rule of the engine; Field names the field
	CodeOverloaded         Code = 11 // the server holds its maximum of pending tasks; retry later
	CodeStaleEpoch         Code = 12 // an ACK or NACK carries an epoch older than the leader's
	CodeUnknownRun         Code = 13 // an ACK or NACK for a run that is not outstanding on this connection
	CodeShuttingDown       Code = 14 // closes: the server is draining
	CodeInternal           Code = 15 // a bug or an unexpected failure on the server
	CodeUnexpected         Code = 16 // a message not valid here: a second HELLO, FIRE from a client, a worker message on a client connection
	CodeUncertain          Code = 17 // the outcome is unknown (the durable store's write may have committed); resubmitting the same task is safe
	CodeNotOwner           Code = 18 // a request for a partition this node does not own; Leader names the owner, PartitionRev the map's revision

	numCodes = CodeNotOwner + 1
)

var codeNames = [numCodes]string{
	CodeBadFrame:           "BAD_FRAME",
	CodeFrameTooLarge:      "FRAME_TOO_LARGE",
	CodeUnknownType:        "UNKNOWN_TYPE",
	CodeBadField:           "BAD_FIELD",
	CodeVersionUnsupported: "VERSION_UNSUPPORTED",
	CodeUnauthorized:       "UNAUTHORIZED",
	CodeNotLeader:          "NOT_LEADER",
	CodeExists:             "EXISTS",
	CodeNotFound:           "NOT_FOUND",
	CodeInvalidTask:        "INVALID_TASK",
	CodeOverloaded:         "OVERLOADED",
	CodeStaleEpoch:         "STALE_EPOCH",
	CodeUnknownRun:         "UNKNOWN_RUN",
	CodeShuttingDown:       "SHUTTING_DOWN",
	CodeInternal:           "INTERNAL",
	CodeUnexpected:         "UNEXPECTED",
	CodeUncertain:          "UNCERTAIN",
	CodeNotOwner:           "NOT_OWNER",
}

// String returns the code's protocol name, or "Code(n)" for a number that is not a code.
func (c Code) String() string {
	if c > 0 && c < numCodes {
		return codeNames[c]
	}
	return "Code(" + strconv.Itoa(int(c)) + ")"
}

// Closes reports whether the server closes the connection after an ERROR with code c
// (once the handshake is done; before it, every error closes).
func (c Code) Closes() bool {
	switch c {
	case CodeBadFrame, CodeFrameTooLarge, CodeVersionUnsupported, CodeUnauthorized, CodeShuttingDown:
		return true
	}
	return false
}

// Sentinels, one per code: errors.Is(err, ErrBadField) is true for an *Error with
// CodeBadField. Compare with errors.Is, never ==.
var (
	ErrBadFrame           = errors.New("protocol: bad frame")
	ErrFrameTooLarge      = errors.New("protocol: frame too large")
	ErrUnknownType        = errors.New("protocol: unknown message type")
	ErrBadField           = errors.New("protocol: bad field")
	ErrVersionUnsupported = errors.New("protocol: version unsupported")
	ErrUnauthorized       = errors.New("protocol: unauthorized")
	ErrNotLeader          = errors.New("protocol: not leader")
	ErrExists             = errors.New("protocol: task exists")
	ErrNotFound           = errors.New("protocol: not found")
	ErrInvalidTask        = errors.New("protocol: invalid task")
	ErrOverloaded         = errors.New("protocol: overloaded")
	ErrStaleEpoch         = errors.New("protocol: stale epoch")
	ErrUnknownRun         = errors.New("protocol: unknown run")
	ErrShuttingDown       = errors.New("protocol: shutting down")
	ErrInternal           = errors.New("protocol: internal error")
	ErrUnexpected         = errors.New("protocol: unexpected message")
	ErrUncertain          = errors.New("protocol: outcome uncertain")
	ErrNotOwner           = errors.New("protocol: not owner")
)

var sentinels = [numCodes]error{
	CodeBadFrame:           ErrBadFrame,
	CodeFrameTooLarge:      ErrFrameTooLarge,
	CodeUnknownType:        ErrUnknownType,
	CodeBadField:           ErrBadField,
	CodeVersionUnsupported: ErrVersionUnsupported,
	CodeUnauthorized:       ErrUnauthorized,
	CodeNotLeader:          ErrNotLeader,
	CodeExists:             ErrExists,
	CodeNotFound:           ErrNotFound,
	CodeInvalidTask:        ErrInvalidTask,
	CodeOverloaded:         ErrOverloaded,
	CodeStaleEpoch:         ErrStaleEpoch,
	CodeUnknownRun:         ErrUnknownRun,
	CodeShuttingDown:       ErrShuttingDown,
	CodeInternal:           ErrInternal,
	CodeUnexpected:         ErrUnexpected,
	CodeUncertain:          ErrUncertain,
	CodeNotOwner:           ErrNotOwner,
}

// Error is both the ERROR message (type 3) and the Go error every decoding or conversion
// failure of this package returns, so a server answers a bad frame with the very value
// the decoder gave it: AppendFrame(buf, err.(*Error), max).
type Error struct {
	ID      uint64 // the request ID it answers; 0 when none could be read
	Code    Code
	Message string // for people; not to be parsed
	Field   string // BAD_FIELD, INVALID_TASK: the path of the field, e.g. "task.schedule.cron"
	Leader  string // NOT_LEADER: the leader's client address; NOT_OWNER: the owner's; when known
	RunID   uint64 // STALE_EPOCH, UNKNOWN_RUN: the run the ACK or NACK named
	// PartitionRev is, for NOT_OWNER, the revision of the partition map the refusing
	// node holds (PARTITION_MAP "rev"): a client whose map is older asks PARTITIONS.
	PartitionRev uint64
}

// Error formats "protocol: CODE: field f: message".
func (e *Error) Error() string {
	s := "protocol: " + e.Code.String()
	if e.Field != "" {
		s += ": field " + strconv.Quote(e.Field)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is makes errors.Is(err, ErrX) true for the sentinel of e's code.
func (e *Error) Is(target error) bool {
	return e.Code > 0 && e.Code < numCodes && sentinels[e.Code] == target
}

func newError(c Code, field, msg string) *Error { return &Error{Code: c, Field: field, Message: msg} }
