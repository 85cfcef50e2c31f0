package client_test

import (
	"context"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
	"github.com/tock-sched/tock/server/protocol"
)

// The README's "From Go" snippet, compiled here (TestReadmeGoBlocks in core/task checks
// that README.md shows exactly the lines between the markers). It needs a tockd to run.
func Example_readme() {
	ctx := context.Background()
	send := func([]byte) error { return nil }
	// README.md begin
	c, err := client.Dial(ctx, "127.0.0.1:7450") // pipelined, reconnects, context-aware
	st, err := c.Submit(ctx, task.Task{ID: "t1", Type: "email", Schedule: task.After(time.Second)}, protocol.Durable)

	w, _ := client.NewWorker("127.0.0.1:7450", client.WithConcurrency(8))
	w.Handle("email", func(ctx context.Context, f *client.Fire) error { return send(f.Payload) })
	err = w.Run(ctx) // ACK on nil, NACK (retried) on error
	// README.md end
	_, _, _ = c, st, err
}
