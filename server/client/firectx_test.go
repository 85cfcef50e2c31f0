package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

type ctxKey struct{}

func TestFireCtx(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer cancel()

	// The deadline: Err is nil until Done closes, then DeadlineExceeded.
	c := newFireCtx(parent, time.Now().Add(20*time.Millisecond))
	if d, ok := c.Deadline(); !ok || d.IsZero() || c.Value(ctxKey{}) != "v" || c.Err() != nil {
		t.Fatalf("fresh: deadline %v %v, value %v, err %v", d, ok, c.Value(ctxKey{}), c.Err())
	}
	tockdtest.Receive(t, c.Done(), "Done closed after the deadline")
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("after the deadline: %v", c.Err())
	}
	c.release()

	// The connection going: Done closes with its error.
	c = newFireCtx(parent, time.Now().Add(time.Hour))
	done := c.Done()
	if c.Err() != nil {
		t.Fatalf("armed, open: %v", c.Err())
	}
	cancel()
	tockdtest.Receive(t, done, "Done closed when the parent was cancelled")
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("after the parent: %v", c.Err())
	}
	c.release()

	// Never asked for Done: Err is computed, and release has nothing to stop.
	c = newFireCtx(context.Background(), time.Now().Add(-time.Second))
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("past deadline, unarmed: %v", c.Err())
	}
	c.release()
	// Armed after the deadline: closed at once.
	select {
	case <-c.Done():
	default:
		t.Fatal("Done of an expired context is open")
	}
}
