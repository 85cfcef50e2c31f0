// Package notify sends tockd's alerts to webhooks, without a Prometheus stack: a generic
// JSON body, or a Feishu/Lark custom-bot card (optionally signed).
//
// A Notifier takes alerts (Notify) and posts each to every configured webhook from one
// sender goroutine per webhook; the webhooks can change while it runs (SetWebhooks:
// tockd's runtime configuration). A Monitor checks thresholds (backlog, lateness p95) over
// samples taken on an interval and gives its alerts to a Notifier (any Sink); its
// thresholds can change while it runs (SetThresholds: tockd's runtime configuration).
//
// Invariants:
//   - Notify never blocks: it does its bookkeeping under one mutex and hands the alert to
//     each webhook's queue with a non-blocking send. No network I/O runs under the mutex.
//   - Memory is bounded: each webhook's queue holds at most Options.QueueSize alerts; an
//     alert's text, fields and keys are cut to Options.MaxText and Options.MaxFields when
//     queued; the deduplication table holds at most Options.MaxKeys keys.
//   - At most one alert per Key and state (firing or resolved) is queued per
//     Options.DedupWindow (while the key is remembered: see MaxKeys); a change of state
//     always goes through, so a resolved alert is never hidden by its firing one.
//   - Every alert is accounted for: once Close has returned, each one given to Notify is
//     counted in Stats as Deduplicated, or, for each webhook it was given to (those of
//     the moment of the Notify), as exactly one of Sent, Failed, RateLimited or
//     Dropped. SetWebhooks loses none: a webhook it takes away still posts what was
//     queued for it.
//   - Retries are bounded (Options.Retries, with a doubling backoff capped at
//     Options.MaxRetryBackoff), and each POST by Options.Timeout.
//   - After Close returns, no goroutine started by the package is left running; a
//     Monitor's Run returns when its context ends.
//   - Logs and errors never carry a webhook's full URL (it often holds a credential in
//     its path, query or user info), only scheme://host/… (redact.go): New's errors for
//     a URL that does not parse, and a failed delivery's log, whose net/http error text
//     has every quoted URL (a redirect's too) cut to that.
package notify
