package store

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// processCPU is this process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// taskBody is a record body of about a wire task's size (tockd records the SUBMIT
// encoding: names, type, schedule, retry policy, payload), with what varies between
// the tasks of one batch varying.
func taskBody(i int) []byte {
	return fmt.Appendf(nil, "\x8b\xa2id\xaelg-%08d\xa4type\xa4load\xa7payload\xc4\x20%032d\xa8schedule\x82\xa4kind\x02\xa2at\xcf%016x"+
		"\xa5retry\x84\xa3max\x03\xa7initial\xce\x05\xf5\xe1\x00\xa3cap\xce\x3b\x9a\xca\x00\xa4mult\xcb\x40\x00\x00\x00\x00\x00\x00\x00"+
		"\xa3ttr\xce\x3b\x9a\xca\x00\xaadurability\xa7durable", i, i*7919, 1_800_000_000_000_000_000+i)
}

// BenchmarkPackWriteAndEnd: the etcd side of a batch of durable tasks through its
// pack, written (PutPackFenced) and ended at once (one final MarkDoneFenced: both keys
// deleted), against the embedded etcd in this process, its records plain or compressed.
// cpu-ns/task is the whole process's CPU (the etcd server's and its client's) a task.
func BenchmarkPackWriteAndEnd(b *testing.B) {
	for _, compress := range []bool{false, true} {
		b.Run(fmt.Sprintf("compress=%v/tasks=500", compress), func(b *testing.B) {
			old := packCompress
			packCompress = compress
			defer func() { packCompress = old }()
			s := openEmbedded(b, Options{})
			l, err := s.Election().Campaign(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			f := l.Fence()
			const n = 500
			recs := make([]Record, n)
			for i := range recs {
				recs[i] = Record{Namespace: "default", ID: fmt.Sprintf("lg-%08d", i), Version: 1, Body: taskBody(i)}
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for i := range b.N {
				refs, _, err := s.Records().PutPackFenced(b.Context(), f, fmt.Sprint("b", i), recs)
				if err != nil {
					b.Fatal(err)
				}
				d := NewPackDone(refs[0].ID, n)
				for j := range n {
					d.Set(j)
				}
				if err := s.Records().MarkDoneFenced(b.Context(), f, []PackDone{d}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			tasks := float64(b.N * n)
			b.ReportMetric(float64(processCPU(b)-cpu0)/tasks, "cpu-ns/task")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/tasks, "ns/task")
		})
	}
}
