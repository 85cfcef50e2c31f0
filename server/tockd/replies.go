package tockd

import (
	"github.com/tock-sched/tock/server/protocol"
)

// codeSet is a set of error codes (codes are below 64).
type codeSet uint64

func codes(cs ...protocol.Code) codeSet {
	var s codeSet
	for _, c := range cs {
		s |= 1 << c
	}
	return s
}

func (s codeSet) has(c protocol.Code) bool { return c < 64 && s&(1<<c) != 0 }

// list returns the codes in s, in numeric order.
func (s codeSet) list() []protocol.Code {
	var out []protocol.Code
	for c := protocol.Code(1); c < 64; c++ {
		if s.has(c) {
			out = append(out, c)
		}
	}
	return out
}

// replySpec is what one request can be answered with: its reply type on success, the
// codes of an ERROR in its stead, and, for the replies that carry per-item results
// (BATCH_RESULT, ACKED), the codes an item can have.
type replySpec struct {
	reply protocol.Type
	errs  codeSet
	items codeSet
}

// every is what any request can get: BAD_FIELD (its envelope or a field cannot be read),
// SHUTTING_DOWN (the server drains, or its engine is closed) and INTERNAL (a bug, or a
// reply that cannot be encoded). BAD_FRAME and FRAME_TOO_LARGE answer a frame that is
// not a request at all, and UNKNOWN_TYPE one of no known type; none is listed.
var every = codes(protocol.CodeBadField, protocol.CodeShuttingDown, protocol.CodeInternal)

// replies is the one table of the replies and error codes each request can get:
// PROTOCOL.md lists the same under each request ("Replies:" lines), which
// TestRepliesMatchProtocolDoc checks, and conn.handle checks every reply against it
// (checkReply). A handler that can return a new code must be listed here first.
var replies = map[protocol.Type]replySpec{
	protocol.TypeHello: {reply: protocol.TypeWelcome, errs: every | codes(protocol.CodeVersionUnsupported,
		protocol.CodeUnauthorized, protocol.CodeOverloaded, protocol.CodeUnexpected)},
	protocol.TypePing: {reply: protocol.TypePong, errs: every},
	protocol.TypeSubmit: {reply: protocol.TypeTaskStatus, errs: every | codes(protocol.CodeNotLeader,
		protocol.CodeInvalidTask, protocol.CodeExists, protocol.CodeOverloaded, protocol.CodeUncertain)},
	protocol.TypeSubmitBatch: {reply: protocol.TypeBatchResult, errs: every | codes(protocol.CodeNotLeader),
		items: codes(protocol.CodeBadField, protocol.CodeInvalidTask, protocol.CodeExists, protocol.CodeOverloaded,
			protocol.CodeNotLeader, protocol.CodeUncertain, protocol.CodeInternal)},
	protocol.TypeCancel: {reply: protocol.TypeTaskStatus, errs: every | codes(protocol.CodeNotLeader,
		protocol.CodeNotFound, protocol.CodeOverloaded, protocol.CodeUncertain)},
	protocol.TypeGet:     {reply: protocol.TypeTaskInfo, errs: every | codes(protocol.CodeNotLeader, protocol.CodeNotFound)},
	protocol.TypeList:    {reply: protocol.TypeTaskPage, errs: every | codes(protocol.CodeNotLeader)},
	protocol.TypeDLQList: {reply: protocol.TypeDLQPage, errs: every | codes(protocol.CodeNotLeader)},
	protocol.TypeDLQRequeue: {reply: protocol.TypeTaskStatus, errs: every | codes(protocol.CodeNotLeader,
		protocol.CodeNotFound, protocol.CodeExists, protocol.CodeOverloaded)},
	protocol.TypeDLQPurge: {reply: protocol.TypePurged, errs: every | codes(protocol.CodeNotLeader)},
	protocol.TypePause: {reply: protocol.TypeOK, errs: every | codes(protocol.CodeNotLeader, protocol.CodeOverloaded,
		protocol.CodeUncertain)},
	protocol.TypeResume: {reply: protocol.TypeOK, errs: every | codes(protocol.CodeNotLeader, protocol.CodeOverloaded,
		protocol.CodeUncertain)},
	protocol.TypeConfigGet:  {reply: protocol.TypeConfigValues, errs: every},
	protocol.TypeConfigList: {reply: protocol.TypeConfigValues, errs: every},
	protocol.TypeConfigSet: {reply: protocol.TypeConfigValues, errs: every | codes(protocol.CodeOverloaded,
		protocol.CodeUncertain)},
	protocol.TypeStats:      {reply: protocol.TypeStatsReply, errs: every},
	protocol.TypePartitions: {reply: protocol.TypePartitionMap, errs: every},
	protocol.TypeSubscribe: {reply: protocol.TypeOK, errs: every | codes(protocol.CodeNotLeader,
		protocol.CodeUnexpected)},
	protocol.TypeCredit: {reply: protocol.TypeOK, errs: every | codes(protocol.CodeUnexpected)},
	protocol.TypeAck: {reply: protocol.TypeOK, errs: every | codes(protocol.CodeUnexpected, protocol.CodeStaleEpoch,
		protocol.CodeUnknownRun)},
	protocol.TypeNack: {reply: protocol.TypeOK, errs: every | codes(protocol.CodeUnexpected, protocol.CodeStaleEpoch,
		protocol.CodeUnknownRun)},
	protocol.TypeAcks: {reply: protocol.TypeAcked, errs: every | codes(protocol.CodeUnexpected, protocol.CodeStaleEpoch),
		items: codes(protocol.CodeUnknownRun, protocol.CodeStaleEpoch, protocol.CodeInternal)},
	protocol.TypeCarry: {reply: protocol.TypeAcked, errs: every | codes(protocol.CodeUnexpected, protocol.CodeNotLeader),
		items: codes(protocol.CodeUnknownRun, protocol.CodeStaleEpoch, protocol.CodeInternal)},
	protocol.TypeAdopt: {reply: protocol.TypeAcked, errs: every | codes(protocol.CodeUnexpected, protocol.CodeNotLeader),
		items: codes(protocol.CodeUnknownRun)},
}

// serverSent is answered UNEXPECTED whatever it is: the types only the server sends.
var serverSent = codes(protocol.CodeUnexpected)

// panicOnUnlistedReply makes checkReply panic instead of logging (set by the tests, so
// that every test of the package checks its replies against the table).
var panicOnUnlistedReply bool

// checkReply reports a reply to req (nil: none) that the table does not list for it: a
// code a handler returns without PROTOCOL.md saying so. It logs at Error and counts, and
// changes nothing on the wire. Cost: a map lookup and a bit test per reply.
func (q *requests) checkReply(req protocol.Message, reply protocol.Message) {
	if reply == nil {
		return
	}
	spec, known := replies[req.Type()]
	ok := true
	switch r := reply.(type) {
	case *protocol.Error:
		if known {
			ok = spec.errs.has(r.Code)
		} else {
			ok = serverSent.has(r.Code)
		}
	case *protocol.BatchResult:
		for _, it := range r.Results {
			ok = ok && (it.Code == 0 || spec.items.has(it.Code))
		}
	case *protocol.Acked:
		for _, it := range r.Failed {
			ok = ok && spec.items.has(it.Code)
		}
	default:
		ok = known && reply.Type() == spec.reply
	}
	if ok {
		return
	}
	q.unlistedReplies.Add(1)
	if panicOnUnlistedReply {
		panic("tockd: reply " + describe(reply) + " to " + req.Type().String() + " is not in the replies table")
	}
	q.log.Error("tockd: a reply the replies table does not list (a bug: PROTOCOL.md does not say so)",
		"request", req.Type(), "reply", describe(reply))
}

func describe(m protocol.Message) string {
	if e, ok := m.(*protocol.Error); ok {
		return "ERROR " + e.Code.String() + " (" + e.Message + ")"
	}
	return m.Type().String()
}
