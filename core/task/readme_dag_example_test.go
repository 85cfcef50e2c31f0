package task_test

import (
	"time"

	"github.com/tock-sched/tock/core/task"
)

// The README's workflow snippet, compiled here (TestReadmeGoBlocks checks that README.md
// shows exactly the lines between the markers).
func Example_readmeDAG() {
	e, err := task.New()
	// README.md begin
	_, err = e.SubmitBatch([]task.Task{ // a diamond: accepted or refused as a whole, in any order
		{ID: "load", Type: "etl", Schedule: task.After(time.Minute), // a minute after both have ended
			DependsOn: &task.Deps{On: []string{"clean", "enrich"}, OnParentFailure: task.ParentRunAnyway}},
		{ID: "clean", Type: "etl", Schedule: task.After(0), DependsOn: &task.Deps{On: []string{"extract"}}},
		{ID: "enrich", Type: "etl", Schedule: task.After(0), DependsOn: &task.Deps{On: []string{"extract"}}},
		{ID: "extract", Type: "etl", Schedule: task.After(0)},
	})
	// README.md end
	_ = err
}
