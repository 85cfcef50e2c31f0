// Package settings is the registry of tock's runtime-safe settings: the limits and
// switches an operator may change on a running cluster (tockctl config set) without
// restarting a node. Each key is named here with its syntax, its parser and a line of
// documentation; the cluster's values live in etcd (server/store, Config), and every
// node applies each change as it sees it (server/tockd).
//
// A key is a name, or a name and an argument after a '/':
//
//	log_level                          debug|info|warn|error
//	max_waiting_runs                   a positive integer
//	max_waiting_runs_per_type          a positive integer
//	rate_limit/<type>                  rate[:burst]: runs a second (0: none), burst (default 1)
//	concurrency_limit/<namespace>/<key> a limit, 0 to 1,048,576 (0: the tasks' own)
//	paused/<type>                      true|false
//	alert_backlog                      an integer, 0 or more (0: never)
//	alert_lateness_p95                 a duration, 0 or more (0: never)
//	alert_for                          a duration, 0 or more
//	retention                          a duration, 0 or more (0: dropped as it finishes)
//	webhook_urls                       comma-separated http(s) URLs, or empty (none)
//
// Invariants:
//   - Parse is the one judge of a key and its value: tockctl checks with it before
//     sending, the server again before writing to etcd, and every node once more as it
//     applies what it read, so a value written by hand that does not parse is never
//     applied.
//   - ∀ (k, v) Parse accepts: Parse(k, Setting.Value) gives the same Setting (the value's
//     text is canonical), so every node applies the same setting from the same bytes.
//   - A key Parse refuses names no setting (ErrUnknownKey), and a value it refuses
//     names the key and the value (ErrBadValue); neither is ever written.
//   - Secrets are never settings: a value is stored in etcd in clear. webhook_urls
//     refuses a URL with user info, and its values are shown in logs and errors only
//     as Loggable cuts them (scheme://host/…); a URL that is itself a credential (a
//     bot's token in its path) is seen whole by config get and list, so keep such a URL
//     in tockd's -webhook or -webhook-file instead.
//
// The package is pure: no I/O, no state but the table of specs, which never changes.
// Cost: Parse is a table lookup and one value parse, O(len(key) + len(value)).
package settings
