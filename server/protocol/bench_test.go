package protocol

import (
	"testing"
	"time"
)

var benchFire = &Fire{Namespace: "default", TaskID: "order-123456", TaskType: "email", Payload: make([]byte, 64),
	RunID: 1 << 40, Attempt: 1, Due: 1_767_225_600_000_000_000, Epoch: 7, TTR: int64(30 * time.Second), Durability: Ephemeral}

var benchAck = &Ack{ID: 1 << 20, RunID: 1 << 40, Epoch: 7}

// BenchmarkEncodeFire: the server's hot path out, a FIRE into a reused buffer.
func BenchmarkEncodeFire(b *testing.B) {
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendFrame(buf[:0], benchFire, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkDecodeAck: the server's hot path in, an ACK frame through a Decoder.
func BenchmarkDecodeAck(b *testing.B) {
	frame, _ := AppendFrame(nil, benchAck, 0)
	d := NewDecoder(0)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		d.Feed(frame)
		if m, err := d.Next(); err != nil || m == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeFire: the worker's hot path in (payload copied, strings allocated).
func BenchmarkDecodeFire(b *testing.B) {
	frame, _ := AppendFrame(nil, benchFire, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := Decode(frame[headerLen:]); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHotPathAllocs pins the allocation counts the benchmarks report.
func TestHotPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race")
	}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(1000, func() { buf, _ = AppendFrame(buf[:0], benchFire, 0) }); n != 0 {
		t.Errorf("encoding FIRE: %v allocs, want 0", n)
	}
	frame, _ := AppendFrame(nil, benchAck, 0)
	d := NewDecoder(0)
	if n := testing.AllocsPerRun(1000, func() { d.Feed(frame); _, _ = d.Next() }); n != 1 {
		t.Errorf("decoding ACK: %v allocs, want 1 (the *Ack)", n)
	}
}
