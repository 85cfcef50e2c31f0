package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

// consoleEnv is a real tockd (tockdtest, on loopback) with an admin port serving its
// console, and a browser-like HTTP client: a cookie jar, redirects not followed (the
// tests look at each 303).
type consoleEnv struct {
	srv  *tockdtest.Server
	adm  *Server
	base string
	http *http.Client
	// heal makes the "bad" type's handler succeed from now on (a requeued dead letter
	// then runs to SUCCEEDED).
	heal atomic.Bool
}

// startConsole starts a tockd and an admin port with its console; opts' Snapshot and
// Console are set here.
func startConsole(t *testing.T, opts Options) *consoleEnv {
	t.Helper()
	env := &consoleEnv{srv: tockdtest.Start(t)}
	opts.Snapshot, opts.Console = env.srv.Stats, env.srv
	env.adm, env.base = start(t, opts)
	env.http = browserClient(t)
	env.register(t)
	return env
}

// browserClient is an HTTP client with a cookie jar of its own that does not follow
// redirects, and makes one request per connection (no idle connection outlives a test).
func browserClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: tockdtest.Limit,
		Transport:     &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// The fixture's task types: each ends its tasks in one state.
const (
	typeOK    = "mail.send"   // succeeds
	typeBad   = "report.<b>"  // fails for good (DEAD) until healed; a name that needs escaping
	typeFlaky = "sync.flaky"  // fails, retried an hour later: FAILED
	typeBlock = "video.block" // runs until the test ends: RUNNING
	typeWork  = "remote.work" // no handler here: FIREd at a worker
)

// hostileErr is the "bad" type's error: markup that must reach the page escaped.
const hostileErr = `boom: <script>alert("x")</script> & more`

func (env *consoleEnv) register(t *testing.T) {
	t.Helper()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // registered after the server's: runs before its Stop
	e := env.srv.Engine()
	for typ, h := range map[string]task.Handler{
		typeOK: func(context.Context, *task.Run) error { return nil },
		typeBad: func(context.Context, *task.Run) error {
			if env.heal.Load() {
				return nil
			}
			return task.NonRetryable(errors.New(hostileErr))
		},
		typeFlaky: func(context.Context, *task.Run) error { return errors.New("upstream 503") },
		typeBlock: func(ctx context.Context, _ *task.Run) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		},
	} {
		if err := e.Register(typ, h); err != nil {
			t.Fatal(err)
		}
	}
}

// submit submits tk to the engine; an error fails the test.
func (env *consoleEnv) submit(t *testing.T, tk task.Task) {
	t.Helper()
	if _, err := env.srv.Engine().Submit(tk); err != nil {
		t.Fatalf("Submit %s: %v", tk.ID, err)
	}
}

// waitState waits until task id (default namespace) is in state want.
func (env *consoleEnv) waitState(t *testing.T, id string, want task.State) {
	t.Helper()
	tockdtest.Eventually(t, fmt.Sprintf("task %s %v", id, want), func() bool {
		in, err := env.srv.Engine().Get("", id)
		return err == nil && in.State == want
	})
}

// populate puts tasks in every state: n succeeded ones (ok-00 ...), two dead ones, one
// failed and awaiting its retry, one pending far ahead, one cancelled; with blocking, two
// running, which fill the engine's pool (tockdtest.DefaultWorkers, 2), and one due
// behind them.
func (env *consoleEnv) populate(t *testing.T, n int, blocking bool) {
	t.Helper()
	now := task.After(0)
	for i := range n {
		env.submit(t, task.Task{ID: fmt.Sprintf("ok-%02d", i), Type: typeOK, Schedule: now, Payload: []byte(`{"to":"ops@example.com"}`)})
	}
	env.submit(t, task.Task{ID: "dead-1", Type: typeBad, Schedule: now, Payload: []byte{0xff, 0x00, 0x01}})
	env.submit(t, task.Task{ID: `dead-<i>"2"`, Type: typeBad, Schedule: now})
	env.submit(t, task.Task{ID: "flaky-1", Type: typeFlaky, Schedule: now,
		Retry: task.RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Hour, MaxBackoff: time.Hour}})
	env.submit(t, task.Task{ID: "later-1", Type: typeOK, Schedule: task.Every(time.Hour)})
	env.submit(t, task.Task{ID: "cancel-1", Type: typeOK, Schedule: task.After(time.Hour)})
	if err := env.srv.Engine().Cancel("", "cancel-1"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		env.waitState(t, fmt.Sprintf("ok-%02d", i), task.Succeeded)
	}
	env.waitState(t, "dead-1", task.Dead)
	env.waitState(t, `dead-<i>"2"`, task.Dead)
	env.waitState(t, "flaky-1", task.Failed)
	if blocking {
		env.submit(t, task.Task{ID: "block-1", Type: typeBlock, Schedule: now})
		env.submit(t, task.Task{ID: "block-2", Type: typeBlock, Schedule: now})
		env.waitState(t, "block-1", task.Running)
		env.waitState(t, "block-2", task.Running)
		env.submit(t, task.Task{ID: "due-1", Type: typeOK, Schedule: now})
		env.waitState(t, "due-1", task.Due)
	}
}

// workerWithRun subscribes a raw worker connection named name to typeWork with credits,
// then submits remote-1 of that type and takes its FIRE: the worker holds credits-1
// credits and one run in flight, which stays RUNNING.
func (env *consoleEnv) workerWithRun(t *testing.T, name string, credits uint64) {
	t.Helper()
	w := tockdtest.Dial(t, env.srv.Addr, tockdtest.Role(protocol.RoleWorker), tockdtest.Name(name))
	if r := w.Call(&protocol.Subscribe{ID: 2, Types: []string{typeWork}, Credits: credits}); r.Type() != protocol.TypeOK {
		t.Fatalf("SUBSCRIBE: %v %+v", r.Type(), r)
	}
	env.submit(t, task.Task{ID: "remote-1", Type: typeWork, Schedule: task.After(0)})
	if _, ok := w.Recv().(*protocol.Fire); !ok {
		t.Fatal("the worker got no FIRE")
	}
}
