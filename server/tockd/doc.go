// Package tockd is the tock server's connection layer: it accepts TCP connections,
// speaks the wire protocol of server/PROTOCOL.md (codec: server/protocol) on them, and
// turns client requests into calls on an in-process core/task Engine. The tockd binary
// (server/cmd/tockd) wraps it.
//
// This increment serves ephemeral tasks only: SUBMIT with durability "durable" is
// refused (INVALID_TASK, field task.durability) until etcd is wired in, and worker
// messages (SUBSCRIBE, CREDIT, ACK, NACK) and PAUSE/RESUME are answered UNKNOWN_TYPE
// ("not supported by this server yet"). Every task the engine holds is reported as
// ephemeral.
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
//   - Only the reader sends on a connection's reply queue, and it alone closes it; the
//     writer alone writes to the socket and closes it, except for two forced closes that
//     exist to unblock the writer: the reader's, when the queue stays full past
//     WriteTimeout, and Shutdown's, when its context ends.
//   - A frame's memory is bounded by Options.MaxFrame (the length prefix is checked
//     before the body is awaited), so a connection holds at most one frame, one 32 KiB
//     read buffer and MaxPendingPerConn replies.
package tockd
