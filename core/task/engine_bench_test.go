package task

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkSubmitCancel measures the engine's bookkeeping without firing: each op submits
// a task an hour out and cancels it (Retention < 0 drops it at once), so the tables stay at
// a steady size instead of measuring map growth. The end-to-end rate is
// BenchmarkEngineOneShot in bench/.
func BenchmarkSubmitCancel(b *testing.B) {
	e, err := New(WithRetention(-1))
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprint("t", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Submit(Task{ID: ids[i], Type: "x", Schedule: After(time.Hour)}); err != nil {
			b.Fatal(err)
		}
		if err := e.Cancel("", ids[i]); err != nil {
			b.Fatal(err)
		}
	}
}
