package client

import (
	"context"
	"sync"
	"time"
)

// fireCtx is a handler's context: it is done when the FIRE's time to run ends or when
// the worker's connection (its parent) goes. It is made for every run, so it registers
// nothing until a handler asks for Done: context.WithTimeout would arm a timer and add a
// child to the connection's context for each run, which at tens of thousands of runs a
// second costs more than the runs (a map of children keyed by interface).
type fireCtx struct {
	parent   context.Context
	deadline time.Time

	once sync.Once
	done chan struct{} // made by Done's first call

	mu        sync.Mutex
	armed     bool  // Done was called: err is set when done closes
	err       error // guarded by mu
	stopTimer *time.Timer
	stopConn  func() bool
}

func newFireCtx(parent context.Context, deadline time.Time) *fireCtx {
	return &fireCtx{parent: parent, deadline: deadline}
}

func (c *fireCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *fireCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *fireCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.done, c.armed = make(chan struct{}), true
		if err := c.errNow(); err != nil {
			c.err = err
			close(c.done)
			return
		}
		c.stopTimer = time.AfterFunc(time.Until(c.deadline), func() { c.cancel(context.DeadlineExceeded) })
		c.stopConn = context.AfterFunc(c.parent, func() { c.cancel(c.parent.Err()) })
	})
	return c.done
}

// Err follows Done: before Done is asked for, it is computed from the parent and the
// clock; after, it is set when done closes (so it is never non-nil while Done is open).
func (c *fireCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed {
		return c.err
	}
	return c.errNow()
}

func (c *fireCtx) errNow() error {
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *fireCtx) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// release stops what Done armed, once the handler has returned.
func (c *fireCtx) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopTimer != nil {
		c.stopTimer.Stop()
		c.stopConn()
	}
}
