// Package protocol is tock's wire protocol as a codec: the Go types of every message, an
// encoder that appends frames to a byte slice, and a decoder that splits a byte stream
// into frames and decodes them. It does no I/O; the server and clients own the sockets.
// The protocol itself is specified in server/PROTOCOL.md, which a test keeps in step
// with this code.
//
// A frame is a 4-byte big-endian body length, then one msgpack map. The codec is written
// by hand over byte slices: the encoder appends to the frame's slice, in exactly the
// encodings the github.com/vmihailenco/msgpack/v5 library picks with its default options
// (a test compares the two, and that library is used by tests only); the decoder indexes
// the body with an offset and accepts every msgpack form of a value.
//
// Each message type is defined once, in messages.go: a spec lists its keys in the order
// the encoder writes them, each with its kind, limit, whether it is required, and an
// accessor of the Go field (spec.go). The decoder's key table, the required mask (from
// each field's own flag, never from its position) and the encoder come from that list;
// the spec also names who may send the type, which a Decoder told its Peer enforces
// (UNEXPECTED, before the body is read). Snapshots, dead letters and attempts are specs
// too. The task, its schedule and retry policy, and a batch result (wiretask.go), on the
// SUBMIT and SUBMIT_BATCH hot paths, keep hand-written set switches and encoders; their
// tables are built from key names, the required ones named (handTable), so that no
// table anywhere holds a bit written by position.
//
// Invariants:
//   - Decoding never panics and never allocates in proportion to a length the peer
//     claims: every length is checked against the bytes actually present (and the frame
//     size against the maximum) before anything is allocated or read.
//   - Every error this package returns is an *Error with a Code; errors.Is matches it
//     against the package's sentinels (ErrBadField, ...). An *Error is also the ERROR
//     message, so it can be sent back as is.
//   - A decoded message shares no memory with the bytes it was decoded from.
//   - Encoding is deterministic: equal messages give equal bytes (map-valued fields are
//     written in key order), and Decode(AppendFrame(m)) equals m.
//   - Types are strict by msgpack family (an integer where an integer is due, str vs bin
//     kept apart), while integer widths and key order are free, and unknown keys are
//     skipped, so any conforming msgpack encoder can talk to it.
//
// Costs on the hot paths (BenchmarkEncodeFire, BenchmarkEncodeFires, BenchmarkDecode*,
// pinned by TestHotPathAllocs): appending a FIRE or FIRES frame to a reused buffer
// allocates nothing; a Decoder decoding an ACK allocates only the *Ack, a FIRE the
// *Fire, its task ID and payload, a FIRES the *Fires, its slice of runs and one buffer
// that holds every run's task ID and payload (3 allocations for any number of runs: a
// run kept keeps that frame's buffer alive), and a SUBMIT_BATCH the message, its slice
// and one buffer a task that holds its ID and payload (two, for a payload over 256
// bytes: an ID kept alone keeps at most that much alive): a Decoder interns namespaces
// and task types, which repeat on a connection.
package protocol
