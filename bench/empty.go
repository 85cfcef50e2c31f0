package bench

import "time"

// Empty holds no timers: the baseline of ForcedGC.
type Empty struct{ base time.Time }

// NewEmpty returns an Empty.
func NewEmpty() Timers { return &Empty{} }

func (e *Empty) Init(int, func(int, int64)) error  { e.base = time.Now(); return nil }
func (e *Empty) Schedule(int, time.Duration) error { return nil }
func (e *Empty) At(int, int64) error               { return nil }
func (e *Empty) Cancel(int) bool                   { return true }
func (e *Empty) Reset(int, time.Duration) bool     { return true }
func (e *Empty) Now() int64                        { return int64(time.Since(e.base)) }
func (e *Empty) Close()                            {}
