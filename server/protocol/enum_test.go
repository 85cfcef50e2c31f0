package protocol

import (
	"testing"

	"github.com/tock-sched/tock/core/task"
	"github.com/vmihailenco/msgpack/v5"
)

// TestEnumNamesAreTheEngines: the names the codec writes for a schedule's kind and
// anchor and a task's misfire policy are the ones core/task's String gives, for every
// value, and UnmarshalText reads them back, so that tockctl and logs show what the wire
// carries.
func TestEnumNamesAreTheEngines(t *testing.T) {
	type wire struct {
		Misfire  string `msgpack:"misfire"`
		Schedule struct {
			Kind   string `msgpack:"kind"`
			Anchor string `msgpack:"anchor"`
		} `msgpack:"schedule"`
	}
	check := func(w Task) wire {
		t.Helper()
		frame := mustFrame(t, &Submit{ID: 1, Task: w})
		var m struct {
			Task wire `msgpack:"task"`
		}
		if err := msgpack.Unmarshal(frame[4:], &m); err != nil {
			t.Fatal(err)
		}
		return m.Task
	}
	base := Task{ID: "t", Type: "ty", Durability: Ephemeral}
	for _, s := range []Schedule{
		{Kind: task.KindAt, At: 1}, {Kind: task.KindAfter, Delay: 1}, {Kind: task.KindCron, Cron: "* * * * *"},
		{Kind: task.KindEvery, Interval: 1e6}, {Kind: task.KindEvery, Interval: 1e6, Anchor: task.FixedDelay},
	} {
		w := base
		w.Schedule = s
		got := check(w).Schedule
		if got.Kind != s.Kind.String() {
			t.Errorf("kind %d: wire %q, String %q", s.Kind, got.Kind, s.Kind.String())
		}
		if s.Anchor != task.FixedRate && got.Anchor != s.Anchor.String() {
			t.Errorf("anchor %d: wire %q, String %q", s.Anchor, got.Anchor, s.Anchor.String())
		}
		var k task.Kind
		if err := k.UnmarshalText([]byte(got.Kind)); err != nil || k != s.Kind {
			t.Errorf("kind %q: UnmarshalText gives %v, %v", got.Kind, k, err)
		}
	}
	w := base
	w.Schedule = Schedule{Kind: task.KindAfter, Delay: 1}
	w.Misfire = task.MisfireSkip
	if got := check(w).Misfire; got != task.MisfireSkip.String() {
		t.Errorf("misfire skip: wire %q, String %q", got, task.MisfireSkip.String())
	}
}
