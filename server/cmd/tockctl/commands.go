package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
)

// commands returns the command table, in the order the usage lists them.
func commands() []*command {
	return []*command{
		submitCommand(),
		{name: "cancel", args: "ID", summary: "cancel a task", check: oneID, do: doCancel},
		getCommand(),
		listCommand(),
		dagCommand(),
		{name: "dlq", summary: "work the dead-letter queue", sub: []*command{
			dlqListCommand(),
			{name: "requeue", args: "ID", summary: "run a dead letter's task again now", check: oneID, do: doRequeue},
			dlqPurgeCommand(),
		}},
		{name: "pause", args: "TYPE", summary: "stop dispatching a task type (its tasks wait)", check: oneType, do: doPause},
		{name: "resume", args: "TYPE", summary: "dispatch a paused task type again", check: oneType, do: doResume},
		configCommand(),
		{name: "stats", summary: "the server's counters and gauges", check: noArgs, do: doStats},
		{name: "leader", summary: "the node answering, its leader epoch, and whether it leads", check: noArgs, do: doLeader},
		{name: "partitions", summary: "the partition map: each node's address and the partitions it owns (stored in etcd, not yet routed)", check: noArgs, do: doPartitions},
		{name: "ping", summary: "one round trip, timed", check: noArgs, do: doPing},
	}
}

func oneID(args []string) error {
	switch {
	case len(args) == 0:
		return usagef("missing the task ID")
	case len(args) > 1:
		return usagef("one task ID expected, got %d arguments: %q", len(args), args)
	case args[0] == "":
		return usagef("the task ID is empty")
	}
	return nil
}

func oneType(args []string) error {
	switch {
	case len(args) != 1:
		return usagef("one task type expected, got %d arguments", len(args))
	case args[0] == "" || len(args[0]) > task.MaxTypeLen:
		return usagef("a task type is 1 to %d bytes", task.MaxTypeLen)
	}
	return nil
}

func doPause(ctx context.Context, e *env, args []string) error {
	if err := e.c.Pause(ctx, args[0]); err != nil {
		return err
	}
	return printTypeState(e, args[0], "paused")
}

func doResume(ctx context.Context, e *env, args []string) error {
	if err := e.c.Resume(ctx, args[0]); err != nil {
		return err
	}
	return printTypeState(e, args[0], "resumed")
}

func printTypeState(e *env, typ, state string) error {
	if e.g.json {
		return writeJSON(e.stdout, map[string]string{"type": typ, "state": state})
	}
	_, err := fmt.Fprintf(e.stdout, "%s %s\n", state, typ)
	return err
}

func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments %q", args)
	}
	return nil
}

// ---- submit

// submitFlags are submit's flags, as parsed.
type submitFlags struct {
	id, typ          string
	payload, file    string
	at, cron, tz     string
	after, every     optDuration
	fixedDelay       bool
	timeout          time.Duration
	attempts         int
	backoff, maxBack time.Duration
	durable          bool
	version          uint64
	misfire          string
	concKey          string
	concLimit        int
	dependsOn        string
	onParentFailure  string
	shards           uint
	broadcast        bool
	builtTask        task.Task // made by check
	builtDurability  protocol.Durability
}

// optDuration is a duration flag that knows whether it was given (-after 0s is a
// schedule; no -after is none).
type optDuration struct {
	d   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 90s, 5m or 1h30m", s)
	}
	o.d, o.set = d, true
	return nil
}

func submitCommand() *command {
	f := &submitFlags{}
	return &command{
		name:    "submit",
		summary: "submit a task (exactly one of -at, -after, -every, -cron)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&f.id, "id", "", "task ID, unique in its namespace (required)")
			fs.StringVar(&f.typ, "type", "", "task type: which handler or worker runs it (required)")
			fs.StringVar(&f.payload, "payload", "", "payload, as a string")
			fs.StringVar(&f.file, "payload-file", "", "read the payload from this file")
			fs.StringVar(&f.at, "at", "", "run once at this RFC3339 time (2026-05-01T09:00:00+02:00)")
			fs.Var(&f.after, "after", "run once after this delay (0s: now)")
			fs.Var(&f.every, "every", "run every interval (>= 1ms)")
			fs.BoolVar(&f.fixedDelay, "fixed-delay", false, "with -every: measure the interval from the end of the previous run")
			fs.StringVar(&f.cron, "cron", "", "run at a cron expression's times ('0 3 * * *', '@hourly')")
			fs.StringVar(&f.tz, "tz", "", "with -cron: IANA zone the expression is read in (default UTC)")
			fs.DurationVar(&f.timeout, "timeout", 0, "per-attempt timeout (default: the server's)")
			fs.IntVar(&f.attempts, "attempts", 0, "attempts in all, the first included (default 1: no retry)")
			fs.DurationVar(&f.backoff, "backoff", 0, "delay before the first retry (default 1s)")
			fs.DurationVar(&f.maxBack, "max-backoff", 0, "cap on retry delays (default max(5m, -backoff))")
			fs.BoolVar(&f.durable, "durable", false, "record the task in etcd before the reply (default: ephemeral)")
			fs.Uint64Var(&f.version, "version", 0, "replace an existing task of this ID if higher than its version")
			fs.StringVar(&f.misfire, "misfire", "once", "recurring tasks after downtime: 'once' runs once for all missed times, 'skip' runs none")
			fs.StringVar(&f.concKey, "concurrency-key", "", "at most the key's limit of runs of the tasks naming it at once (in the namespace); more wait")
			fs.IntVar(&f.concLimit, "concurrency-limit", 0, "with -concurrency-key: set the key's limit (default: leave it; 1 for a new key)")
			fs.StringVar(&f.dependsOn, "depends-on", "", "comma-separated IDs of the tasks (in the namespace) this one waits for, WAITING, until each has ended")
			fs.StringVar(&f.onParentFailure, "on-parent-failure", "", "with -depends-on: what a parent ending DEAD or CANCELLED does: 'cancel' (default) cancels this task, 'run' runs it anyway")
			fs.UintVar(&f.shards, "shards", 0, "fan each occurrence out into this many runs (2..1024), each retried on its own, spread over the workers")
			fs.BoolVar(&f.broadcast, "broadcast", false, "run each occurrence once on every worker subscribed to the type when it comes due")
		},
		check: func(args []string) error { return f.check(args) },
		do:    func(ctx context.Context, e *env, _ []string) error { return f.do(ctx, e) },
	}
}

// wireField names the flag behind a field of a wire task (as protocol.ToTask names it).
var wireField = map[string]string{
	"tid": "-id", "type": "-type", "ns": "-namespace", "payload": "-payload",
	"timeout_ns": "-timeout", "misfire": "-misfire",
	"schedule.at": "-at", "schedule.delay": "-after", "schedule.interval": "-every",
	"schedule.anchor": "-fixed-delay", "schedule.cron": "-cron", "schedule.tz": "-tz",
	"retry.max_attempts": "-attempts", "retry.initial_backoff_ns": "-backoff", "retry.max_backoff_ns": "-max-backoff",
	"concurrency_key": "-concurrency-key", "concurrency_limit": "-concurrency-limit",
	"depends_on": "-depends-on", "on_parent_failure": "-on-parent-failure",
	"shards": "-shards", "broadcast": "-broadcast",
}

// check validates submit's command line and builds the task; it reads -payload-file.
// Namespace is filled in by do, from the globals (which may follow the command's flags).
func (f *submitFlags) check(args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	switch {
	case f.id == "":
		return usagef("-id is required")
	case f.typ == "":
		return usagef("-type is required")
	case f.payload != "" && f.file != "":
		return usagef("-payload and -payload-file are exclusive")
	case f.attempts < 0:
		return usagef("-attempts %d is negative", f.attempts)
	case f.attempts <= 1 && (f.backoff != 0 || f.maxBack != 0):
		return usagef("-backoff and -max-backoff need -attempts of 2 or more")
	case f.concLimit != 0 && f.concKey == "":
		return usagef("-concurrency-limit goes with -concurrency-key")
	case f.onParentFailure != "" && f.dependsOn == "":
		return usagef("-on-parent-failure goes with -depends-on")
	}
	var kinds []string
	for _, k := range []struct {
		name string
		set  bool
	}{{"-at", f.at != ""}, {"-after", f.after.set}, {"-every", f.every.set}, {"-cron", f.cron != ""}} {
		if k.set {
			kinds = append(kinds, k.name)
		}
	}
	switch {
	case len(kinds) == 0:
		return usagef("a schedule is required: one of -at, -after, -every, -cron (-after 0s runs it now)")
	case len(kinds) > 1:
		return usagef("one schedule only: %s given", strings.Join(kinds, " and "))
	case f.fixedDelay && !f.every.set:
		return usagef("-fixed-delay goes with -every")
	case f.tz != "" && f.cron == "":
		return usagef("-tz goes with -cron")
	}
	var s task.Schedule
	switch kinds[0] {
	case "-at":
		at, err := time.Parse(time.RFC3339, f.at)
		if err != nil {
			return usagef("-at %q is not an RFC3339 time such as 2026-05-01T09:00:00Z", f.at)
		}
		s = task.At(at)
	case "-after":
		s = task.After(f.after.d)
	case "-every":
		s = task.Every(f.every.d)
		if f.fixedDelay {
			s = task.EveryAfterDone(f.every.d)
		}
	case "-cron":
		var loc *time.Location
		if f.tz != "" {
			if f.tz == "Local" {
				return usagef("-tz Local is refused: name an IANA zone such as Europe/Berlin")
			}
			l, err := time.LoadLocation(f.tz)
			if err != nil {
				return usagef("-tz %q: %v", f.tz, err)
			}
			loc = l
		}
		s = task.Cron(f.cron, loc)
	}
	var misfire task.MisfirePolicy
	if err := misfire.UnmarshalText([]byte(f.misfire)); err != nil {
		return usagef("-misfire: %v", err)
	}
	payload := []byte(f.payload)
	if f.file != "" {
		b, err := os.ReadFile(f.file)
		if err != nil {
			return usagef("-payload-file: %v", err)
		}
		payload = b
	}
	if len(payload) == 0 {
		payload = nil
	}
	t := task.Task{ID: f.id, Type: f.typ, Payload: payload, Schedule: s, Timeout: f.timeout, Misfire: misfire,
		Version: f.version, Retry: task.RetryPolicy{MaxAttempts: f.attempts, InitialBackoff: f.backoff, MaxBackoff: f.maxBack}}
	if f.concKey != "" {
		t.Concurrency = &task.Concurrency{Key: f.concKey, Limit: f.concLimit}
	}
	if f.shards > task.MaxShards {
		return usagef("-shards %d exceeds %d", f.shards, task.MaxShards)
	}
	t.Shards, t.Broadcast = uint16(f.shards), f.broadcast
	if f.dependsOn != "" {
		t.DependsOn = &task.Deps{On: strings.Split(f.dependsOn, ",")}
		if f.onParentFailure != "" {
			if err := t.DependsOn.OnParentFailure.UnmarshalText([]byte(f.onParentFailure)); err != nil {
				return usagef("-on-parent-failure: %v", err)
			}
		}
	}
	d := protocol.Ephemeral
	if f.durable {
		d = protocol.Durable
	}
	if err := validateTask(t, d); err != nil {
		return err
	}
	f.builtTask, f.builtDurability = t, d
	return nil
}

// validateTask applies the server's rules (protocol.ToTask) to t, naming the flag at
// fault. The payload's size is the server's to judge (its limit is configurable).
func validateTask(t task.Task, d protocol.Durability) error {
	w, err := protocol.FromTask(t, d)
	if err == nil {
		_, err = protocol.ToTask(&w)
	}
	if err == nil {
		return nil
	}
	if pe, ok := err.(*protocol.Error); ok {
		base, idx, _ := strings.Cut(pe.Field, "[") // depends_on[1]: -depends-on[1]
		name := wireField[base]
		switch {
		case name == "":
			name = pe.Field
		case idx != "":
			name += "[" + idx
		}
		return usagef("%s: %s", name, pe.Message)
	}
	return usagef("%v", err)
}

func (f *submitFlags) do(ctx context.Context, e *env) error {
	t := f.builtTask
	t.Namespace = e.g.namespace
	if err := validateTask(t, f.builtDurability); err != nil { // the namespace, now known
		return err
	}
	st, err := e.c.Submit(ctx, t, f.builtDurability)
	if err != nil {
		return err
	}
	return printStatus(e, "submitted", st)
}

// ---- cancel, get, requeue

func doCancel(ctx context.Context, e *env, args []string) error {
	st, err := e.c.Cancel(ctx, e.g.namespace, args[0])
	if err != nil {
		return err
	}
	return printStatus(e, "cancelled", st)
}

func doRequeue(ctx context.Context, e *env, args []string) error {
	st, err := e.c.Requeue(ctx, e.g.namespace, args[0])
	if err != nil {
		return err
	}
	return printStatus(e, "requeued", st)
}

func getCommand() *command {
	var omit omitFlag
	return &command{
		name:    "get",
		args:    "ID",
		summary: "show a task: state, schedule, attempts, history",
		flags:   omit.define,
		check:   oneID,
		do: func(ctx context.Context, e *env, args []string) error {
			in, err := e.c.Get(ctx, e.g.namespace, args[0], omit.opts()...)
			if err != nil {
				return err
			}
			if e.g.json {
				return writeJSON(e.stdout, infoJSON(in))
			}
			printInfo(e.stdout, in)
			return nil
		},
	}
}

// omitFlag is -omit-payload, of get, list and dlq list.
type omitFlag bool

func (o *omitFlag) define(fs *flag.FlagSet) {
	fs.BoolVar((*bool)(o), "omit-payload", false, "leave payloads out (their lengths are shown instead)")
}

func (o *omitFlag) opts() []client.ReadOption {
	if *o {
		return []client.ReadOption{client.OmitPayload()}
	}
	return nil
}

// ---- list

// Bounds of -limit, the page size: the protocol's maximum page (the engine may cap a page
// lower; paging still works, with more pages).
const maxPageLimit = protocol.MaxPageItems

type pageFlags struct {
	limit  int
	all    bool
	cursor string
	omit   omitFlag
}

func (p *pageFlags) define(fs *flag.FlagSet, what string) {
	p.omit.define(fs)
	fs.IntVar(&p.limit, "limit", 0, "at most this many "+what+" per page (default: the server's page size)")
	fs.BoolVar(&p.all, "all", false, "every page, not only the first")
	fs.Func("cursor", "start at this cursor (printed after a page that has more)", func(s string) error {
		c, err := decodeCursor(s)
		p.cursor = c
		return err
	})
}

// Cursors are the server's, opaque and possibly binary (they may hold a NUL byte, which
// no shell argument can carry), so tockctl shows them, in both outputs, as unpadded
// base64url, and -cursor takes them back in that form.
func encodeCursor(c string) string { return base64.RawURLEncoding.EncodeToString([]byte(c)) }

func decodeCursor(s string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) > protocol.MaxCursorLen {
		return "", fmt.Errorf("%q is not a cursor printed by tockctl", s)
	}
	return string(b), nil
}

func (p *pageFlags) check(args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	if p.limit < 0 || p.limit > maxPageLimit {
		return usagef("-limit %d outside [0, %d]", p.limit, maxPageLimit)
	}
	return nil
}

func listCommand() *command {
	var (
		p     pageFlags
		state string
		s     task.State
	)
	return &command{
		name:    "list",
		summary: "list tasks, all namespaces, in (namespace, ID) order",
		flags: func(fs *flag.FlagSet) {
			p.define(fs, "tasks")
			fs.StringVar(&state, "state", "", "only tasks in this state: WAITING PENDING DUE RUNNING SUCCEEDED FAILED DEAD CANCELLED")
		},
		check: func(args []string) error {
			if err := p.check(args); err != nil {
				return err
			}
			if state != "" {
				var err error
				if s, err = task.ParseState(state); err != nil {
					return usagef("-state %q: want one of WAITING PENDING DUE RUNNING SUCCEEDED FAILED DEAD CANCELLED", state)
				}
			}
			return nil
		},
		do: func(ctx context.Context, e *env, _ []string) error {
			return printPages(ctx, p, newTaskTable(e), func(cursor string) ([]protocol.Info, string, error) {
				return e.c.List(ctx, s, cursor, p.limit, p.omit.opts()...)
			})
		},
	}
}

// printPages prints into out the pages fetch returns from p.cursor on, once or (with
// -all) until the last page, then ends out with the cursor after the last page fetched
// ("" at the end).
func printPages[T any](ctx context.Context, p pageFlags, out *listing[T], fetch func(cursor string) ([]T, string, error)) error {
	for cursor := p.cursor; ; {
		items, next, err := fetch(cursor)
		if err != nil {
			return out.end("", err)
		}
		if err := out.page(items); err != nil || next == "" || !p.all {
			return out.end(next, err)
		}
		if err := ctx.Err(); err != nil {
			return out.end(next, err)
		}
		cursor = next
	}
}

// ---- dlq

func dlqListCommand() *command {
	var p pageFlags
	return &command{
		name:    "list",
		summary: "list dead letters, oldest first",
		flags:   func(fs *flag.FlagSet) { p.define(fs, "dead letters") },
		check:   p.check,
		do: func(ctx context.Context, e *env, _ []string) error {
			return printPages(ctx, p, newDLQTable(e), func(cursor string) ([]protocol.DeadLetter, string, error) {
				return e.c.DeadLetters(ctx, cursor, p.limit, p.omit.opts()...)
			})
		},
	}
}

func dlqPurgeCommand() *command {
	var all bool
	return &command{
		name:    "purge",
		args:    "ID | -all",
		summary: "drop one dead letter, or all of them",
		flags:   func(fs *flag.FlagSet) { fs.BoolVar(&all, "all", false, "drop every dead letter") },
		check: func(args []string) error {
			switch {
			case all && len(args) > 0:
				return usagef("give a task ID or -all, not both")
			case all:
				return nil
			}
			if len(args) == 0 {
				return usagef("missing the task ID (or -all)")
			}
			return oneID(args)
		},
		do: func(ctx context.Context, e *env, args []string) error {
			var (
				n   uint64
				err error
			)
			if all {
				n, err = e.c.PurgeAll(ctx)
			} else {
				n, err = e.c.Purge(ctx, e.g.namespace, args[0])
			}
			if err != nil {
				return err
			}
			if !all && n == 0 {
				// The server answers PURGED with count 0 for an ID not in the queue; for
				// one named ID that is a failed command.
				ns := e.g.namespace
				if ns == "" {
					ns = task.DefaultNamespace
				}
				return fmt.Errorf("no dead letter %s/%s: nothing purged", ns, args[0])
			}
			if e.g.json {
				return writeJSON(e.stdout, map[string]uint64{"purged": n})
			}
			noun := "dead letters"
			if n == 1 {
				noun = "dead letter"
			}
			_, err = fmt.Fprintf(e.stdout, "purged %d %s\n", n, noun)
			return err
		},
	}
}

// ---- stats, leader, ping

func doStats(ctx context.Context, e *env, _ []string) error {
	st, err := e.c.Stats(ctx)
	if err != nil {
		return err
	}
	if e.g.json {
		return writeJSON(e.stdout, map[string]any{"counters": st.Counters, "gauges": st.Gauges})
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "KIND\tNAME\tVALUE")
	for _, k := range slices.Sorted(maps.Keys(st.Counters)) {
		fmt.Fprintf(tw, "counter\t%s\t%d\n", k, st.Counters[k])
	}
	for _, k := range slices.Sorted(maps.Keys(st.Gauges)) {
		fmt.Fprintf(tw, "gauge\t%s\t%d\n", k, st.Gauges[k])
	}
	return tw.Flush()
}

func doLeader(ctx context.Context, e *env, _ []string) error {
	st, err := e.c.Stats(ctx)
	if err != nil {
		return err
	}
	w := e.c.Welcome()
	g, known := st.Gauges["is_leader"]
	if e.g.json {
		v := map[string]any{"addr": e.g.addr, "node": w.Node, "epoch": w.Epoch}
		if known {
			v["is_leader"] = g != 0
		}
		return writeJSON(e.stdout, v)
	}
	leads := "unknown (the server reports no is_leader gauge)"
	if known {
		leads = strconv.FormatBool(g != 0)
	}
	tw := newTable(e.stdout)
	fmt.Fprintf(tw, "addr\t%s\n", e.g.addr)
	fmt.Fprintf(tw, "node\t%s\n", w.Node)
	fmt.Fprintf(tw, "epoch\t%d\n", w.Epoch)
	fmt.Fprintf(tw, "is_leader\t%s\n", leads)
	return tw.Flush()
}

// partitionsOut is one node of doPartitions' output.
type partitionsOut struct {
	Name       string `json:"name"`
	Addr       string `json:"addr"`
	Owned      int    `json:"owned"`
	Held       int    `json:"held"` // of those owned, held under its partition lease
	Partitions []int  `json:"partitions"`
}

func doPartitions(ctx context.Context, e *env, _ []string) error {
	m, err := e.c.Partitions(ctx)
	if err != nil {
		return err
	}
	nodes := make([]partitionsOut, len(m.Nodes))
	owners := make([]string, len(m.Owners))
	// held[p]: the owner holds p (its epoch is not 0); every one without partition
	// leases (a node without etcd states no epochs).
	held := make([]bool, len(m.Owners))
	for i, n := range m.Nodes {
		nodes[i] = partitionsOut{Name: n.Name, Addr: n.Addr, Partitions: []int{}}
	}
	for p, i := range m.Owners {
		held[p] = m.Epochs == nil || m.Epochs[p] > 0
		nodes[i].Owned++
		if held[p] {
			nodes[i].Held++
		}
		nodes[i].Partitions = append(nodes[i].Partitions, p)
		owners[p] = m.Nodes[i].Name
	}
	if e.g.json {
		return writeJSON(e.stdout, map[string]any{"count": m.Count, "rev": m.Rev, "nodes": nodes, "owners": owners,
			"epochs": m.Epochs, "held": held})
	}
	tw := newTable(e.stdout)
	fmt.Fprintf(tw, "partitions\t%d\n", m.Count)
	fmt.Fprintf(tw, "rev\t%d\n", m.Rev)
	fmt.Fprintln(tw, "routing\tstored in etcd, not yet routed: the leader dispatches every task")
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(nodes) == 0 {
		_, err := fmt.Fprintln(e.stdout, "no map stored yet (or no live node known): no partition has an owner")
		return err
	}
	tw = newTable(e.stdout)
	fmt.Fprintln(tw, "\nNODE\tADDR\tOWNED\tHELD\tPARTITIONS")
	for _, n := range nodes {
		ps := make([]string, len(n.Partitions))
		for i, p := range n.Partitions {
			ps[i] = strconv.Itoa(p)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", cell(n.Name), cell(n.Addr), n.Owned, n.Held, strings.Join(ps, ","))
	}
	if err := tw.Flush(); err != nil || m.Epochs == nil {
		return err
	}
	tw = newTable(e.stdout)
	fmt.Fprintln(tw, "\nPARTITION\tOWNER\tEPOCH\tHELD")
	for p, o := range owners {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%t\n", p, cell(o), m.Epochs[p], held[p])
	}
	return tw.Flush()
}

func doPing(ctx context.Context, e *env, _ []string) error {
	start := time.Now()
	if err := e.c.Ping(ctx); err != nil {
		return err
	}
	rtt := time.Since(start)
	w := e.c.Welcome()
	if e.g.json {
		return writeJSON(e.stdout, map[string]any{"addr": e.g.addr, "node": w.Node, "rtt": rtt.String(), "rtt_ns": rtt.Nanoseconds()})
	}
	_, err := fmt.Fprintf(e.stdout, "pong from %s (node %s): time=%v\n", e.g.addr, w.Node, rtt)
	return err
}
