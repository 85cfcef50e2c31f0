// Package task is tock's task engine: tasks with IDs, states, schedules (at, after,
// every, cron with seconds and a time zone), retries with exponential backoff and jitter,
// per-attempt timeouts and a dead-letter queue, on top of the timer core. It is
// in-process and embeddable; the server puts a network in front of it.
//
// # Flow
//
// Submit validates a Task, stores its record in one of 64 shards (xxhash of namespace and
// ID) and arms a core timer for its first occurrence. When the timer fires (in the timer
// pool) the task goes PENDING -> DUE and is queued for a worker. A one-shot task that is
// already due when submitted (no delay, or At a time that has passed) needs no timer:
// Submit itself makes it DUE and queues it, unless the queue is full (then it takes the
// timer's path, whose firing waits for room, so Submit never waits). A worker moves it to
// RUNNING and calls the handler registered for its Type with a context carrying the
// attempt's deadline. The outcome moves it on: SUCCEEDED (or, for a recurring task, back
// to PENDING for its next occurrence), FAILED with a retry armed after a backoff, or DEAD
// with a dead letter. Every move follows the table in states.go; an illegal one is an
// error and is never applied.
//
// # Limits
//
// A task may name a concurrency key (Task.Concurrency: at most the key's limit of runs at
// once, in its namespace) and a type may have a rate limit (SetRateLimit: a token bucket).
// A worker checks both before it counts the attempt; a run over a limit is parked, DUE,
// in that limiter's queue, and the worker moves on. When capacity frees (an attempt of
// the key ends however it ends, a token comes due, a limit is raised or removed) the
// earliest due waiter gets it and is queued again, never waiting under a lock: what the
// queue has no room for waits in order in one overflow list that a single goroutine
// hands on (limits.go, ratelimit.go, waitq.go). Both limits change at runtime (SetConcurrencyLimit,
// SetRateLimit); Stats counts the runs waiting. A task with no key, of a type with no
// rate limit, pays two loads for this and allocates nothing.
//
// # Dependencies
//
// A task may name parents (Task.DependsOn: IDs in its namespace). It waits, WAITING and
// with no timer armed, until every parent has ended; it is then released, PENDING and
// due per its own schedule (an After delay counts from the release). A parent that
// ends DEAD or CANCELLED applies the child's ParentPolicy: ParentCancel (the default)
// cancels the child, whose own children follow by theirs; ParentRunAnyway counts it as
// done. SubmitBatch submits a workflow as one, accepted or refused as a whole; a cycle
// (named by its path), a missing or recurring parent is refused. A child counts its
// parents not yet ended and a parent lists its children, so a workflow costs O(tasks +
// edges) and a task without edges nothing (dag.go, batch.go).
//
// # Shards
//
// A task with Shards N (2 to MaxShards) fans each occurrence out into N runs: its own
// record goes RUNNING as if its handler had returned ErrDeferred, and N shard records,
// one-shot and due at once, each retry on their own (their own attempts, backoff and
// timeout). Run.Shard gives a handler its index and the total; Info.Shards each shard's
// state. The occurrence succeeds when all N have; if one ends DEAD or CANCELLED, the
// occurrence fails, never retried, once the others have ended (one dead letter, the
// task's). Cancelling the task cancels its shards. A Broadcast task fans out the same
// way into as many runs as Options.BroadcastWidth says as each occurrence comes due (a
// server: its workers subscribed to the type); none is ErrNoShards, a failed attempt.
// A task without shards pays two branches and allocates nothing for this (shards.go).
//
// # Invariants
//
//   - A record is in exactly one shard's slot table, under the slot its timers carry as
//     their argument, and in that shard's index under the 64-bit hash of (namespace, ID)
//     (index.go: an open-addressing table of slots, checked by verify).
//   - A finished task is retained either as its record or, if it finished plainly (no
//     failed attempt, workflow, shards, key or trace: retainable), as an entry of its
//     shard's retained log, never both: a time-ordered list of pointer-free entries,
//     each keeping the slot its record had (slots[slot] nil, shard.held[slot] naming
//     it), by which the shard's index names it; read only by a lookup whose key names
//     an entry (which revives it as the record it would have been, in that slot) and
//     by List (retained.go). shard.tasks and the payload bytes held count both.
//   - A record arms at most one due/retry/expiry timer (record.timer) and one timeout
//     timer (record.deadline); a timer that fires without being the one its record holds
//     is stale and does nothing.
//   - A record's runID names the one attempt whose result counts; a handler that returns
//     after a timeout, a cancel or a replacing Submit finds another runID and its result
//     is counted as late, never applied. Run IDs do not repeat within an engine (until
//     a shard has issued 2^32 attempts) and are qualified by a random per-engine base,
//     so another engine's (a restart's, another leader's) differ too, but for a bounded
//     chance (engine.go, nextRunID).
//   - A recurring task's next occurrence follows from its current occurrence's due time
//     (record.due, or rare.occurrence once a retry has moved record.due), never from a
//     retry's: retries do not shift the schedule, and occurrences that passed meanwhile
//     are armed in the past, where the misfire policy takes them. A requeued dead
//     occurrence is no occurrence of the schedule: while it is armed or running,
//     rare.resume holds the next one, which the task returns to afterwards.
//   - A RUNNING record of a task with a concurrency key holds one slot of its key's
//     limiter, from its worker's first locked section to the end of the attempt
//     (finishAttempt, or retire when it is cancelled, dropped or replaced); a limiter's
//     slots held are those plus the waiting runs granted one on their way to a worker,
//     and runs wait only while the slots held reach the limit (concLimiter). Over any
//     span d, at most burst + d × rate runs of a rate-limited type start (rateLimiter).
//     A parked run's record stays DUE and in phaseQueued: its queued item is the
//     limiter's now; it is not reused meanwhile, and a run cancelled while it waits is
//     found stale when its turn comes, passing on what it was granted.
//   - A WAITING record has a workflow node counting its parents not yet ended, each of
//     which lists it among its children (dag.go, checked by verify); a parent's end is
//     told to its children once, under Engine.dagMu and never under a shard lock.
//   - Handlers never run under a shard lock, and OnEvent is never called under one.
//   - A removed record is reused for a later Submit only once nothing outside its
//     shard's lock can refer to it (record.recyclable, reuse.go): its attempt phase is
//     idle (no run item of it is queued, no worker is between taking one and its last
//     locked use of it), and no handler it gave a context or Run to can still be
//     running. An attempt that ends while its handler may still run (timed out,
//     cancelled, dropped, replaced), or a first attempt whose handler asked for
//     ctx.Done(), keeps its record from reuse for good (record.kept). The phase moves
//     idle -> queued -> running [-> early | -> filed] -> idle, checked against a table
//     as states are (phaseMoves).
//     So a handler's ctx and *Run are its own until it returns (Handler), and what the
//     engine hands out otherwise (Info, Event, DeadLetter) is a copy.
//
// # Guarantees
//
//   - A handler that panics, hangs or fails forever never stalls other tasks: panics are
//     recovered as failed attempts; an attempt past its timeout is failed by the engine's
//     own timer whether or not the handler returns, and a new worker takes the stuck
//     one's place (Options.MaxHungWorkers bounds the goroutines left behind); retries are
//     bounded by the RetryPolicy and end in the dead-letter queue.
//   - Limits hold runs back and never fail them: a run that waits for a slot or a token
//     uses no attempt, and waiting runs start in due-time order (a run that reaches its
//     worker while capacity is free takes it, as with any dispatcher).
//     Options.MaxConcurrencyKeys bounds the keys in use; a key's limiter is dropped
//     once no record names it and no runtime limit is set on it.
//   - Back-pressure: Options.QueueSize bounds due tasks waiting for a worker (the timer
//     pool waits when it is full); Options.MaxTasks bounds records and
//     Options.MaxPayloadBytes their payloads' bytes (Submit returns ErrOverloaded); the
//     dead-letter queue is bounded (oldest evicted, counted).
//   - Nothing is lost silently: every task that is submitted either runs, is cancelled by
//     the user, or ends in the dead-letter queue, except at Close, which drops what is
//     pending (the engine is in-process and holds no durable state).
package task
