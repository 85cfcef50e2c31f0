package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
	"github.com/tock-sched/tock/server/tockd"
	"github.com/tock-sched/tock/server/tockd/tockdtest"
)

func TestOptionsValidateNamesField(t *testing.T) {
	for _, tc := range []struct {
		opt   Option
		field string
	}{
		{WithMaxFrame(10), "MaxFrame"},
		{WithDialTimeout(-1), "DialTimeout"},
		{WithReconnectBackoff(time.Second, time.Millisecond), "ReconnectMax"},
		{WithConcurrency(-1), "Concurrency"},
		{WithBatchFires(protocol.MaxFiresRuns + 1), "BatchFires"},
		{WithOwnerRetries(maxRedirects + 1), "OwnerRetries"},
		{WithClientName(strings.Repeat("x", 200)), "ClientName"},
	} {
		_, err := Dial(bounded(t), "127.0.0.1:1", tc.opt)
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("want ErrInvalidOption naming %s, got %v", tc.field, err)
		}
	}
}

func TestBackoffDoublesToMax(t *testing.T) {
	o := Options{ReconnectInitial: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}
	for n, want := range []time.Duration{10, 10, 20, 40, 50, 50} {
		if n == 0 {
			continue
		}
		if got := o.backoff(n); got != want*time.Millisecond {
			t.Errorf("backoff(%d) = %v, want %v", n, got, want*time.Millisecond)
		}
	}
}

func TestHandshakeAndToken(t *testing.T) {
	s := tockdtest.Start(t, tockdtest.Options(tockd.Options{Token: "s3cret", MaxFrame: 4096}))
	c := dialT(t, s.Addr, WithToken("s3cret"), WithClientName("hs"))
	w := c.Welcome()
	if w.Node != "node-test" || w.MaxFrame != 4096 || w.Version != protocol.Version {
		t.Errorf("Welcome = %+v", w)
	}
	if err := c.Ping(bounded(t)); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "wrong"} {
		_, err := Dial(bounded(t), s.Addr, WithToken(tok))
		var pe *protocol.Error
		if !errors.Is(err, protocol.ErrUnauthorized) || !errors.As(err, &pe) {
			t.Errorf("token %q: want UNAUTHORIZED *protocol.Error, got %v", tok, err)
		}
	}
	// The server's max_frame above ours is refused: we must accept what it may send.
	if _, err := Dial(bounded(t), s.Addr, WithToken("s3cret"), WithMaxFrame(2048)); !errors.Is(err, ErrHandshake) {
		t.Errorf("want ErrHandshake, got %v", err)
	}
	// A frame above the server's max_frame is refused before it is sent.
	big := oneShot("big", "t", time.Hour)
	big.Payload = make([]byte, 8192)
	if _, err := c.Submit(bounded(t), big, protocol.Ephemeral); !errors.Is(err, protocol.ErrFrameTooLarge) {
		t.Errorf("want FRAME_TOO_LARGE, got %v", err)
	}
	if err := c.Ping(bounded(t)); err != nil {
		t.Errorf("connection unusable after a refused frame: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	ctx := bounded(t)

	st, err := c.Submit(ctx, oneShot("a", "t", time.Hour), protocol.Ephemeral)
	if err != nil || st.TaskID != "a" || st.State != task.Pending || st.Durability != protocol.Ephemeral || st.NextRun == 0 {
		t.Fatalf("Submit = %+v, %v", st, err)
	}
	_, err = c.Submit(ctx, oneShot("a", "t", time.Hour), protocol.Ephemeral)
	var pe *protocol.Error
	if !errors.Is(err, protocol.ErrExists) || !errors.As(err, &pe) || pe.Code != protocol.CodeExists {
		t.Errorf("resubmit: want EXISTS, got %v", err)
	}
	_, err = c.Submit(ctx, oneShot("d", "t", time.Hour), protocol.Durable)
	if !errors.As(err, &pe) || pe.Field != "task.durability" {
		t.Errorf("durable: want an error naming task.durability, got %v", err)
	}
	in, err := c.Get(ctx, "", "a")
	if err != nil || in.Task.ID != "a" || in.Task.Type != "t" || in.State != task.Pending {
		t.Fatalf("Get = %+v, %v", in, err)
	}
	if _, err := c.Get(ctx, "", "nope"); !errors.Is(err, protocol.ErrNotFound) {
		t.Errorf("Get unknown: want NOT_FOUND, got %v", err)
	}

	items, err := c.SubmitBatch(ctx, []task.Task{oneShot("b", "t", time.Hour),
		{ID: "bad", Type: "t", Schedule: task.Every(time.Microsecond)}, oneShot("c", "t", time.Hour)}, protocol.Ephemeral)
	if err != nil || len(items) != 3 {
		t.Fatalf("SubmitBatch = %+v, %v", items, err)
	}
	if items[0].Err != nil || items[0].Status.TaskID != "b" || items[2].Err != nil || items[2].Status.State != task.Pending {
		t.Errorf("batch successes: %+v", items)
	}
	if !errors.Is(items[1].Err, protocol.ErrInvalidTask) {
		t.Errorf("batch item 1: want INVALID_TASK, got %v", items[1].Err)
	}

	page, next, err := c.List(ctx, 0, "", 2)
	if err != nil || len(page) != 2 || page[0].Task.ID != "a" || page[1].Task.ID != "b" || next == "" {
		t.Fatalf("List page 1 = %d items, next %q, %v", len(page), next, err)
	}
	page, next, err = c.List(ctx, 0, next, 2)
	if err != nil || len(page) != 1 || page[0].Task.ID != "c" || next != "" {
		t.Fatalf("List page 2 = %d items, next %q, %v", len(page), next, err)
	}

	st, err = c.Cancel(ctx, "", "a")
	if err != nil || st.State != task.Cancelled {
		t.Fatalf("Cancel = %+v, %v", st, err)
	}
	if in, _ := c.Get(ctx, "", "a"); in.State != task.Cancelled {
		t.Errorf("after Cancel, state %v", in.State)
	}
	if page, _, err := c.List(ctx, task.Cancelled, "", 0); err != nil || len(page) != 1 {
		t.Errorf("List CANCELLED = %d, %v", len(page), err)
	}

	if dls, next, err := c.DeadLetters(ctx, "", 0); err != nil || len(dls) != 0 || next != "" {
		t.Errorf("DeadLetters = %v, %q, %v", dls, next, err)
	}
	if n, err := c.PurgeAll(ctx); err != nil || n != 0 {
		t.Errorf("PurgeAll = %d, %v", n, err)
	}
	if _, err := c.Requeue(ctx, "", "nope"); !errors.Is(err, protocol.ErrNotFound) {
		t.Errorf("Requeue unknown: %v", err)
	}
	stats, err := c.Stats(ctx)
	if err != nil || stats.Counters["submitted"] != 3 || stats.Gauges["connections"] != 1 {
		t.Errorf("Stats = %+v, %v", stats, err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Error(err)
	}
}

func TestPipeliningManyGoroutines(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("g%d-%d", g, i)
				st, err := c.Submit(bounded(t), oneShot(id, "t", time.Hour), protocol.Ephemeral)
				if err != nil || st.TaskID != id {
					errs <- fmt.Errorf("submit %s: got %+v, %v", id, st, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	stats, err := c.Stats(bounded(t))
	if err != nil || stats.Gauges["tasks"] != goroutines*each {
		t.Errorf("tasks gauge = %d, %v; want %d", stats.Gauges["tasks"], err, goroutines*each)
	}
}

func TestCancelWaitingCallDiscardsLateReply(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	c := dialT(t, f.ln.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Ping(ctx) }()
	first := f.next(t) // the PING is on the server: the call is waiting
	cancel()
	if err := tockdtest.Receive(t, done, "the cancelled Ping's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Ping returned %v", err)
	}
	// The late PONG is dropped; the next call gets its own reply, not that one.
	f.send(first.nc, &protocol.Pong{ID: first.m.RequestID()})
	go func() { done <- c.Ping(bounded(t)) }()
	second := f.next(t)
	if second.m.RequestID() == first.m.RequestID() {
		t.Fatalf("request ID %d reused", first.m.RequestID())
	}
	f.send(second.nc, &protocol.Pong{ID: second.m.RequestID()})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestLostConnectionFailsInFlightThenRedials(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	addr := f.ln.Addr().String()
	c := dialT(t, addr, WithReconnectBackoff(time.Millisecond, 20*time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := c.Submit(bounded(t), oneShot("x", "t", time.Hour), protocol.Ephemeral)
		done <- err
	}()
	req := f.next(t)
	if req.m.Type() != protocol.TypeSubmit {
		t.Fatalf("got %v", req.m.Type())
	}
	f.close() // the server dies with the SUBMIT in flight, and stops listening
	if err := <-done; !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("in-flight Submit: want ErrConnectionLost, got %v", err)
	}
	// With nothing listening, a call fails within its own context.
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	err := c.Ping(short)
	cancel()
	if err == nil {
		t.Fatal("Ping succeeded with no server")
	}
	// A real server comes back on the same address: the next call redials.
	tockdtest.Start(t, tockdtest.Addr(addr))
	if err := c.Ping(bounded(t)); err != nil {
		t.Fatalf("Ping after the server came back: %v", err)
	}
	if c.Welcome().Node != "node-test" {
		t.Errorf("Welcome after redial = %+v", c.Welcome())
	}
	// The SUBMIT was not resent.
	if _, err := c.Get(bounded(t), "", "x"); !errors.Is(err, protocol.ErrNotFound) {
		t.Errorf("Get x: want NOT_FOUND (no resend), got %v", err)
	}
}

func TestServerShutdownThenRestart(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr, WithReconnectBackoff(time.Millisecond, 20*time.Millisecond))
	if err := c.Ping(bounded(t)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	old := c.cur
	c.mu.Unlock()
	s.Stop()
	// old.done closes once the reader saw SHUTTING_DOWN and the close.
	tockdtest.Receive(t, old.done, "the client noticing the shutdown")
	old.mu.Lock()
	err := old.err
	old.mu.Unlock()
	if !errors.Is(err, ErrConnectionLost) || !strings.Contains(err.Error(), "SHUTTING_DOWN") {
		t.Errorf("lost connection's error = %v", err)
	}
	tockdtest.Start(t, tockdtest.Addr(s.Addr), tockdtest.Options(tockd.Options{NodeName: "node-2"}))
	if err := c.Ping(bounded(t)); err != nil {
		t.Fatalf("Ping after restart: %v", err)
	}
	if c.Welcome().Node != "node-2" {
		t.Errorf("Welcome after redial = %+v", c.Welcome())
	}
}

func TestCloseFailsWaitingCalls(t *testing.T) {
	f := startFake(t, "127.0.0.1:0")
	c, err := Dial(bounded(t), f.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Ping(bounded(t)) }()
	f.next(t)
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting Ping after Close: %v", err)
	}
	if err := c.Ping(bounded(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ping after Close: %v", err)
	}
	c.Close()
}

// Pages of tasks with large payloads end early to fit the server's max_frame, and
// paging goes on; OmitPayload brings lengths instead of payloads, in fewer pages.
func TestReadLargePayloads(t *testing.T) {
	s := tockdtest.Start(t, tockdtest.Options(tockd.Options{MaxFrame: 64 << 10}))
	c := dialT(t, s.Addr)
	ctx := bounded(t)
	const n, size = 5, 20 << 10
	for i := range n {
		tk := oneShot(fmt.Sprint("big", i), "t", time.Hour)
		tk.Payload = make([]byte, size)
		if _, err := c.Submit(ctx, tk, protocol.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
	for _, omit := range []bool{false, true} {
		var opts []ReadOption
		if omit {
			opts = append(opts, OmitPayload())
		}
		var got []protocol.Info
		pages := 0
		for cursor := ""; ; pages++ {
			items, next, err := c.List(ctx, 0, cursor, 100, opts...)
			if err != nil {
				t.Fatalf("List omit %v: %v", omit, err)
			}
			got = append(got, items...)
			if next == "" {
				break
			}
			cursor = next
		}
		if len(got) != n || omit != (pages == 0) {
			t.Fatalf("List omit %v: %d tasks in %d pages after the first; want %d, in one page only with OmitPayload", omit, len(got), pages, n)
		}
		for _, in := range got {
			if omit && (in.Task.Payload != nil || in.PayloadLen != size) || !omit && (len(in.Task.Payload) != size || in.PayloadLen != 0) {
				t.Fatalf("List omit %v: %s has %d payload bytes, payload_len %d", omit, in.Task.ID, len(in.Task.Payload), in.PayloadLen)
			}
		}
		in, err := c.Get(ctx, "", "big0", opts...)
		if err != nil || omit && in.PayloadLen != size || !omit && len(in.Task.Payload) != size {
			t.Fatalf("Get omit %v: payload %d bytes, payload_len %d, %v", omit, len(in.Task.Payload), in.PayloadLen, err)
		}
	}
}

// A task's concurrency key and limit go to the server with Submit and come back with
// Get; a key-less Concurrency is refused before anything is sent, naming the field.
func TestSubmitCarriesConcurrency(t *testing.T) {
	s := tockdtest.Start(t)
	c := dialT(t, s.Addr)
	ctx := bounded(t)
	tk := oneShot("k", "t", time.Hour)
	tk.Concurrency = &task.Concurrency{Key: "db", Limit: 2}
	if _, err := c.Submit(ctx, tk, protocol.Ephemeral); err != nil {
		t.Fatal(err)
	}
	in, err := c.Get(ctx, "", "k")
	if err != nil || in.Task.ConcurrencyKey != "db" || in.Task.ConcurrencyLimit != 2 {
		t.Fatalf("Get = %+v, %v; want concurrency key db, limit 2", in.Task, err)
	}
	tk.ID, tk.Concurrency = "nokey", &task.Concurrency{Limit: 2}
	var pe *protocol.Error
	if _, err := c.Submit(ctx, tk, protocol.Ephemeral); !errors.As(err, &pe) || pe.Field != "concurrency_key" {
		t.Errorf("a Concurrency without a key: %v; want an error naming concurrency_key", err)
	}
}
