// Command tockctl is the operator's command line for tockd: it submits, inspects and
// cancels tasks, works the dead-letter queue, and reads the server's counters, over the
// wire protocol (server/PROTOCOL.md) through the Go client (server/client).
//
// Usage:
//
//	tockctl [global flags] <command> [flags] [args]
//
// Examples, against a tockd on the default address:
//
//	go run ./server/cmd/tockd &
//	tockctl ping
//	tockctl submit -id report-1 -type email -payload 'hello' -after 5m
//	tockctl submit -id nightly -type backup -cron '0 3 * * *' -tz Europe/Berlin -durable
//	tockctl submit -id poll -type poll -every 30s -fixed-delay -attempts 5 -backoff 1s -max-backoff 1m
//	tockctl get report-1
//	tockctl list -state PENDING -limit 50
//	tockctl -json list -all | jq '.items[].id'
//	tockctl cancel report-1
//	tockctl submit -id load -type etl -after 0s
//	tockctl submit -id report -type etl -after 0s -depends-on load -on-parent-failure run
//	tockctl dag report
//	tockctl dag -dot report | dot -Tsvg > workflow.svg
//	tockctl submit -id reindex -type index -after 0s -shards 8 -attempts 3
//	tockctl submit -id flush -type cache -every 1h -broadcast -attempts 5
//	tockctl dlq list
//	tockctl dlq requeue report-1
//	tockctl dlq purge -all
//	tockctl stats
//	tockctl -addr 10.0.0.5:7450 -token-file ~/.tock/token leader
//	tockctl -addr 10.0.0.5:7450 partitions
//	tockctl config set rate_limit/email 100:10
//	tockctl config list
//
// Global flags come before the command, and are also accepted after it unless the command
// has a flag of the same name (submit's -timeout is the task's timeout). -addr, -token and
// -token-file default to the environment variables TOCKCTL_ADDR, TOCKCTL_TOKEN and
// TOCKCTL_TOKEN_FILE; a flag wins over the environment. The token is a secret: -token
// puts it on the command line, which every user of the host can read (ps), so prefer
// -token-file (a file holding it, one trailing newline ignored) or the environment.
//
// Invariants:
//   - Exit status 0: the command succeeded. 1: the server refused it (its error code and
//     message are written to stderr, e.g. "tockctl: NOT_FOUND: ...") or it could not be
//     reached. 2: the command line is wrong (the message and the command's usage go to
//     stderr); nothing was sent to the server.
//   - Input is validated before dialling: a task is checked with the same rules the
//     server applies (protocol.ToTask), and an error names the flag at fault; a runtime
//     setting with the server's registry (settings.Parse), the error naming the key and
//     the value.
//   - Human output goes to stdout as aligned tables, times in RFC3339 in the local zone,
//     durations in Go's notation without zero units (1h30m, 250ms). With -json stdout is
//     one JSON value per command (times RFC3339 with nanoseconds, durations in Go's
//     notation, payloads base64), meant for scripts.
//   - Every command makes one connection, closed before run returns; each request is
//     bounded by -timeout (and the dial too), so tockctl never hangs on a silent server.
//   - list -all and dlq list -all stream page by page: memory is bounded by one page
//     (-limit) plus flushRows table rows, not by the number of tasks; a table longer than
//     flushRows is aligned in blocks of flushRows rows.
//   - dag lists every task the server holds to find a task's children (the server sends
//     parents only): its work is O(tasks held) and its memory O(tasks in the namespace).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/internal/secretfile"
	"github.com/tock-sched/tock/server/protocol"
)

// Defaults of the global flags.
const (
	// DefaultAddr is where tockd listens by default (tockd.DefaultAddr).
	DefaultAddr = "127.0.0.1:7450"
	// DefaultTimeout bounds the dial and each request: a loopback or LAN round trip takes
	// well under a millisecond, so ten seconds only ever fires on a dead or wedged server.
	DefaultTimeout = 10 * time.Second
	// clientName is sent in HELLO, for the server's logs.
	clientName = "tockctl"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // the server refused, or could not be reached
	exitUsage = 2 // the command line is wrong
)

// Environment variables read for the defaults of -addr, -token and -token-file.
const (
	envAddr      = "TOCKCTL_ADDR"
	envToken     = "TOCKCTL_TOKEN"
	envTokenFile = "TOCKCTL_TOKEN_FILE"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// globals are the flags every command shares.
type globals struct {
	addr      string
	token     string
	tokenFile string // -token-file: read into token once parsed (resolveToken)
	timeout   time.Duration
	namespace string
	json      bool
}

// register adds the global flags to fs, skipping any name fs already has (a command's own
// flag of the same name wins).
func (g *globals) register(fs *flag.FlagSet) {
	def := func(name string, f func()) {
		if fs.Lookup(name) == nil {
			f()
		}
	}
	def("addr", func() { fs.StringVar(&g.addr, "addr", g.addr, "tockd address, host:port (env "+envAddr+")") })
	def("token", func() {
		fs.StringVar(&g.token, "token", g.token, "shared secret tockd requires, if any (env "+envToken+
			"); it shows in ps: prefer -token-file")
	})
	def("token-file", func() {
		fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "file holding -token, one trailing newline ignored (env "+envTokenFile+")")
	})
	def("timeout", func() { fs.DurationVar(&g.timeout, "timeout", g.timeout, "bound on the dial and on each request") })
	def("namespace", func() {
		fs.StringVar(&g.namespace, "namespace", g.namespace, "namespace of the task IDs named (default \"default\")")
	})
	def("json", func() { fs.BoolVar(&g.json, "json", g.json, "print JSON instead of tables") })
}

// resolveToken sets token from -token, -token-file or, when neither is given, their
// environment variables (read here, after parsing, never as flag defaults: a default is
// printed by -h). A token given both ways is an error, on the command line as in the
// environment, and so is a token file that cannot be read or is empty.
func (g *globals) resolveToken() error {
	if g.token != "" && g.tokenFile != "" {
		return errors.New("-token and -token-file are exclusive")
	}
	if g.token == "" && g.tokenFile == "" {
		g.token, g.tokenFile = os.Getenv(envToken), os.Getenv(envTokenFile)
		if g.token != "" && g.tokenFile != "" {
			return fmt.Errorf("%s and %s are both set (-token and -token-file are exclusive)", envToken, envTokenFile)
		}
	}
	if g.tokenFile == "" {
		return nil
	}
	v, err := secretfile.Read(g.tokenFile)
	if err != nil {
		return fmt.Errorf("-token-file: %w", err)
	}
	g.token = v
	return nil
}

// command is one subcommand: its flags are defined by flags, and do runs it once the
// command line has been parsed (args are the positional arguments).
type command struct {
	name    string
	args    string // the positional arguments, for the usage line
	summary string
	flags   func(fs *flag.FlagSet) // defines the command's own flags; nil for none
	// check validates the parsed command line, before any dial; a non-nil error is a
	// usage error.
	check func(args []string) error
	do    func(ctx context.Context, e *env, args []string) error
	sub   []*command // for "dlq": its subcommands (then do is nil)
}

// env is what a running command has: the globals, the output, and a connected client.
type env struct {
	g      globals
	stdout io.Writer
	c      *client.Client
}

// usageError is a wrong command line: exit 2, with the command's usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run executes one tockctl command line and returns the exit status. It writes only to
// stdout and stderr, and reads the environment only for the defaults of -addr, -token and
// -token-file.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := globals{addr: DefaultAddr, timeout: DefaultTimeout}
	if v := os.Getenv(envAddr); v != "" {
		g.addr = v
	}
	cmds := commands()

	fs := flag.NewFlagSet("tockctl", flag.ContinueOnError)
	g.register(fs)
	fs.Usage = func() {}
	var parseOut strings.Builder
	fs.SetOutput(&parseOut)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			mainUsage(stdout, fs, cmds)
			return exitOK
		}
		fmt.Fprintf(stderr, "tockctl: %v\n", err)
		mainUsage(stderr, fs, cmds)
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprintln(stderr, "tockctl: no command given")
		mainUsage(stderr, fs, cmds)
		return exitUsage
	}
	if rest[0] == "help" {
		return help(stdout, stderr, fs, cmds, rest[1:])
	}
	path := []string{"tockctl"}
	cmd, rest, ok := find(cmds, rest)
	if cmd == nil {
		fmt.Fprintf(stderr, "tockctl: unknown command %q\n", rest[0])
		mainUsage(stderr, fs, cmds)
		return exitUsage
	}
	path = append(path, cmd.name)
	if !ok { // a group ("dlq") without a valid subcommand
		if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
			groupUsage(stdout, cmd)
			return exitOK
		}
		if len(rest) == 0 {
			fmt.Fprintf(stderr, "tockctl %s: no subcommand given\n", cmd.name)
		} else {
			fmt.Fprintf(stderr, "tockctl %s: unknown subcommand %q\n", cmd.name, rest[0])
		}
		groupUsage(stderr, cmd)
		return exitUsage
	}
	if cmd.sub != nil {
		var sub *command
		sub, rest, _ = find(cmd.sub, rest)
		cmd = sub
		path = append(path, cmd.name)
	}
	name := strings.Join(path, " ")

	cfs, own := newCommandFlags(name, cmd, &g)
	pos, err := parseInterspersed(cfs, rest)
	if err == nil && cmd.check != nil {
		err = cmd.check(pos)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			commandUsage(stdout, name, cmd, own)
			return exitOK
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		commandUsage(stderr, name, cmd, own)
		return exitUsage
	}
	if err := g.resolveToken(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	if g.timeout <= 0 {
		fmt.Fprintf(stderr, "%s: -timeout %v must be positive\n", name, g.timeout)
		return exitUsage
	}
	if g.addr == "" {
		fmt.Fprintf(stderr, "%s: -addr is empty (and %s is not set)\n", name, envAddr)
		return exitUsage
	}

	c, err := client.Dial(ctx, g.addr, client.WithToken(g.token), client.WithClientName(clientName),
		client.WithDialTimeout(g.timeout), client.WithRequestTimeout(g.timeout))
	if err != nil {
		fmt.Fprintf(stderr, "tockctl: %s\n", describe(err))
		return exitError
	}
	defer c.Close()
	if err := cmd.do(ctx, &env{g: g, stdout: stdout, c: c}, pos); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitUsage
		}
		fmt.Fprintf(stderr, "tockctl: %s\n", describe(err))
		return exitError
	}
	return exitOK
}

// find looks up args[0] in cmds. For a group it also requires a known subcommand:
// ok is false when it is missing or unknown. It returns the arguments after the name.
func find(cmds []*command, args []string) (cmd *command, rest []string, ok bool) {
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		rest = args[1:]
		if c.sub == nil {
			return c, rest, true
		}
		if len(rest) == 0 {
			return c, rest, false
		}
		for _, s := range c.sub {
			if s.name == rest[0] {
				return c, rest, true
			}
		}
		return c, rest, false
	}
	return nil, args, false
}

// newCommandFlags returns the flag set that parses cmd's command line (its own flags and
// the globals) and one with its own flags only, for its usage. Both are made before
// parsing, so the defaults they show are the real ones.
func newCommandFlags(name string, cmd *command, g *globals) (fs, own *flag.FlagSet) {
	fs = flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by run, with the usage
	fs.Usage = func() {}
	own = flag.NewFlagSet(name, flag.ContinueOnError)
	if cmd.flags != nil {
		cmd.flags(fs)
		cmd.flags(own)
	}
	g.register(fs)
	return fs, own
}

// parseInterspersed parses flags that may come before, between or after the positional
// arguments ("cancel ID -json"), and returns the positional ones. After "--" everything is
// positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at the first non-flag, or after "--" (which it consumes).
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// describe renders an error for stderr: a server's refusal as "CODE: message" (with the
// field, and the leader for NOT_LEADER), anything else as it is.
func describe(err error) string {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return err.Error()
	}
	s := pe.Code.String()
	if pe.Field != "" {
		s += " (field " + pe.Field + ")"
	}
	if pe.Message != "" {
		s += ": " + pe.Message
	}
	if pe.Leader != "" {
		s += " (leader: " + pe.Leader + ")"
	}
	return s
}

// help answers "tockctl help [command [subcommand]]".
func help(stdout, stderr io.Writer, gfs *flag.FlagSet, cmds []*command, args []string) int {
	if len(args) == 0 {
		mainUsage(stdout, gfs, cmds)
		return exitOK
	}
	cmd, rest, ok := find(cmds, args)
	if cmd == nil {
		fmt.Fprintf(stderr, "tockctl help: unknown command %q\n", args[0])
		mainUsage(stderr, gfs, cmds)
		return exitUsage
	}
	if cmd.sub != nil {
		if !ok {
			groupUsage(stdout, cmd)
			return exitOK
		}
		sub, _, _ := find(cmd.sub, rest)
		name := "tockctl " + cmd.name + " " + sub.name
		_, own := newCommandFlags(name, sub, &globals{})
		commandUsage(stdout, name, sub, own)
		return exitOK
	}
	name := "tockctl " + cmd.name
	_, own := newCommandFlags(name, cmd, &globals{})
	commandUsage(stdout, name, cmd, own)
	return exitOK
}

func mainUsage(w io.Writer, gfs *flag.FlagSet, cmds []*command) {
	fmt.Fprint(w, "Usage: tockctl [global flags] <command> [flags] [args]\n\nCommands:\n")
	for _, c := range cmds {
		if c.sub == nil {
			fmt.Fprintf(w, "  %-22s %s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
			continue
		}
		for _, s := range c.sub {
			fmt.Fprintf(w, "  %-22s %s\n", strings.TrimSpace(c.name+" "+s.name+" "+s.args), s.summary)
		}
	}
	fmt.Fprint(w, "  help [command]         this text, or a command's flags\n\nGlobal flags:\n")
	gfs.SetOutput(w)
	gfs.PrintDefaults()
	fmt.Fprint(w, "\nExit status: 0 done, 1 refused by the server or unreachable, 2 bad command line.\n")
}

func groupUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: tockctl %s <subcommand> [flags] [args]\n\n%s\n\nSubcommands:\n", c.name, c.summary)
	for _, s := range c.sub {
		fmt.Fprintf(w, "  %-16s %s\n", strings.TrimSpace(s.name+" "+s.args), s.summary)
	}
}

// commandUsage prints the command's synopsis and its own flags (own: not the global ones).
func commandUsage(w io.Writer, name string, c *command, own *flag.FlagSet) {
	synopsis := name + " [flags]"
	if c.args != "" {
		synopsis += " " + c.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", synopsis, c.summary)
	n := 0
	own.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		own.SetOutput(w)
		own.PrintDefaults()
	}
	fmt.Fprint(w, "\nGlobal flags (-addr, -token, -timeout, -namespace, -json) are accepted too; see tockctl help.\n")
}
