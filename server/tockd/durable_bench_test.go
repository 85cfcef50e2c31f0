package tockd

import (
	"testing"
	"time"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// BenchmarkDurableRecord: what a durable submit costs tockd to build its record and
// print (prepared.record: the stored form encoded, and hashed), per schedule kind.
func BenchmarkDurableRecord(b *testing.B) {
	at := durableWorkTask("bench-at")
	at.Schedule = protocol.Schedule{Kind: task.KindAt, At: time.Now().Add(time.Hour).UnixNano()}
	after := durableWorkTask("bench-after")
	for _, c := range []struct {
		kind string
		w    protocol.Task
	}{{"at", at}, {"after", after}} {
		b.Run("kind="+c.kind, func(b *testing.B) {
			w := c.w
			tk, err := protocol.ToTask(&w)
			if err != nil {
				b.Fatal(err)
			}
			p := prepared{w: &w, t: tk}
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := p.record(now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
