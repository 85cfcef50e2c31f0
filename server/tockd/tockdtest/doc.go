// Package tockdtest is test support for the packages that talk to tockd, in the manner
// of net/http/httptest: Start serves a real tockd.Server on a fresh 127.0.0.1 port
// (optionally durable, over an embedded etcd), Dial opens a raw framed connection with
// the handshake done, for tests that speak the wire format, Receive waits for an event
// on a channel, and Eventually for a condition no event announces. Only tests import
// it; tockd's own tests cannot (it imports tockd), and share its raw connection and
// leak check through server/internal/wiretest and leaktest instead.
//
// Guarantees:
//   - Every server Start starts is shut down by tb.Cleanup, and its Serve has returned
//     ErrServerClosed before the cleanup ends (anything else fails tb); the store it
//     opened is closed after the server, its embedded etcd last.
//   - Every goroutine ends: with Main as the package's TestMain, goleak fails the run if
//     a goroutine outlives the tests (ignoring what ran before any test: ants starts its
//     default pool at init); VerifyNone checks the same within a test.
//   - Every wait is bounded by Limit: Receive, Eventually, Dial's handshake, each Conn
//     read and write, Shutdown. A wait that runs out fails tb, naming what it waited for.
//
// Costs: Start without etcd is one listener and the server's goroutines (~1 ms); with
// etcd it adds an embedded etcd's start and election (~50-100 ms with the test timings
// used here, TickMs 10 and ElectionMs 100) and ~30 MB of memory.
package tockdtest
