package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/client"
)

// Node is one tockd OS process started by StartTockd.
type Node struct {
	t       testing.TB
	name    string
	logPath string
	p       *proc
	addr    string // the client port, as tockd logged it; set before StartTockd returns
	admin   string // the admin port as logged; "" with -admin-addr off

	mu  sync.Mutex
	cli *client.Client // guarded by mu; dialed by IsLeader, dropped after an error
}

var nodeSeq atomic.Int64 // numbers unnamed nodes' log files

// StartTockd starts bin (see BuildTockd) as a tockd process listening on free loopback
// ports for its client port (-addr, also passed as -advertise-addr when the binary has
// that flag) and its admin port (-admin-addr), followed by args (which may override
// them: the addresses are read back from tockd's log). It returns once tockd logs that
// it listens, which with -etcd is after its store opened, within StartTimeout; it fails
// t otherwise. The node is killed when the test ends, and its log printed if the test
// failed. Readiness is read from tockd's info-level log lines, so args must not raise
// -log-level above info.
func StartTockd(t testing.TB, bin string, args ...string) *Node {
	t.Helper()
	if lvl, ok := argValue(args, "log-level"); ok && lvl != "info" && lvl != "debug" {
		t.Fatalf("clustertest: StartTockd needs -log-level info or debug (it reads readiness from the log), got %q", lvl)
	}
	name, ok := argValue(args, "node-name")
	if !ok || name == "" {
		name = fmt.Sprintf("tockd%d", nodeSeq.Add(1))
	}
	n := &Node{t: t, name: name, logPath: filepath.Join(t.TempDir(), name+".log")}
	logOnFailure(t, "tockd "+name, n.logPath)
	t.Cleanup(n.cleanup)
	advertise := hasFlag(bin, "advertise-addr")
	for attempt := 1; ; attempt++ {
		err := n.start(bin, args, advertise)
		if err == nil {
			return n
		}
		if attempt >= StartAttempts || !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("clustertest: starting tockd %s (attempt %d): %v", name, attempt, err)
		}
		t.Logf("clustertest: tockd %s lost a port race, retrying with fresh ports: %v", name, err)
	}
}

func (n *Node) start(bin string, args []string, advertise bool) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	full := []string{"-addr", addr, "-admin-addr", fmt.Sprintf("127.0.0.1:%d", ports[1])}
	if advertise {
		full = append(full, "-advertise-addr", addr)
	}
	full = append(full, args...)

	ready := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex // guards listen and admin below until ready is closed
	var listen, admin string
	watch := &lineWatch{fn: func(line []byte) {
		switch {
		case bytes.Contains(line, []byte(`msg="tockd admin port"`)):
			mu.Lock()
			admin = logField(line, "addr")
			mu.Unlock()
		case bytes.Contains(line, []byte(`msg="tockd listening"`)):
			mu.Lock()
			listen = logField(line, "addr")
			mu.Unlock()
			once.Do(func() { close(ready) })
		}
	}}
	p, err := startProc("tockd "+n.name, n.logPath, bin, full, watch)
	if err != nil {
		return err
	}
	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-p.done:
		return fmt.Errorf("%w: tockd %s: %v; its log ends:\n%s", ErrExited, n.name, exitText(p.err), tailFile(n.logPath, 2<<10))
	case <-timer.C:
		p.kill()
		return fmt.Errorf("clustertest: tockd %s did not listen within %v; its log ends:\n%s", n.name, StartTimeout, tailFile(n.logPath, 2<<10))
	}
	mu.Lock()
	n.p, n.addr, n.admin = p, listen, admin
	mu.Unlock()
	return nil
}

// logField returns the value of key=value in a log/slog text line ("" if absent).
func logField(line []byte, key string) string {
	s := string(line)
	i := strings.Index(s, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := s[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return strings.Trim(v, `"`)
}

// argValue returns the last value given to flag name in args (-name v, -name=v, and
// the same with two dashes), as the flag package would see it.
func argValue(args []string, name string) (string, bool) {
	var v string
	var found bool
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-")
		if a == args[i] {
			continue // not a flag
		}
		switch {
		case strings.HasPrefix(a, name+"="):
			v, found = strings.TrimPrefix(a, name+"="), true
		case a == name && i+1 < len(args):
			v, found = args[i+1], true
			i++
		}
	}
	return v, found
}

var flagCache sync.Map // bin+"\x00"+flag -> bool

// hasFlag reports whether bin's -h lists -flag (lets the harness pass flags that newer
// tockd builds have, such as -advertise-addr, without breaking older ones).
func hasFlag(bin, flag string) bool {
	key := bin + "\x00" + flag
	if v, ok := flagCache.Load(key); ok {
		return v.(bool)
	}
	out, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 2 by design
	has := bytes.Contains(out, []byte("-"+flag+" ")) || bytes.Contains(out, []byte("-"+flag+"\n"))
	flagCache.Store(key, has)
	return has
}

// Name is the node's -node-name (or the harness's tockdN when none was given).
func (n *Node) Name() string { return n.name }

// Addr is the client port's address.
func (n *Node) Addr() string { return n.addr }

// AdminAddr is the admin HTTP port's address ("" with -admin-addr off).
func (n *Node) AdminAddr() string { return n.admin }

// LogPath is the file holding the node's stdout and stderr.
func (n *Node) LogPath() string { return n.logPath }

// Pid is the process ID.
func (n *Node) Pid() int { return n.p.pid() }

// Exited reports whether the process has exited.
func (n *Node) Exited() bool { return n.p.exited() }

// Kill sends SIGKILL and waits for the process to exit.
func (n *Node) Kill() {
	n.p.kill()
	n.dropClient()
}

// Pause sends SIGSTOP: the process stops where it is, its sockets open and its etcd
// lease running out, until Resume. A paused node answers nothing (IsLeader times out
// after CallTimeout); the test's cleanup still kills it (SIGKILL ends a stopped process).
func (n *Node) Pause() error { return n.p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume sends SIGCONT to a paused node.
func (n *Node) Resume() error { return n.p.cmd.Process.Signal(syscall.SIGCONT) }

// Term sends SIGTERM and waits for the process to drain and exit, sending SIGKILL after
// StopTimeout (and failing the test then, since a drain that hangs is a bug). It
// returns the exit status (nil for 0).
func (n *Node) Term() error {
	n.t.Helper()
	if !n.p.term(StopTimeout) {
		n.t.Errorf("clustertest: tockd %s did not exit within %v of SIGTERM; killed", n.name, StopTimeout)
	}
	n.dropClient()
	return n.p.err
}

// Wait waits for the process to exit and returns its exit status (nil for 0); ctx
// bounds the wait.
func (n *Node) Wait(ctx context.Context) error {
	select {
	case <-n.p.done:
		return n.p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// IsLeader asks the node for its STATS gauges: whether it leads (is_leader) and its
// leader epoch. One round trip on a connection kept between calls, each bounded by
// CallTimeout and ctx; after an error the connection is dropped and the next call
// dials afresh.
func (n *Node) IsLeader(ctx context.Context) (bool, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cli == nil {
		c, err := client.Dial(ctx, n.addr)
		if err != nil {
			return false, 0, fmt.Errorf("clustertest: tockd %s: %w", n.name, err)
		}
		n.cli = c
	}
	st, err := n.cli.Stats(ctx)
	if err != nil {
		n.cli.Close()
		n.cli = nil
		return false, 0, fmt.Errorf("clustertest: tockd %s: %w", n.name, err)
	}
	return st.Gauges["is_leader"] == 1, uint64(st.Gauges["epoch"]), nil
}

func (n *Node) dropClient() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cli != nil {
		n.cli.Close()
		n.cli = nil
	}
}

func (n *Node) cleanup() {
	n.dropClient()
	if n.p != nil && !n.p.exited() {
		n.p.kill()
	}
}

// WaitLeader polls the nodes every PollInterval (all at once, skipping exited ones)
// until exactly one reports leading, and returns it. When two or more report leading in
// one poll, it asks those again at once: a handover seen mid-poll (the old leader
// stopped, then the new one started, between two answers) clears on the second asking,
// while two nodes that still both lead are a split brain and return ErrTwoLeaders. It
// returns an error wrapping ErrNoLeader when ctx ends first.
func WaitLeader(ctx context.Context, nodes ...*Node) (*Node, error) {
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	last := "no poll answered"
	for {
		leaders, summary := pollLeaders(ctx, nodes)
		last = summary
		if len(leaders) > 1 {
			again, summary2 := pollLeaders(ctx, leaders)
			if len(again) > 1 {
				return nil, fmt.Errorf("%w: %s, then again %s", ErrTwoLeaders, summary, summary2)
			}
			leaders = again
		}
		if len(leaders) == 1 {
			return leaders[0], nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w; last poll: %s", ErrNoLeader, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// pollLeaders asks every live node at once; it returns those that lead and a summary
// of every answer.
func pollLeaders(ctx context.Context, nodes []*Node) ([]*Node, string) {
	type answer struct {
		leads bool
		epoch uint64
		err   error
	}
	answers := make([]answer, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n.Exited() {
			answers[i].err = errors.New("exited")
			continue
		}
		wg.Go(func() {
			leads, epoch, err := n.IsLeader(ctx)
			answers[i] = answer{leads, epoch, err}
		})
	}
	wg.Wait()
	var leaders []*Node
	parts := make([]string, len(nodes))
	for i, a := range answers {
		switch {
		case a.err != nil:
			parts[i] = fmt.Sprintf("%s: %v", nodes[i].name, a.err)
		case a.leads:
			leaders = append(leaders, nodes[i])
			parts[i] = fmt.Sprintf("%s: leading at epoch %d", nodes[i].name, a.epoch)
		default:
			parts[i] = fmt.Sprintf("%s: following", nodes[i].name)
		}
	}
	return leaders, strings.Join(parts, "; ")
}
