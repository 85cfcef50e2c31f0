package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// Display limits of the human output (-json is never shortened).
const (
	// maxCell is the widest free-text cell (an error, a reason, a payload) in a table;
	// longer text is cut with "...", so one long error does not push every column off the
	// screen.
	maxCell = 60
	// maxPayloadShown is how much of a payload get shows.
	maxPayloadShown = 200
	// flushRows is how many table rows list and dlq list hold to align them: enough for a
	// screenful of aligned output at any page size, few enough that -all over millions of
	// tasks stays in constant memory.
	flushRows = 1000
)

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// humanTime is t in RFC3339 in the local zone; "-" for none.
func humanTime(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).Local().Format(time.RFC3339)
}

// humanDuration is d in Go's notation without zero units: 1h, 1h30m, 2m5s, 250ms.
func humanDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// cell makes free text fit a table cell: one line, at most maxCell runes.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > maxCell {
		r := []rune(s)
		s = string(r[:maxCell-3]) + "..."
	}
	return s
}

// schedule describes a wire schedule: "after 5m", "every 30s (fixed delay)",
// "cron '0 3 * * *' Europe/Berlin", "at 2026-05-01T09:00:00+02:00".
func schedule(s protocol.Schedule) string {
	switch s.Kind {
	case task.KindAt:
		return "at " + humanTime(s.At)
	case task.KindAfter:
		return "after " + humanDuration(time.Duration(s.Delay))
	case task.KindEvery:
		out := "every " + humanDuration(time.Duration(s.Interval))
		if s.Anchor == task.FixedDelay {
			out += " (fixed delay)"
		}
		return out
	case task.KindCron:
		tz := s.TZ
		if tz == "" {
			tz = "UTC"
		}
		return "cron " + strconv.Quote(s.Cron) + " " + tz
	}
	return s.Kind.String()
}

func nsOf(t protocol.Task) string {
	if t.Namespace == "" {
		return task.DefaultNamespace
	}
	return t.Namespace
}

// ---- one task's status (submit, cancel, requeue)

type statusOut struct {
	Namespace  string     `json:"namespace"`
	ID         string     `json:"id"`
	State      string     `json:"state"`
	Durability string     `json:"durability"`
	NextRun    *time.Time `json:"next_run,omitempty"`
	Version    uint64     `json:"version"`
}

func timePtr(ns int64) *time.Time {
	if ns == 0 {
		return nil
	}
	t := time.Unix(0, ns)
	return &t
}

func printStatus(e *env, verb string, st protocol.TaskStatus) error {
	ns := st.Namespace
	if ns == "" {
		ns = task.DefaultNamespace
	}
	if e.g.json {
		return writeJSON(e.stdout, statusOut{Namespace: ns, ID: st.TaskID, State: st.State.String(),
			Durability: st.Durability.String(), NextRun: timePtr(st.NextRun), Version: st.Version})
	}
	fmt.Fprintf(e.stdout, "%s %s/%s\n", verb, ns, st.TaskID)
	tw := newTable(e.stdout)
	fmt.Fprintf(tw, "  state\t%s\n", st.State)
	fmt.Fprintf(tw, "  durability\t%s\n", st.Durability)
	fmt.Fprintf(tw, "  next run\t%s\n", humanTime(st.NextRun))
	fmt.Fprintf(tw, "  version\t%d\n", st.Version)
	return tw.Flush()
}

// ---- a task snapshot (get, list)

type scheduleOut struct {
	Kind     string     `json:"kind"`
	At       *time.Time `json:"at,omitempty"`
	Delay    string     `json:"delay,omitempty"`
	Interval string     `json:"interval,omitempty"`
	Anchor   string     `json:"anchor,omitempty"`
	Cron     string     `json:"cron,omitempty"`
	TZ       string     `json:"tz,omitempty"`
}

type retryOut struct {
	MaxAttempts    uint64  `json:"max_attempts,omitempty"`
	InitialBackoff string  `json:"initial_backoff,omitempty"`
	MaxBackoff     string  `json:"max_backoff,omitempty"`
	Multiplier     float64 `json:"multiplier,omitempty"`
	Jitter         float64 `json:"jitter,omitempty"`
	MaxRetry       string  `json:"max_retry,omitempty"`
}

type attemptOut struct {
	Attempt uint64     `json:"attempt"`
	Start   *time.Time `json:"start,omitempty"`
	End     *time.Time `json:"end,omitempty"`
	Err     string     `json:"err,omitempty"`
}

type taskOut struct {
	Namespace  string      `json:"namespace"`
	ID         string      `json:"id"`
	Type       string      `json:"type"`
	Payload    []byte      `json:"payload,omitempty"` // base64
	Schedule   scheduleOut `json:"schedule"`
	Retry      retryOut    `json:"retry"`
	Timeout    string      `json:"timeout,omitempty"`
	Misfire    string      `json:"misfire"`
	Version    uint64      `json:"version"`
	Durability string      `json:"durability"`
	ConcKey    string      `json:"concurrency_key,omitempty"`
	ConcLimit  uint64      `json:"concurrency_limit,omitempty"`
	DependsOn  []string    `json:"depends_on,omitempty"`
	OnParent   string      `json:"on_parent_failure,omitempty"`
	Shards     uint16      `json:"shards,omitempty"`
	Broadcast  bool        `json:"broadcast,omitempty"`
}

type infoOut struct {
	taskOut
	State     string       `json:"state"`
	Attempts  uint64       `json:"attempts"`
	Runs      uint64       `json:"runs"`
	NextRun   *time.Time   `json:"next_run,omitempty"`
	LastError string       `json:"last_error,omitempty"`
	History   []attemptOut `json:"history,omitempty"`
	cutOut
}

// cutOut is what the server left out of an item (protocol.Cut).
type cutOut struct {
	PayloadLen uint64 `json:"payload_len,omitempty"` // the payload was left out; its length
	Truncated  bool   `json:"truncated,omitempty"`   // error texts and attempts were cut to fit a frame
}

type deadLetterOut struct {
	Task     taskOut      `json:"task"`
	DiedAt   *time.Time   `json:"died_at,omitempty"`
	Reason   string       `json:"reason,omitempty"`
	Attempts []attemptOut `json:"attempts,omitempty"`
	cutOut
}

func durOrEmpty(ns int64) string {
	if ns == 0 {
		return ""
	}
	return humanDuration(time.Duration(ns))
}

func taskJSON(t protocol.Task) taskOut {
	s := t.Schedule
	so := scheduleOut{Kind: s.Kind.String(), Delay: durOrEmpty(s.Delay), Interval: durOrEmpty(s.Interval), Cron: s.Cron, TZ: s.TZ}
	switch s.Kind {
	case task.KindAt:
		at := time.Unix(0, s.At)
		so.At = &at
	case task.KindAfter:
		so.Delay = humanDuration(time.Duration(s.Delay)) // "0s" is a delay too
	case task.KindEvery:
		so.Anchor = s.Anchor.String()
	}
	r := t.Retry
	return taskOut{
		Namespace: nsOf(t), ID: t.ID, Type: t.Type, Payload: t.Payload, Schedule: so,
		Retry: retryOut{MaxAttempts: r.MaxAttempts, InitialBackoff: durOrEmpty(r.InitialBackoff), MaxBackoff: durOrEmpty(r.MaxBackoff),
			Multiplier: r.Multiplier, Jitter: r.Jitter, MaxRetry: durOrEmpty(r.MaxRetry)},
		Timeout: durOrEmpty(t.Timeout), Misfire: t.Misfire.String(), Version: t.Version, Durability: t.Durability.String(),
		ConcKey: t.ConcurrencyKey, ConcLimit: t.ConcurrencyLimit,
		DependsOn: t.Parents(), OnParent: onParent(t), Shards: t.Shards, Broadcast: t.Broadcast,
	}
}

// onParent is t's on_parent_failure, "" for a task without parents.
func onParent(t protocol.Task) string {
	if len(t.Parents()) == 0 {
		return ""
	}
	return t.DependsOn.OnParentFailure.String()
}

func attemptsJSON(as []protocol.AttemptRecord) []attemptOut {
	var out []attemptOut
	for _, a := range as {
		out = append(out, attemptOut{Attempt: a.Attempt, Start: timePtr(a.Start), End: timePtr(a.End), Err: a.Err})
	}
	return out
}

func infoJSON(in protocol.Info) infoOut {
	return infoOut{taskOut: taskJSON(in.Task), State: in.State.String(), Attempts: in.Attempts, Runs: in.Runs,
		NextRun: timePtr(in.NextRun), LastError: in.LastError, History: attemptsJSON(in.History),
		cutOut: cutOut(in.Cut)}
}

func deadLetterJSON(dl protocol.DeadLetter) deadLetterOut {
	return deadLetterOut{Task: taskJSON(dl.Task), DiedAt: timePtr(dl.DiedAt), Reason: dl.Reason, Attempts: attemptsJSON(dl.Attempts),
		cutOut: cutOut(dl.Cut)}
}

// payload shows a payload for people: quoted text when it is UTF-8, else its size; one
// the server left out (cut.PayloadLen), its size.
func payload(b []byte, cut protocol.Cut) string {
	switch {
	case cut.PayloadLen != 0:
		return fmt.Sprintf("(%d bytes, left out)", cut.PayloadLen)
	case len(b) == 0:
		return "-"
	case !utf8.Valid(b):
		return fmt.Sprintf("(%d bytes, binary)", len(b))
	case len(b) > maxPayloadShown:
		return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(string(b[:maxPayloadShown])), len(b))
	}
	return fmt.Sprintf("%s (%d bytes)", strconv.Quote(string(b)), len(b))
}

func retry(r protocol.Retry) string {
	if r.MaxAttempts <= 1 {
		return "none (1 attempt)"
	}
	p := task.RetryPolicy{MaxAttempts: int(r.MaxAttempts), InitialBackoff: time.Duration(r.InitialBackoff),
		MaxBackoff: time.Duration(r.MaxBackoff), Multiplier: r.Multiplier}.WithDefaults()
	s := fmt.Sprintf("%d attempts, backoff %s x%g up to %s", p.MaxAttempts, humanDuration(p.InitialBackoff),
		p.Multiplier, humanDuration(p.MaxBackoff))
	if r.Jitter != 0 {
		s += fmt.Sprintf(", jitter %g", r.Jitter)
	}
	return s
}

func printInfo(w io.Writer, in protocol.Info) {
	t := in.Task
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("namespace", nsOf(t))
	row("id", t.ID)
	row("type", t.Type)
	row("state", in.State.String())
	row("durability", t.Durability.String())
	row("schedule", schedule(t.Schedule))
	row("next run", humanTime(in.NextRun))
	row("attempts", strconv.FormatUint(in.Attempts, 10))
	row("runs", strconv.FormatUint(in.Runs, 10))
	row("retry", retry(t.Retry))
	timeout := "server default"
	if t.Timeout != 0 {
		timeout = humanDuration(time.Duration(t.Timeout))
	}
	row("timeout", timeout)
	if t.Schedule.Kind == task.KindEvery || t.Schedule.Kind == task.KindCron {
		row("misfire", t.Misfire.String())
	}
	row("version", strconv.FormatUint(t.Version, 10))
	if t.ConcurrencyKey != "" {
		limit := "the key's"
		if t.ConcurrencyLimit != 0 {
			limit = strconv.FormatUint(t.ConcurrencyLimit, 10)
		}
		row("concurrency", "key "+cell(t.ConcurrencyKey)+", limit "+limit)
	}
	switch {
	case t.Shards != 0:
		row("shards", strconv.Itoa(int(t.Shards)))
	case t.Broadcast:
		row("shards", "broadcast: one per subscribed worker")
	}
	if on := t.Parents(); len(on) > 0 {
		ids := make([]string, len(on))
		for i, id := range on {
			ids[i] = cell(id)
		}
		row("depends on", strings.Join(ids, ","))
		row("on parent failure", onParent(t))
	}
	row("payload", payload(t.Payload, in.Cut))
	if in.LastError != "" {
		row("last error", cell(in.LastError))
	}
	if in.Truncated {
		row("truncated", "error texts and history cut by the server to fit its frame size")
	}
	tw.Flush()
	if len(in.History) > 0 {
		fmt.Fprintln(w, "\nhistory:")
		printAttempts(w, in.History)
	}
}

func printAttempts(w io.Writer, as []protocol.AttemptRecord) {
	tw := newTable(w)
	fmt.Fprintln(tw, "ATTEMPT\tSTART\tTOOK\tERROR")
	for _, a := range as {
		took := "-"
		if a.End != 0 && a.Start != 0 {
			took = humanDuration(time.Duration(a.End - a.Start))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", a.Attempt, humanTime(a.Start), took, cell(a.Err))
	}
	tw.Flush()
}

// ---- paged tables (list, dlq list)

// pagedOut prints the pages of a listing as they come: a table flushed every flushRows
// rows, or a JSON object {"items": [...], "next": "..."} streamed
// item by item.
type pagedOut struct {
	e      *env
	tw     *tabwriter.Writer
	header string
	n      int // items written
}

func (p *pagedOut) item(row string, v any) error {
	if p.e.g.json {
		sep := ",\n"
		if p.n == 0 {
			sep = "{\"items\": [\n"
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(p.e.stdout, "%s  %s", sep, b); err != nil {
			return err
		}
	} else {
		if p.n == 0 {
			fmt.Fprintln(p.tw, p.header)
		}
		fmt.Fprintln(p.tw, row)
		if (p.n+1)%flushRows == 0 {
			if err := p.tw.Flush(); err != nil {
				return err
			}
		}
	}
	p.n++
	return nil
}

func (p *pagedOut) flush() error {
	if p.e.g.json {
		return nil
	}
	return p.tw.Flush()
}

// end closes the output after the last page fetched; a non-empty next means more pages
// exist (no -all).
func (p *pagedOut) end(next string, err error) error {
	if ferr := p.flush(); err == nil {
		err = ferr
	}
	if p.e.g.json {
		if p.n == 0 {
			fmt.Fprint(p.e.stdout, "{\"items\": [")
		} else {
			fmt.Fprint(p.e.stdout, "\n")
		}
		fmt.Fprint(p.e.stdout, "]")
		if next != "" {
			b, _ := json.Marshal(encodeCursor(next))
			fmt.Fprintf(p.e.stdout, ", \"next\": %s", b)
		}
		fmt.Fprintln(p.e.stdout, "}")
		return err
	}
	if err != nil {
		return err
	}
	switch {
	case p.n == 0:
		fmt.Fprintln(p.e.stdout, "(none)")
	case next != "":
		fmt.Fprintf(p.e.stdout, "(more: rerun with -all, or with -cursor %s)\n", encodeCursor(next))
	}
	return nil
}

// listing prints a paged listing of items of one kind: each item a table row, or a
// JSON object with -json.
type listing[T any] struct {
	pagedOut
	row     func(T) string
	jsonOut func(T) any
}

// page prints one page of items.
func (l *listing[T]) page(items []T) error {
	for _, it := range items {
		if err := l.item(l.row(it), l.jsonOut(it)); err != nil {
			return err
		}
	}
	return nil
}

func newTaskTable(e *env) *listing[protocol.Info] {
	return &listing[protocol.Info]{
		pagedOut: pagedOut{e: e, tw: newTable(e.stdout),
			header: "NAMESPACE\tID\tTYPE\tSTATE\tDURABILITY\tSCHEDULE\tNEXT RUN\tATTEMPTS\tRUNS"},
		row: func(in protocol.Info) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d", nsOf(in.Task), in.Task.ID, in.Task.Type, in.State,
				in.Task.Durability, schedule(in.Task.Schedule), humanTime(in.NextRun), in.Attempts, in.Runs)
		},
		jsonOut: func(in protocol.Info) any { return infoJSON(in) },
	}
}

func newDLQTable(e *env) *listing[protocol.DeadLetter] {
	return &listing[protocol.DeadLetter]{
		pagedOut: pagedOut{e: e, tw: newTable(e.stdout),
			header: "NAMESPACE\tID\tTYPE\tDIED AT\tATTEMPTS\tREASON"},
		row: func(dl protocol.DeadLetter) string {
			reason := cell(dl.Reason)
			if dl.Truncated {
				reason += " (cut)"
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s", nsOf(dl.Task), dl.Task.ID, dl.Task.Type, humanTime(dl.DiedAt),
				len(dl.Attempts), reason)
		},
		jsonOut: func(dl protocol.DeadLetter) any { return deadLetterJSON(dl) },
	}
}
