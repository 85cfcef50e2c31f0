package task_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// Embedding the engine: register a handler per task type, submit tasks with a schedule
// and a retry policy, and watch them through Get (or Options.OnEvent, or Stats).
func Example() {
	e, err := task.New()
	if err != nil {
		panic(err)
	}
	defer e.Close(context.Background())

	done := make(chan struct{})
	attempts := 0
	e.Register("report:daily", func(ctx context.Context, run *task.Run) error {
		attempts++
		if attempts < 2 {
			return errors.New("database busy") // retried after the backoff
		}
		fmt.Printf("report for %s built on attempt %d\n", run.Task.Payload, run.Attempt)
		close(done)
		return nil
	})

	_, err = e.Submit(task.Task{
		ID:       "report-2026-06-01",
		Type:     "report:daily",
		Payload:  []byte("2026-06-01"),
		Schedule: task.After(10 * time.Millisecond), // or task.Cron("0 0 2 * * *", berlin), task.Every(time.Hour)
		Retry:    task.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond},
		Timeout:  time.Second,
	})
	if err != nil {
		panic(err)
	}
	<-done
	for {
		info, _ := e.Get("", "report-2026-06-01")
		if info.State.Terminal() {
			fmt.Println(info.State, "after", info.Attempts, "attempts; last error:", info.History[0].Err)
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Output:
	// report for 2026-06-01 built on attempt 2
	// SUCCEEDED after 2 attempts; last error: database busy
}
