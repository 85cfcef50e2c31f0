// Package tockd is the tock server's connection layer: it accepts TCP connections,
// speaks the wire protocol of server/PROTOCOL.md (codec: server/protocol) on them, and
// turns client requests into calls on an in-process core/task Engine. The tockd binary
// (server/cmd/tockd) wraps it.
//
// This increment serves ephemeral tasks only, on a single node (leader epoch 0): SUBMIT
// with durability "durable" is refused (INVALID_TASK, field task.durability) until etcd
// is wired in, and PAUSE/RESUME are answered UNKNOWN_TYPE ("not supported by this server
// yet"). Every task the engine holds is reported as ephemeral.
//
// Workers (workers.go). SUBSCRIBE registers, once per task type, an engine Handler that
// FIREs the attempt at a subscribed worker connection and returns task.ErrDeferred; the
// worker's ACK or NACK ends the attempt with Engine.Complete. Choices:
//   - Picking: among the type's subscribed connections with a credit, the one with the
//     most free credits (ties: any). The FIRE is queued on that connection's bounded
//     reply queue without blocking; a full queue (a worker that is not reading) or a
//     closing connection is skipped for the next candidate.
//   - No worker: with no candidate left the attempt fails at once, retryably, with "no
//     worker available" (the task's retry policy decides; with the default of one attempt
//     it is DEAD). The handler never waits, so it never holds an engine worker.
//   - Credits follow PROTOCOL.md: each FIRE spends one, CREDIT adds, a second SUBSCRIBE
//     replaces them; ACK and NACK return none (the worker grants credits back).
//   - In flight: each connection tracks the run IDs fired on it; ACK/NACK of another run
//     is UNKNOWN_RUN, an epoch other than 0 is STALE_EPOCH. An ACK/NACK removes the run
//     from the set whatever the engine says, so a run the engine already timed out is
//     answered UNKNOWN_RUN once and forgotten.
//   - TTR: a FIRE's ttr is the task's timeout, or Options.DefaultTTR (30 s) for a task
//     without one; when New makes the engine, DefaultTTR is its DefaultTimeout, so the
//     engine times out (and retries per policy) a run not ACKed within its ttr.
//   - Redelivery: when a worker connection closes, each run in flight on it is completed
//     with the retryable error "worker disconnected" (counted as "redelivered" in STATS),
//     so the engine retries it, on another worker, per the task's retry policy.
//   - The FIRE is queued before the handler returns ErrDeferred, so a fast ACK can reach
//     Complete first; the engine accepts an early Complete and applies it when the handler
//     returns.
//
// Each connection has two goroutines:
//   - the reader owns the socket's read side and the protocol.Decoder: it reads, decodes,
//     handles each request synchronously against the engine (every engine call is O(1)
//     but LIST and DLQ_LIST, which are administrative), and queues the reply;
//   - the writer owns the write side: it takes replies from the bounded queue, encodes
//     them with protocol.AppendFrame into one reused buffer, and coalesces whatever is
//     queued into one Write.
//
// Invariants:
//   - A protocol violation (an ERROR whose code closes, or any error before the
//     handshake) closes only the connection that committed it; no other connection
//     shares any per-connection state or lock with it.
//   - A client that does not read never blocks another connection or the engine: its
//     reply queue holds Options.MaxPendingPerConn replies; when the queue stays full for
//     Options.WriteTimeout, or one Write takes longer than that, its connection is closed.
//   - Every goroutine the server starts has exited when Shutdown returns.
//   - Only the reader sends replies on a connection's reply queue, and it alone closes it
//     (under the connection's outMu); engine handlers push FIREs on it, non-blocking,
//     under the same mutex; the writer alone writes to the socket and closes it, except
//     for two forced closes that exist to unblock the writer: the reader's, when the
//     queue stays full past WriteTimeout, and Shutdown's, when its context ends.
//   - A worker that stops reading never blocks the engine: FIREs are never waited for.
//   - A frame's memory is bounded by Options.MaxFrame (the length prefix is checked
//     before the body is awaited), so a connection holds at most one frame, one 32 KiB
//     read buffer and MaxPendingPerConn replies.
package tockd
