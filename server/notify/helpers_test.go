package notify

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests, ignoring those that exist
// before any test runs (importing core/task starts ants's default pool at init).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// waitLimit bounds every wait on an event, generous because the tests share a loaded
// 2-core machine; a passing test never waits for it.
const waitLimit = 10 * time.Second

// receiver is a webhook on 127.0.0.1 (ephemeral port) that records each request's body
// and answers with reply(n), n counting requests from 1.
type receiver struct {
	*httptest.Server
	bodies chan []byte // every request's body, in order
}

func newReceiver(t *testing.T, reply func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{bodies: make(chan []byte, 100)}
	var mu sync.Mutex
	n := 0
	rc.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.bodies <- body
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		if reply != nil {
			reply(k, w, r)
		}
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc.Listener = l
	rc.Start()
	t.Cleanup(rc.Close)
	return rc
}

// next returns the next request's body, failing the test after waitLimit.
func (rc *receiver) next(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-rc.bodies:
		return b
	case <-time.After(waitLimit):
		t.Fatal("no request reached the receiver")
		return nil
	}
}

// fakeClock is a settable Options.Clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// mustNew builds a Notifier and closes it (draining) at the end of the test.
func mustNew(t *testing.T, o Options) *Notifier {
	t.Helper()
	n, err := New(WithOptions(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// closeDrained closes n, waiting for what is queued.
func closeDrained(t *testing.T, n *Notifier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
