// Package client is the Go client of tockd: a Client for submitting and querying tasks,
// and a Worker that runs them. Both speak server/PROTOCOL.md through the codec in
// server/protocol over one TCP connection each.
//
// A Client pipelines: every call takes a fresh request ID, writes its request and waits
// for the reply with that ID, so any number of goroutines may call it at once over the
// one connection. Writes are coalesced: callers encode under a write mutex into one
// bufio.Writer, and the caller that finds no other writer waiting flushes it.
//
// Invariants:
//   - One reader goroutine per connection owns the socket's read side and its
//     protocol.Decoder; it alone completes waiting calls (by request ID) and, for a
//     Worker, starts runs for FIREs. The write side belongs to whoever holds the write
//     mutex.
//   - Request IDs are unique per connection: a counter under the connection's mutex,
//     starting at 2 (HELLO is 1). A reply whose ID has no waiter (its caller gave up) is
//     discarded.
//   - Cancelling a call's context abandons the wait and returns ctx.Err(); the request
//     may still have been sent and executed (a cancelled Submit may have submitted).
//   - When a connection is lost, every call waiting on it fails with an error matching
//     ErrConnectionLost; nothing is resent, because a request may have been executed
//     before the loss (a Submit is not idempotent unless the task carries a version).
//     The next call redials, waiting a backoff between failed attempts (Options.
//     ReconnectInitial doubling up to ReconnectMax), bounded by its own context. A call
//     whose request was never written (the connection was found dead first) redials and
//     sends it: that is not a resend.
//   - Heartbeats: when WELCOME states a heartbeat interval H, a pinger goroutine per
//     connection PINGs whenever nothing has arrived for H, and the reader bounds each
//     Read by 3 H (protocol.HeartbeatMisses): a node that sends nothing at all for that
//     long (frozen, or cut off while its socket stays open) is declared dead
//     (ErrHeartbeat), exactly as a lost connection: waiting calls fail with
//     ErrConnectionLost and the next call, or the Worker, dials the next address. Later
//     handshakes are bounded by 3 H too, and retry pauses (after a failed dial, or a
//     NOT_LEADER that names nobody) by H and by 100 ms (failoverPause), so that the
//     next leader, which the other nodes name as soon as etcd has elected it, is found
//     within about 100 ms of its election. A node left so (or whose handshake ran out
//     of 3 H) is skipped for another 3 H (endpoints.quiet): the other nodes name a
//     frozen leader until the next one is elected, and a NOT_LEADER naming it is then
//     treated as one that names nobody, instead of costing another 3 H there.
//   - After Close returns, every goroutine the Client started has exited and every call
//     has returned or returns ErrClosed.
//   - A Worker connection runs what its FIREs and FIRES carry on at most
//     Options.Concurrency runner goroutines, which live as long as the connection (or,
//     running a handler when it goes, until that handler returns); its acker alone
//     sends reports (ACKS, NACK)
//     and grants credits, and every run's outcome is reported once on the connection
//     its FIRE came on, or on the one that handed the run in. A report that got no
//     definite answer (the connection was lost,
//     or the leader stepped down first) leaves the outcome in the Worker's carry set
//     (carry.go, at most Options.MaxCarried), handed in (CARRY) on the next connection
//     before its SUBSCRIBE, so that the next leader does not run the task again. A
//     handler still running when its connection goes keeps running, and its run is
//     handed in (ADOPT, running.go) after the CARRY frames, unless
//     Options.CancelOnDisconnect; the SUBSCRIBE leaves those runs' credits out, so that
//     at most Concurrency handlers run at once across connections.
//     OnAcked is called once per finished run, with its final answer.
//   - Workflows: a task's task.Deps (DependsOn: its parents, OnParentFailure) travel as
//     its depends_on and on_parent_failure (PROTOCOL.md, Workflows). SubmitBatch of
//     tasks with parents is one workflow, accepted or refused as a whole: refused, every
//     BatchItem's Err is the refusal (the task at fault's own error, or, for a cycle or
//     a missing parent, the same error naming the task and the path). Submit of a task
//     with parents needs them in the server already.
//   - Routing by partition (route.go; PROTOCOL.md, "Partitions", "Routing"): when the
//     current connection's WELCOME states partitions, the first Submit, SubmitBatch,
//     Cancel or Get fetches the partition map (PARTITIONS, from that node) and caches it
//     by its revision; a WELCOME (of any connection) or NOT_OWNER stating a newer
//     partition_rev makes the next such call fetch it again, and a failed fetch keeps
//     the map held, until a newer revision is stated. Each such request goes to the
//     owner of its task's partition, partition.Of(namespace, ID, P), an empty namespace
//     hashing as task.DefaultNamespace: over the current connection when the owner is
//     its node (by WELCOME node name or address) or registered no address, else over a
//     connection of the Client's own to the owner's address, dialled on first use and
//     closed by Close. The request goes the default way (the current connection, with
//     NOT_LEADER followed as above) when the owner cannot be dialled, its connection is
//     found dead before the request is written, or it answers NOT_LEADER (one leader
//     still does everything: the owner executed nothing); that owner is then declined
//     until the map's revision changes, so today a follower's partitions cost one
//     refused request per follower and map. A NOT_OWNER (nothing executed) refreshes
//     the map and sends the request again to the owner it names (or, naming none, the
//     refreshed map's), at most Options.OwnerRetries times (default 1), then returns
//     it. A SubmitBatch whose tasks have several owners is split into one frame per
//     owner, sent concurrently, the results put back in the batch's order; items
//     refused with NOT_OWNER are routed again the same bounded number of times. A
//     workflow batch (a task with parents) is never split: it goes whole to its first
//     task's owner. Other requests (List, Stats, Pause, Requeue, ...) go the default way.
//   - Tracing (server/tracing): Submit and SubmitBatch send the W3C trace context of
//     the span in their ctx, if any, as each task's (a task's own task.Trace wins); a
//     Worker runs a HandlerFunc of a run whose FIRE carries a trace context in a
//     tock.handle span of Options.TracerProvider (default the global one), a child of
//     the FIRE's context, which is the handler's. A run without one costs nothing more;
//     a batch handler gets no span (its runs share one context): Fire.TraceContext
//     gives each run's.
//
// Costs: a FIRES of n runs costs the reader 5 allocations, whatever n (the codec's 3, one
// slice of the handlers' Fires and one of the runners' jobs:
// TestFiresReadWithoutAllocationPerRun); a FIRE the codec's 3 and its Fire. A batch
// handler (HandleBatch) takes a FIRES's runs of its type in one call, with one context
// and one result slice, where a HandlerFunc's runs make a context each and go to a
// runner each. A call is one frame each way plus one map insert and delete; encoding appends
// into the bufio.Writer's free space (protocol.AppendFrame), so small requests are not
// copied twice.
package client
