package task

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestMaxPayloadBytes: Options.MaxPayloadBytes bounds the payload bytes all records hold.
// A submit past it is ErrOverloaded and changes nothing; the bytes come back when a
// record goes (here at the end of a finished task's retention), and a new version counts
// only what it adds. verify (at cleanup) checks the counter against the records.
func TestMaxPayloadBytes(t *testing.T) {
	h := newHarness(t, WithMaxPayloadBytes(100), WithRetention(time.Minute))
	h.e.Register("ok", func(ctx context.Context, r *Run) error { return nil })
	payload := func(n int) []byte { return make([]byte, n) }
	h.submit(Task{ID: "a", Type: "ok", Payload: payload(80), Schedule: After(0)})
	h.wait(EventSucceeded, "a")
	if _, err := h.e.Submit(Task{ID: "b", Type: "ok", Payload: payload(30), Schedule: After(time.Hour)}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("30 bytes beside a retained 80 of 100: %v, want ErrOverloaded", err)
	}
	if _, err := h.e.Get("", "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused b is held: %v", err)
	}
	h.submit(Task{ID: "small", Type: "ok", Payload: payload(20), Schedule: After(time.Hour)}) // 100 of 100
	h.submit(Task{ID: "small", Type: "ok", Payload: payload(20), Schedule: After(time.Hour), Version: 1})
	h.fake.Advance(2 * time.Minute) // a's retention ends: its record and its 80 bytes go
	deadline := time.Now().Add(eventWait)
	for {
		if _, err := h.e.Get("", "a"); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a not dropped within %v of its retention's end", eventWait)
		}
		time.Sleep(time.Millisecond)
	}
	h.submit(Task{ID: "b", Type: "ok", Payload: payload(80), Schedule: After(time.Hour)})
	if err := h.e.verify(); err != nil {
		t.Fatal(err)
	}
}
