package tockd

import (
	"context"
	"errors"
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// TestCancelFinishedTask: CANCEL of a task that already SUCCEEDED or went DEAD changes
// nothing and answers TASK_STATUS with that final state (as a second CANCEL answers
// CANCELLED). UNEXPECTED is for protocol misuse; this is a well-formed request.
func TestCancelFinishedTask(t *testing.T) {
	ts := startServer(t, Options{})
	if err := ts.engine.Register("t", func(ctx context.Context, r *task.Run) error {
		if r.Task.ID == "doomed" {
			return task.NonRetryable(errors.New("no"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c := connect(t, ts.addr)
	for i, want := range map[string]task.State{"fine": task.Succeeded, "doomed": task.Dead} {
		c.call(&protocol.Submit{ID: 2, Task: wireTask(i, 0)})
		c.waitState(3, i, want)
		r := c.call(&protocol.Cancel{ID: 4, TaskRef: protocol.TaskRef{TaskID: i}})
		st, ok := r.(*protocol.TaskStatus)
		if !ok || st.State != want || st.TaskID != i {
			t.Fatalf("CANCEL of %s (%v): %v %+v, want TASK_STATUS %v", i, want, r.Type(), r, want)
		}
		c.waitState(5, i, want) // and it stays so
	}
}
