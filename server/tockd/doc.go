// Package tockd is the tock server: it accepts TCP connections, speaks the wire
// protocol of server/PROTOCOL.md (codec: server/protocol) on them, and turns client
// requests into calls on an in-process core/task Engine; with a Store (server/store,
// etcd) it keeps durable tasks and leads through an etcd election. The tockd binary
// (server/cmd/tockd) wraps it.
//
// # Structure
//
// Server is the public API (New, Serve, Shutdown, Stats, Health, and for operators
// Workers, Leader, Nodes, SetPaused, PausedTypes, ConfigGet, ConfigList, ConfigSet and
// ConfigReset in operator.go) and the composition of parts, each a type with one job
// whose doc comment states its invariants and locking:
//   - connSet (connset.go): listeners, served connections, the admission limits
//     (MaxConns, MaxHandshakes) and the connection goroutines;
//   - conn (conn.go): one connection's reader and writer, its handshake and reply queue;
//   - requests (requests.go, submit.go, pages.go, replies.go): the answer to each request
//     after the handshake;
//   - remoteRuns (workers.go, carry.go): the engine's fallback handler, which FIREs runs
//     at workers, and the workers' requests that end them;
//   - router (router.go): which worker gets a run, the runs waiting for one and those in
//     flight; it talks to connections and the engine through two small interfaces and is
//     unit-tested with fakes of both;
//   - replica (replica.go), only with a Store (nil without one): leadership (leader.go,
//     standby.go), durability (durable.go, submit.go, durload.go), committer (commit.go),
//     runLocks (exclusive.go), progress (progress.go) and registry (registry.go);
//   - ownership (ownership.go): the partition map, with or without a Store;
//   - liveConfig (liveconfig.go): the runtime configuration, followed and applied;
//   - spans (spans.go): the spans of traced tasks, when a tracer is configured.
//
// Lock order, everywhere: durability.term or liveConfig.applyMu, then the engine's
// locks, then router.mu or a part's own mu, then a connection's outMu. No mu is held across a store call or a
// socket write; connSet.mu is a leaf.
//
// # Leadership
//
// Leadership (leader.go). Without a Store the node is alone and always leads, at epoch 0.
// With one, every node campaigns through the store's etcd election (go.etcd.io/etcd/
// client/v3/concurrency) once it serves, announcing its client address (AdvertiseAddr):
//   - Elected, it loads every durable record into its engine (one paged read) and only
//     then dispatches; every FIRE carries its epoch (the election key's create revision,
//     which only grows). A record takes the place of a finished copy of its task that
//     the engine still holds (elected again after a step-down, the node kept the tasks
//     that ended in its last term; a record still stored means that end was never
//     confirmed), so the task runs again rather than sit in etcd with nothing to end it;
//     a live copy still refuses it (logged, the record left).
//   - A follower holds no tasks. It answers task requests (SUBMIT, CANCEL, GET, LIST,
//     the DLQ, PAUSE/RESUME) and SUBSCRIBE with NOT_LEADER naming the leader's address
//     (read from etcd); the Go client and Worker follow it. PING and STATS are answered.
//   - The moment its session is lost (or about to be), or its election key is deleted
//     or rewritten while the session lives (it watches the key: an operator, or a next
//     leader after the lease expired), a leader stops dispatching (due
//     runs wait), refuses ACK/NACK (STALE_EPOCH; also one taken just before, whose end
//     the engine applies only as the durable tasks are dropped, or never: its record
//     stays, so it is not confirmed), sends its workers away (ERROR
//     NOT_LEADER, then close), drops its durable tasks from the engine (their records
//     stay in etcd for the next leader) and campaigns again. Ephemeral tasks stay in its
//     engine and run if it leads again; they are lost if it dies (their class says so).
//   - A node fires only while now < validUntil, which precedes the earliest moment etcd
//     can expire its lease (store.Leadership.Valid: the send time of the last answered
//     keep-alive + TTL - LeaseGuard). The router checks it just before pushing each FIRE
//     (one atomic load and a compare, no allocation), not only through the goroutine
//     that ends the term, which may run late: after a SIGSTOP past the TTL, the
//     dispatch goroutines can run first. A run that fails the check is not fired: it
//     waits, the term ends at once (leaderTerm.Lapsed: step down and resign, as above),
//     and the run is handed back with the durable tasks; the next leader loads it.
//     Durable writes need no such check: etcd refuses them by the fence.
//   - Every WELCOME states a heartbeat interval (Options.Heartbeat: a quarter of the
//     session TTL), so that clients and workers notice a frozen leader (nothing, not
//     even a PONG, arrives for three intervals) and leave it for the next leader while
//     it is elected, whatever the frozen process does.
//   - Shutdown resigns first, so that another node need not wait for the session to
//     expire.
//   - A durable run in flight when its leader dies is redelivered by the next leader
//     (the task's record is still there): at-least-once. An ACKed durable run is not: the
//     OK to the ACK waits for the record's deletion.
//
// # Hot standby and fencing
//
// Hot standby (standby.go): a node that does not lead mirrors the durable records
// and run locks (one paged read, then a watch of the store's prefix); elected, it
// reads etcd's revision (after Campaign returned, so after the last leader's final
// write), loads from the mirror once the mirror has applied every write up to it,
// and reads etcd only if the mirror lags.
//
// Fencing: every durable write (a submit's record, a finished task's delete, a run
// lock and its delete, a recurring task's progress) is an etcd transaction
// conditional on this node's election key (store.Fence), so a deposed leader's late
// write is refused rather than landing after the next leader loaded the task set.
// A write refused so (store.ErrFenced) ends this node's term at once, as a lost
// session does (leadership.fencedOut): a node whose term etcd ended behind its back
// (it stalled past its lease) stops at its first write. An ACK whose delete was
// refused or failed is answered STALE_EPOCH or INTERNAL, never OK: only runs whose
// ACK was answered OK are never run again. An ACK (or CANCEL) is confirmed only by a
// delete fenced by the term that accepted it: each queued delete carries its task's
// term, and one whose term has ended is refused without a write (ErrFenced), also when
// this node leads again meanwhile: its new term has loaded the record and runs the task.
// The deleter may decide a delete before the ACK that ended the task asks for it (the
// engine applies the end first); a refusal decided so is kept for the ACK (until the
// next term's load), which is then answered with it, not OK.
//
// # Exclusive tasks and recurring progress
//
// Exclusive tasks (exclusive.go): a run lock in etcd per dispatched run; a new
// leader waits one time to run before running a task whose lock it finds, unless
// a worker carries the outcome of the run the lock names (carry.go). A lock goes
// with its task's record, and when a non-exclusive version replaces the task.
//
// Recurring durable tasks' progress (progress.go): whenever a recurring durable
// task's next occurrence is armed (submitted, loaded at a takeover, an occurrence
// ended), the leader records its due time with the task's version (<prefix>next/,
// coalesced to at most one write per task every 100 ms, fenced); the first one is
// written with the record itself, in its transaction, before the SUBMIT is
// answered, and the engine starts the schedule there; the next leader
// resumes the schedule from it (Engine.Continue) when the version is its record's (a
// replacement never inherits its predecessor's schedule), so the schedule does not
// drift by the failover's gap and occurrences that fell due while no node led get
// the task's misfire policy.
//
// Durable submits of concurrent requests share etcd transactions (commit.go).
//
// # Worker registry and carried outcomes
//
// Worker registry (registry.go): the leader keeps an entry per worker connection in
// etcd under its session lease (<prefix>workers/<node>/<seq>: name, address, types,
// credits, runs in flight), brought up to date every second and as a worker
// subscribes; entries go when the worker does, and with the lease if the leader
// dies. Followers read it every 200 ms (how many workers a takeover waits for).
//
// Carried outcomes (carry.go): a worker whose ACK or NACK a leader never confirmed
// hands the outcome to the next leader (CARRY) before it subscribes; the leader
// ends the run with it, instead of running it again, when it holds the task
// unchanged (version, attempt; for a recurring task the occurrence). Because its
// loaded runs come due at once, a new leader holds them back (unfired, in the
// waiting queues) for Options.CarryGrace, extended by each CARRY frame that arrives
// meanwhile up to Options.CarryHoldMax, or until as many workers have subscribed,
// each after its CARRY frames, as the previous leader had in the registry (read by
// followers every 200 ms).
// A worker whose connection closed while the leader lived on carries to that same
// leader: its runs in flight are kept (orphans, router.go) for
// Options.ReconnectGrace before they fail and are redelivered.
//
// Runs handed in still running (adopt.go): a worker whose handler still runs when its
// connection goes names that run on its next connection (ADOPT), after its CARRY
// frames; the leader takes it over under the same rule (or, for an orphan of its own
// term, by run ID and epoch) instead of FIREing it again: the run is in flight on the
// new connection, spending no credit, and ends with that worker's ACK or NACK.
//
// Runs in flight at a failover: a durable task's record is its pending marker (it goes
// only when an ACK ends the task, and the ACK is answered once it has), so the next
// leader redelivers every unfinished durable task. It does so at once (after the carry
// grace above), not after the old run's time to run: that run's ACK cannot reach the new
// leader (its worker's connection died with the old leader, and a stale epoch is
// refused; only a finished run's outcome is carried), so waiting would only delay
// recovery. Where two runs of a task must never overlap, the task is
// exclusive: its runs are recorded (run locks) and the new leader does wait them out.
//
// # Partitions: the map, stored in etcd, not yet routed
//
// Options.Partitions is the cluster's partition count P; with a Store, New stores it in
// etcd if the cluster has none and refuses a node whose P differs (ErrPartitionCount).
// From its first Serve, a node follows the live nodes (<prefix>nodes/, one entry per
// node under its session lease, store.Nodes) and, once it has read them, registers
// itself (again after each lost session); Shutdown removes the entry. It also follows
// the stored map (<prefix>partitions/map, store.PartitionMap), and whenever the live
// set or the map changes and partition.Rebalance(stored, P, live) differs from the
// stored map, writes it by compare-and-swap over the map's revision and the node set it
// read (any node may; ownership.go says why not the leader alone). Every node follows
// the stored map, not a map of its own: at one revision, the same owners on every node,
// and a leave moves only the leaver's partitions. A node holds each partition the map
// gives it by an owner key under its session lease (<prefix>partitions/owner/<p>,
// created only while absent: store.Partitions.Claim), gives up those the map moves
// away, and all of them at Shutdown (holdings.go); a new owner whose key is still the
// old owner's waits for it to go, so two nodes never hold one partition at once. The
// key's create revision is the partition's epoch (PartitionMap.Epochs). WELCOME states P and the map's
// revision, PARTITIONS answers the map, STATS and /metrics count the partitions each
// node owns. Dispatch is unchanged: the one leader still runs every task, and no
// request is refused as NOT_OWNER.
//
// # Durable tasks
//
// Durable tasks (durable.go, submit.go, durload.go). Without Options.Store a SUBMIT with durability "durable" is
// refused (INVALID_TASK, field task.durability). With a Store (server/store, etcd):
//   - A durable SUBMIT is written to the store (Store.PutBatchFenced, shared with
//     concurrent requests; the durable items of a SUBMIT_BATCH together) before the engine gets it and before the reply,
//     which says durable. The record's body is the wire task encoded as a SUBMIT frame
//     body (the codec's own encoding); an "after" delay is recorded as the absolute "at"
//     time it stands for, so a restart does not start it over. Record version = the
//     task's version. Store errors: ErrExists EXISTS; ErrInvalid and ErrTooLarge
//     INVALID_TASK; ErrFenced NOT_LEADER; ErrUncertain (a timeout, a connection lost
//     mid-write: the record may exist) UNCERTAIN; anything else (etcd refused or could
//     not be reached before writing) OVERLOADED. A retry is idempotent: a record already
//     stored at the submit's version that differs from the retry's only in the "at" an
//     "after" delay was stamped into (and in its trace context, which no print compares)
//     counts as the retry's own, and the task takes the stored due time. If the engine then refuses the task, its record is deleted
//     again: that version's record only (a later version that won meanwhile keeps its
//     own), and fenced by this node's term; if that delete fails, the reply is
//     UNCERTAIN, not the engine's refusal (the record stays for the next leader).
//   - Packs (store's packs.go): a request with packFrom (16) or more one-shot durable
//     tasks that have no run lock, progress or parents and replace no durable entry
//     writes them as one pack, one key (Records.PutPackFenced, fenced by the term), not a
//     record each; each such task's durEntry names its entry (durEntry.pack). Its end
//     sets the entry's bit in the term's bitmap of that pack (durability.packs, which
//     only grows) and the deleter writes the bitmaps its batch touched
//     (Records.MarkDoneFenced: a done key per pack, both keys deleted once every entry
//     has ended) where it would delete records: the same fence, the same waits. A task
//     that leaves its pack is recorded on its own: a later version replacing it writes
//     its own record, and the old entry's bit is set once that write lands. A load
//     takes each task's highest version among its record and its pack entries not done
//     (a tie to its own record), joins every pack read to the term's bitmaps, and ends
//     what it passed over (a stale entry's bit; a stale record's delete). A pack is
//     named by the term and a counter, so a client's retry would write a second one:
//     a pack write of unknown outcome is written again at once (the identical pack
//     found is success), and if still unknown deleted and answered OVERLOADED; only a
//     failed delete answers UNCERTAIN (putPack).
//   - A durable submit is recorded in the term it was claimed in (leadership.fence when
//     it was prepared; commit.go refuses a later term's). If that term ends after the
//     write but before the task enters the engine, the task stays out of this engine
//     (it would be untracked there, as if ephemeral) and is answered as accepted: its
//     record is the next leader's, which loads and runs it. durability.term orders a
//     submit's entry into the engine against dropDurable, which drops every durable
//     task at a step-down.
//   - Before writing, a durable submit whose version is at or below one the engine holds
//     (any class) is refused EXISTS, unless it is the durable task held at that version,
//     as recorded (durEntry's print of the record; for an "after" task, ignoring the
//     stamped due time): then it is a retry, answered with the task as held. An
//     ephemeral submit that would replace a durable task is refused INVALID_TASK, field
//     durability: one key has one class.
//   - The server keeps the set of durable engine tasks (namespace/ID, version) and states
//     the class from it in TASK_STATUS, BATCH_RESULT, GET and LIST.
//   - The engine's OnEvent hook (New needs to make the engine; an OnEvent in
//     EngineOptions is still called) queues the record's deletion when a durable task
//     ends for good: SUCCEEDED or DEAD for a one-shot task, CANCELLED for any. A
//     goroutine deletes them in order, retries a failed delete with backoff (5 tries),
//     and logs at Error one it gives up on (the task then comes back at the next start).
//     Every delete names the version that ended (store.DeleteBatchFenced), so a durable
//     resubmit of the same key at a later version, queued or in flight beside the old
//     version's delete, keeps its new record. After that the task reads as ephemeral
//     (GET of a retained finished task, dead letters, a requeued dead task: it is no
//     longer recorded).
//   - New loads every record and submits it to the engine before it returns (so before
//     any connection): due times in the past fire at once, recurring tasks continue from
//     the start. A record that cannot be decoded or that the engine refuses is logged and
//     left in the store; a failed Load fails New. Shutdown closes the engine and then
//     waits (until its context ends) for the queued deletes; the caller closes the Store.
//   - Events carry the task's version: the end of a replaced version never deletes its
//     successor's record.
//
// # Workers
//
// Workers (workers.go answers the workers' requests; router.go's router, which talks to
// connections and the engine through two small interfaces and is unit-tested with fakes
// of both, routes the runs). remoteRuns.handler is the engine's fallback handler: every task type
// without an in-process handler of its own is run by FIREing the attempt at a subscribed
// worker connection (the handler returns task.ErrDeferred); the worker's ACK or NACK ends
// the attempt with Engine.Complete. Choices:
//   - Picking: among the type's subscribed connections with a credit, Options.Dispatch
//     decides: the most free credits (default), round robin in subscription order, or
//     rendezvous hashing of the task key with xxhash (the same key, the same worker while
//     it has credits). A shard's run (task.Task.Shards) goes first to the connection
//     running fewest of its task's shards (workerState.shardsOf), so that an
//     occurrence's shards spread over distinct workers where there are enough; the
//     strategy picks among those. A broadcast task's runs each go to their own worker
//     alone, or fail (broadcast.go). The FIRE is queued on that connection's bounded
//     reply queue without blocking; a full queue (a worker that is not reading) or a
//     closing connection is skipped for the next candidate.
//   - No worker: with no candidate (no subscribed worker of the type has a credit, the
//     type is paused, or this node does not lead) the run waits in a FIFO per type, its
//     timeout held (Engine.HoldTimeout), and the task reads RUNNING. SUBSCRIBE, CREDIT,
//     RESUME and gaining leadership fire waiting runs, oldest first, each one's timeout
//     (time to run) started afresh at its FIRE (Engine.StartTimeout). A run whose task
//     was cancelled or replaced meanwhile is dropped when its turn comes. At most
//     Options.MaxWaitingRuns wait, and at most Options.MaxWaitingRunsPerType of one type
//     (so that a type nobody serves cannot take every place from the others); a run
//     coming due beyond either fails at once, retryably ("no worker available":
//     back-pressure through the task's retry policy). A queue's stale runs (cancelled
//     meanwhile) count until their turn. The handler never waits for a worker, so it
//     holds an engine worker only for an exclusive durable task's run lock, a write to
//     etcd bounded by storeOpTimeout (exclusive.go).
//   - Credits follow PROTOCOL.md: each FIRE spends one, CREDIT adds, a second SUBSCRIBE
//     replaces them; ACK and NACK return none (the worker grants credits back).
//   - FIRES (fires.go): to a worker whose SUBSCRIBE set batch_fires, the runs the router
//     fires in one call (route, or a drain: the runs a CREDIT, an ACKS's credits, a
//     SUBSCRIBE or a RESUME let go) are flushed together, and the connection's writer
//     sends what it finds pushed when it wakes as FIRES frames of at most batch_fires
//     and Options.MaxFiresRuns runs and MaxFrame bytes; it never waits for more. Each
//     run spends its credit and is tracked in flight exactly as a FIRE's. Other workers
//     get FIRE frames.
//   - In flight: each connection tracks the run IDs fired on it; ACK/NACK of another run
//     is UNKNOWN_RUN, an epoch other than the leader's is STALE_EPOCH. An ACK/NACK removes the run
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
// # Tracing
//
// Tracing (spans.go, server/tracing). A task may carry a W3C trace context (SUBMIT's
// "traceparent" and "tracestate", kept as task.Trace and in its durable record). Every
// FIRE of a traced task carries a trace context, so that the worker's handler joins the
// submitter's trace. With Options.TracerProvider or OTLPEndpoint the server also makes
// spans of traced tasks, each a child of the task's trace context: tock.submit at an
// accepted (or refused) submit, tock.fire as a run is handed to the router (the FIRE
// then carries this span's context, the parent of the worker's tock.handle), and, from
// the events of the engine New makes, tock.ack, tock.retry and tock.dead_letter as
// attempts end. Without either, no span is made and a FIRE passes the task's own
// context on; a task without a trace context gets no spans either way. Shutdown flushes
// an OTLPEndpoint's exporter last.
//
// # Requests and replies
//
// PAUSE and RESUME name a task type: a paused type's due runs wait, undispatched, until
// RESUME. A pause is the runtime setting paused/<type> (below): with a Store it is in
// etcd, and holds on every node, across leader changes and restarts.
//
// # Runtime configuration
//
// The runtime-safe settings (server/settings: log_level, the waiting bounds, rate and
// concurrency limits, paused types, the engine's retention, the alert thresholds of
// Options.Alerts, the webhooks of Options.Notifier) live in etcd under <prefix>config/
// (store.Config), in clear: no secret is one.
// Every node reads them in New (waiting up to 10 s; then it serves on its defaults
// until it can), watches them, and applies each change as it sees it (liveconfig.go),
// logging the key, the old and the new value at Info and counting it (Stats.
// ConfigChanges, tock_config_changes_total); a key removed goes back to the node's
// Options (its flags). A node elected leader reads them once more before it
// dispatches. ConfigSet and ConfigReset (and CONFIG_SET, PAUSE, RESUME) check the value
// with settings.Parse, write it, and return once this node has applied it. Without a
// Store they apply to this node alone, in memory, until it stops.
//
// Replies fit MaxFrame (pages.go): SUBMIT refuses a payload over MaxFrame - 4096, so a
// snapshot, dead letter or FIRE carries any accepted payload whole; GET cuts a snapshot
// whose error texts do not fit (truncated), or as a last resort leaves its payload out
// (payload_len, also on request: omit_payload); LIST and DLQ_LIST end a page early where
// its next item would not fit, after at least one.
//
// Replies (replies.go): one table says, for each request type, its reply and every error
// code it can get; PROTOCOL.md's "Replies to X:" lines say the same (a test compares
// them), and conn.handle checks every reply against it (an unlisted one is a bug, logged
// at Error; the package's tests panic on it). CANCEL of a finished task answers its
// final state (TASK_STATUS), DLQ_PURGE of an absent dead letter count 0: neither is an
// error.
//
// # Connections
//
// Each connection has two goroutines:
//   - the reader owns the socket's read side and the protocol.Decoder: it reads, decodes,
//     handles each request synchronously against the engine (every engine call is O(1)
//     but LIST and DLQ_LIST, which are administrative), and queues the reply;
//   - the writer owns the write side: it takes replies from the bounded queue, encodes
//     them with protocol.AppendFrame into one reused buffer, and coalesces whatever is
//     queued into one Write; after WELCOME, it writes a heartbeat (PONG, ID 0) when it
//     has written nothing for Options.Heartbeat, so that a reader busy with a slow
//     request (a durable submit's etcd write) does not look like a frozen node.
//
// Invariants:
//   - A protocol violation (an ERROR whose code closes, or any error before the
//     handshake) closes only the connection that committed it; no other connection
//     shares any per-connection state or lock with it.
//   - A client that does not read never blocks another connection or the engine: its
//     reply queue holds Options.MaxPendingPerConn replies and Options.MaxQueuedReplyBytes
//     bytes (each message counted as replyCost, an upper bound of its frame, reserved in
//     conn.queued before it is queued and released once written; one larger reply goes
//     alone). A reply that does not fit makes the reader wait, reading nothing (the
//     back-pressure a pipelining client feels; STATS counts reply_stalls); a FIRE that
//     does not fit is not queued (the run goes to another worker or waits). When the
//     queue stays full for Options.WriteTimeout, or one Write takes longer than that,
//     the connection is closed.
//   - Every goroutine the server starts has exited when Shutdown returns.
//   - Only the reader sends replies on a connection's reply queue, and it alone closes it
//     (under the connection's outMu); engine handlers push FIREs on it, non-blocking,
//     under the same mutex; the writer alone writes to the socket and closes it, except
//     for two forced closes that exist to unblock the writer: the reader's, when the
//     queue stays full past WriteTimeout, and Shutdown's, when its context ends.
//   - A worker that stops reading never blocks the engine: FIREs are never waited for.
//   - A frame's memory is bounded by Options.MaxFrame (the length prefix is checked
//     before the body is awaited), so a connection holds at most one frame, one 32 KiB
//     read buffer, MaxQueuedReplyBytes of queued replies (plus the ACK answers that
//     waited for etcd, at most maxLateReplies) and the writer's buffer (64 KiB, or one
//     reply).
//   - Before the handshake (conn.go, connset.go): the first frame is held to
//     Options.MaxHelloFrame (4 KiB), checked on its length prefix; at most
//     Options.MaxHandshakes sockets are in the handshake at once (a new one crowds out
//     the oldest, answered OVERLOADED), each for at most HandshakeTimeout; and only
//     connections that completed HELLO count against MaxConns. So sockets without the
//     token hold at most MaxHandshakes x (4 KiB + buffers) and never a slot of MaxConns.
package tockd
