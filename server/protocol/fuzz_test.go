package protocol

import (
	"errors"
	"math"
	"testing"

	"github.com/tock-sched/tock/core/task"
)

// FuzzDecode feeds arbitrary bytes to the stream decoder, seeded with real frames of
// every type. It must never panic; every error is an *Error with a known code; every
// message it returns re-encodes and decodes to the same type.
func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		b, err := AppendFrame(nil, m, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 0, 0, 1, 0xc1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(1 << 16)
		d.Feed(data)
		for range 64 {
			m, err := d.Next()
			if err != nil {
				var pe *Error
				if !errors.As(err, &pe) || pe.Code == 0 || pe.Code >= numCodes {
					t.Fatalf("untyped error %T %v", err, err)
				}
				if pe.Code == CodeFrameTooLarge {
					return
				}
				continue
			}
			if m == nil {
				return
			}
			b, err := AppendFrame(nil, m, MaxFrameLimit)
			if err != nil {
				t.Fatalf("decoded %v does not re-encode: %v", m.Type(), err)
			}
			m2, err := Decode(b[headerLen:])
			if err != nil || m2.Type() != m.Type() {
				t.Fatalf("re-decode of %v: %v", m.Type(), err)
			}
			if s, ok := m.(*Submit); ok {
				_, _ = ToTask(&s.Task)
			}
		}
	})
}

// FuzzTaskValidation: a wire task built from arbitrary values converts to an engine task
// or to a typed *Error (BAD_FIELD or INVALID_TASK, naming a field), never a panic; and a
// task that converts passes the engine's own checks (Schedule.Validate,
// RetryPolicy.Validate) and converts back.
func FuzzTaskValidation(f *testing.F) {
	f.Add("default", "id", "type", uint8(2), int64(1), int64(0), int64(0), uint8(0), "", "", uint64(0), int64(0), int64(0), 0.0, 0.0, int64(0), int64(0), uint8(0), uint8(1), uint64(0))
	f.Add("ns", "cron-1", "t", uint8(4), int64(0), int64(0), int64(0), uint8(0), "0 30 2 * * *", "Europe/Berlin", uint64(5), int64(1e9), int64(6e10), 2.0, 0.25, int64(3.6e12), int64(3e10), uint8(1), uint8(2), uint64(0))
	f.Add("", "x", "y", uint8(3), int64(0), int64(0), int64(1e6), uint8(1), "", "", uint64(0), int64(0), int64(0), 0.0, 0.0, int64(0), int64(0), uint8(0), uint8(1), uint64(0))
	f.Add("", "x", "y", uint8(1), int64(math.MaxInt64), int64(0), int64(0), uint8(0), "", "", uint64(0), int64(-1), int64(0), math.NaN(), 1.5, int64(0), int64(-5), uint8(7), uint8(0), uint64(3))
	f.Add("", "x", "y", uint8(4), int64(0), int64(0), int64(0), uint8(0), "@every 1500ms", "Local", uint64(2000), int64(0), int64(0), math.Inf(1), -1.0, int64(0), int64(0), uint8(0), uint8(1), uint64(0))
	f.Fuzz(func(t *testing.T, ns, id, typ string, kind uint8, at, delay, interval int64, anchor uint8, cron, tz string,
		attempts uint64, initial, maxB int64, mult, jitter float64, maxRetry, timeout int64, misfire, dur uint8, part uint64) {
		w := Task{Namespace: ns, ID: id, Type: typ,
			Schedule: Schedule{Kind: task.Kind(kind), At: at, Delay: delay, Interval: interval, Anchor: task.Anchor(anchor), Cron: cron, TZ: tz},
			Retry:    Retry{MaxAttempts: attempts, InitialBackoff: initial, MaxBackoff: maxB, Multiplier: mult, Jitter: jitter, MaxRetry: maxRetry},
			Timeout:  timeout, Misfire: task.MisfirePolicy(misfire), Durability: Durability(dur), Partition: part}
		ct, err := ToTask(&w)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || (pe.Code != CodeBadField && pe.Code != CodeInvalidTask) || pe.Field == "" {
				t.Fatalf("untyped or unnamed error %T %v", err, err)
			}
			return
		}
		if err := ct.Schedule.Validate(); err != nil {
			t.Fatalf("accepted an invalid schedule: %v", err)
		}
		if err := ct.Retry.Validate(); err != nil {
			t.Fatalf("accepted an invalid retry policy: %v", err)
		}
		if ct.ID == "" || ct.Type == "" || ct.Timeout < 0 || ct.Timeout > task.MaxTimeout {
			t.Fatalf("accepted %+v", ct)
		}
		back, err := FromTask(ct, w.Durability)
		if err != nil {
			t.Fatalf("FromTask of an accepted task: %v", err)
		}
		if _, err := AppendFrame(nil, &Submit{Task: back}, MaxFrameLimit); err != nil {
			t.Fatalf("accepted task does not encode: %v", err)
		}
	})
}
