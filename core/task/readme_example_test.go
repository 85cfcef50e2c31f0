package task_test

import (
	"context"
	"time"

	"github.com/tock-sched/tock/core/task"
)

// The README's "Embedding the task engine" snippet, compiled here (TestReadmeGoBlocks
// checks that README.md shows exactly the lines between the markers).
func Example_readme() {
	build := func(context.Context, []byte) error { return nil }
	berlin, _ := time.LoadLocation("Europe/Berlin")
	// README.md begin
	e, err := task.New() // in-process; no network, no storage
	e.Register("report:daily", func(ctx context.Context, run *task.Run) error {
		return build(ctx, run.Task.Payload) // an error is retried per the task's policy
	})
	_, err = e.Submit(task.Task{
		ID: "report", Type: "report:daily",
		Schedule: task.Cron("0 0 2 * * *", berlin), // at / after / every / cron with seconds
		Retry:    task.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, Jitter: 0.2},
		Timeout:  time.Minute, // a context deadline, enforced even if ignored
		// at most 2 runs at once of tasks naming this key; more wait, using no attempt
		Concurrency: &task.Concurrency{Key: "warehouse-db", Limit: 2},
	})
	err = e.SetRateLimit("report:daily", 50, 10) // at most 50 runs a second, 10 at once
	// README.md end
	_ = err
}
