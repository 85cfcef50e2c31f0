// Package store keeps tock's durable task records, its single-node leadership and
// the facts every node of a cluster agrees on (its partition count, its live nodes) in
// etcd.
//
// # Parts
//
// A Store (Open) holds the etcd client, the embedded etcd if it runs one, and the
// node's one etcd session: the lease that its leadership terms and its worker registry
// entries stand on, with that lease's valid-until (sessions, session.go; lease.go). The
// keys are split by kind among parts, each a type reached from the Store, owning one
// range of keys, and safe for concurrent use with no lock of its own (every field is
// set by Open and never changes):
//
//	st.Records()    Records    tasks/: Put, PutBatch[Fenced], DeleteBatch[Fenced], Load[All] (records.go);
//	                           packs/, packdone/: PutPackFenced, MarkDoneFenced (packs.go)
//	st.Locks()      Locks      locks/: Put[Fenced], SwapFenced, Delete[Fenced], DeleteBeforeFenced, Held[At] (locks.go)
//	st.Progress()   Progress   next/: PutFenced, At (next.go)
//	st.Workers()    Workers    workers/: Put, Delete, List, under the session's lease (workers.go)
//	st.Election()   Election   leader: Campaign[As] (a Leadership, on the session), Leader (leader.go)
//	st.Nodes()      Nodes      nodes/: Register, Deregister, under the session's lease; Watch (nodes.go)
//	st.Partitions() Partitions partitions/count: Ensure, create-if-absent (partitions.go);
//	                           partitions/map: ReadMap, WriteMap (compare-and-swap), WatchMap (partmap.go);
//	                           partitions/owner/: Claim (create-if-absent, under the session's lease), Release, WatchHolders (partowners.go)
//	st.Config()     Config     config/: Get, Put, Delete, List, Watch (config.go)
//
// The Store itself reads across the parts: Revision (etcd's revision now) and Follow
// (every write under the prefix, decoded by kind), in follow.go. A write that touches
// several kinds stays in the part that starts it, in one transaction: a record's first
// progress goes with its put (Record.NextDue), its progress and run lock with its delete.
// A Fence (txn.go) makes any part's write conditional on a Leadership's term.
//
// The only lock is the session holder's (sessions.mu, guarding which session is
// current); it is held only to read or replace the session, and across no request to
// etcd but those that make a new session (its lease grant, its keep-alive stream),
// which wait as long as etcd is unreachable: Nodes.Deregister, which only undoes what a
// live session holds, reads the session through an atomic instead and never waits.
//
// # Key layout
//
// Every key lives under Options.Prefix (default "/tock/"):
//
//	<prefix>tasks/<namespace>/<id>   one durable task record
//	<prefix>packs/<pack id>          the records of many one-shot tasks in one value (a pack; packs.go)
//	<prefix>packdone/<pack id>       a pack's ended entries: be64(popcount), then a bitmap
//	<prefix>locks/<namespace>/<id>   an exclusive task's run lock (Locks)
//	<prefix>next/<namespace>/<id>    a recurring task's progress: version, due (Progress)
//	<prefix>workers/<node>/<name>    the worker registry (Workers)
//	<prefix>leader/<lease id hex>    election keys (concurrency.Election on <prefix>leader)
//	<prefix>nodes/<node>             a live node: JSON {"addr": client address, "started": RFC 3339 time}, under its session lease (Nodes)
//	<prefix>partitions/count         the cluster's partition count P, decimal; written once, by the first node (Partitions)
//	<prefix>partitions/map           the partition map: each partition's owner, in a compact binary form (PartitionMap, partmap.go)
//	<prefix>partitions/owner/<p>     partition p's holder (decimal p): its node name, under its session lease; create revision = the partition's epoch (Holder)
//	<prefix>config/<key>             one runtime setting's value as text (Config; the keys: server/settings)
//
// A namespace must be non-empty and must not contain '/', so the first '/'
// after "tasks/" always ends it; an id is any non-empty string. A node name is
// non-empty and has no '/'.
//
// The value of a record key is an 8-byte big-endian Version followed by the
// opaque Body (the wire-encoded task). Because the version is a fixed-width
// big-endian prefix, etcd's byte-wise Value compare orders values by version:
// value < be64(v) holds exactly when the stored version is lower than v. This
// lets one transaction decide "create, or replace a lower version" with no
// prior read.
//
// # Access
//
// An external etcd (Options.Endpoints) is reached as Options.Username with
// Options.Password when its auth is on, and over TLS with Options.TLS (its CA,
// and a client certificate where etcd wants one). The embedded etcd
// (Options.Embedded) listens on 127.0.0.1, which every user of the host can
// reach, so it always runs with etcd's auth on: Open makes a root password of
// 256 random bits on the first start, keeps it in RootPasswordFile in the data
// directory (mode 0600; a file others may read is refused), creates user root
// with it and enables auth; later starts log in with it. A client without it is
// refused (user name is empty). ClientOptions gives another Store (a test's
// second node) the same way in. The embedded etcd's peer API (raft, lease
// forwarding, member to member), which has no password, is on no TCP port: it
// listens on the unix socket Embedded/PeerSocketDir/PeerSocket, whose directory
// Open makes (or sets) mode 0700, so only this user can connect; its advertised
// peer URL is a placeholder (unix://localhost:0), which the only member never
// dials. A data directory whose socket path would pass the 107 bytes a unix
// socket allows is refused with ErrConfig.
//
// # Write invariants
//
//   - A record is written only if its key is absent (CreateRevision == 0) or
//     its stored Version is strictly lower than the new one. Otherwise the
//     write is refused with ErrExists, unless the stored value is byte-for-byte
//     the one being written, which counts as success (so a retry after an
//     unknown outcome is idempotent).
//   - Records.PutBatch packs records into transactions of at most Options.MaxTxnOps
//     etcd ops (counting the nested levels, as etcd does) and at most
//     Options.MaxTxnBytes of keys and values; each record succeeds or fails on
//     its own.
//   - A write whose transaction fails returns an error wrapping ErrUncertain
//     (it may have committed: a timeout, a lost connection) unless etcd refused
//     it before proposing it (no space, too many requests or ops, too large, no
//     leader, permission), which is known not to have written. A put refused
//     for an equal or higher stored version reports the stored record
//     (*ExistsError).
//   - A delete (Records.DeleteBatch) names the version it removes: it applies only while
//     the record is stored at exactly that version (be64(v) <= value < be64(v+1)),
//     so the end of a replaced version never removes its successor's record.
//   - A pack is written once (created, or the identical value found); its done key
//     exists only while the pack does, and is written only over a lower popcount, so
//     a writer whose bitmaps of a pack only grow never undoes an end it recorded; a
//     pack whose entries have all ended goes with its done key in one transaction.
//   - Records.Load reads the whole record range, the packs and their done keys at one
//     revision, in pages of Options.LoadPageSize, and returns that revision: a later
//     watch from rev+1 sees every change after the snapshot. It yields one record a
//     task: the highest version of its own record and its pack entries not done (a
//     tie goes to its own record); LoadAll also reports the ones passed over. Revision reads etcd's
//     revision now: every write committed before the call is at or below it.
//
// # The partition map
//
// WriteMap is the map's only writer: one transaction that applies only while the map
// key's mod revision is the one the writer read and the node set is the one it computed
// from (each entry still at its revision, none written after the set's). So, for maps
// A (stored at revision r) and B written over r: B's writer saw A and the live set
// as it stood when B committed, and of writers racing over r at most one commits.
//
// A partition's owner key is created only while absent (Claim: CreateRevision = 0) and
// deleted only by its holder's Release or lease, so ∀ p, at every revision at most one
// node holds p, and each holding's epoch (the key's create revision) exceeds every
// earlier one's: a new owner whose key cannot be created yet waits for the old one's
// to go.
//
// # Leadership
//
// A Store holds at most one concurrency.Session at a time, on a lease of
// Options.SessionTTL. Election.Campaign blocks until this node owns the election on
// <prefix>leader: its key, read back after etcd's Campaign returned, is still the one
// it made, under a session not lost (a key that went while the node waited in line,
// with a lapsed session or by a delete, is campaigned for again). The Leadership's
// Epoch is the CreateRevision of its election key: it grows with every new leader, so
// a fire stamped with an older epoch can be refused (fencing). Done is closed when this node must stop acting as
// leader: the session's lease is lost (expired, revoked, or the Store closed),
// its valid-until has passed, its election key was deleted or rewritten while
// the session lives (an operator, or a next leader after the lease expired;
// each term watches its own key, one watch on the client's shared stream), or
// Resign was called.
//
// Valid-until (lease.go) is a conservative, monotonic deadline per session:
// besides the session's own keep-alive stream, the Store sends one keep-alive
// every SessionTTL/4 (each bounded by that interval) and reads the clock before
// sending it; an answer with TTL > 0 moves valid-until to
// max(valid-until, send time + TTL - LeaseGuard). etcd extends a lease when it
// processes the request, after the send, so valid-until precedes the earliest
// moment etcd can expire the lease however late the answer is read (a stalled
// or starved process, a response sitting in a socket buffer). The rule: a node
// acts as leader only while now < valid-until, which precedes the earliest
// moment etcd can expire its lease. Leadership.Valid(now) checks it (one atomic
// load and a compare) where the leader acts, since Done is closed by a
// goroutine that may run late (after SIGCONT, say); the session watch closes
// Done at the same deadline. The cost is one extra keep-alive request per
// SessionTTL/4 per node.
package store
