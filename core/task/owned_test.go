package task

import (
	"bytes"
	"context"
	"testing"
)

// TestSubmitOwnedAllocs: with records reused (no retention), a task with a payload
// submitted, run and dropped allocates one object through Submit (the payload's copy)
// and none through SubmitOwned, which keeps the caller's array.
func TestSubmitOwnedAllocs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		submit func(*Engine, Task) (Info, error)
		allocs float64
	}{
		{"Submit", (*Engine).Submit, 1},
		{"SubmitOwned", (*Engine).SubmitOwned, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRealEngine(t, WithWorkers(1), WithRetention(-1))
			done := make(chan struct{}, 1)
			e.Register("x", func(context.Context, *Run) error { done <- struct{}{}; return nil })
			task := Task{ID: "t", Type: "x", Schedule: After(0), Payload: []byte("0123456789abcdef01234567")}
			run := func() {
				if _, err := tc.submit(e, task); err != nil {
					t.Fatal(err)
				}
				<-done
				waitRemoved(e, "t")
			}
			run() // warm: the record pool, the queue
			if n := testing.AllocsPerRun(200, run); n != tc.allocs {
				t.Errorf("submit + run + drop with a %d-byte payload: %v allocs; want %v", len(task.Payload), n, tc.allocs)
			}
		})
	}
}

// TestSubmitOwnedAliasing: Submit keeps a copy of the payload, so writing the caller's
// buffer afterwards changes nothing the engine holds; SubmitOwned keeps the caller's
// array itself (what it documents: the caller hands it over).
func TestSubmitOwnedAliasing(t *testing.T) {
	e := newRealEngine(t)
	buf := []byte("payload")
	if _, err := e.Submit(Task{ID: "copied", Type: "x", Schedule: After(1 << 40), Payload: buf}); err != nil {
		t.Fatal(err)
	}
	copy(buf, "PAYLOAD")
	in, err := e.Get(DefaultNamespace, "copied")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in.Task.Payload, []byte("payload")) || &in.Task.Payload[0] == &buf[0] {
		t.Errorf("Submit: the engine holds %q at %p, the caller's buffer is at %p: want its own copy of %q",
			in.Task.Payload, &in.Task.Payload[0], &buf[0], "payload")
	}
	owned := []byte("owned")
	if _, err := e.SubmitOwned(Task{ID: "owned", Type: "x", Schedule: After(1 << 40), Payload: owned}); err != nil {
		t.Fatal(err)
	}
	if in, err = e.Get(DefaultNamespace, "owned"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in.Task.Payload, []byte("owned")) || &in.Task.Payload[0] != &owned[0] {
		t.Errorf("SubmitOwned: the engine holds %q at %p, want the caller's array %p", in.Task.Payload, &in.Task.Payload[0], &owned[0])
	}
}
