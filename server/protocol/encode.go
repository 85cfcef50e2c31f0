package protocol

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Frame size limits.
const (
	// DefaultMaxFrame is the default maximum body length of a frame: 1 MiB, the engine's
	// default maximum payload, so that a task with the largest payload the engine accepts
	// by default fits with room for its other fields only if the server raises this by a
	// little; servers that raise MaxPayload raise MaxFrame with it.
	DefaultMaxFrame = 1 << 20
	// MaxFrameLimit is the largest maximum a peer may announce (64 MiB): a length prefix
	// is a uint32, but no sane message is this large, and a decoder must be able to hold
	// a whole frame.
	MaxFrameLimit = 64 << 20
	// headerLen is the length prefix: a big-endian uint32, the body's length.
	headerLen = 4
)

// frameWriter appends to buf; it is the msgpack.Encoder's writer, and it cannot fail.
type frameWriter struct{ buf []byte }

func (w *frameWriter) Write(p []byte) (int, error) { w.buf = append(w.buf, p...); return len(p), nil }
func (w *frameWriter) WriteByte(c byte) error      { w.buf = append(w.buf, c); return nil }

// enc is a pooled msgpack encoder writing into a frameWriter. The encoder's methods
// return errors only when the writer fails, and frameWriter never does, so enc drops
// them.
type enc struct {
	w   frameWriter
	e   *msgpack.Encoder
	err *Error // the first field that could not be encoded
}

// fail records that field could not be encoded; AppendFrame returns the first such error.
func (c *enc) fail(field, msg string) {
	if c.err == nil {
		c.err = newError(CodeBadField, field, msg)
	}
}

var encPool = sync.Pool{New: func() any {
	c := &enc{}
	c.e = msgpack.NewEncoder(&c.w)
	return c
}}

func (c *enc) mapLen(n int)        { _ = c.e.EncodeMapLen(n) }
func (c *enc) arrayLen(n int)      { _ = c.e.EncodeArrayLen(n) }
func (c *enc) str(s string)        { _ = c.e.EncodeString(s) }
func (c *enc) uint(v uint64)       { _ = c.e.EncodeUint(v) }
func (c *enc) int(v int64)         { _ = c.e.EncodeInt(v) }
func (c *enc) float(v float64)     { _ = c.e.EncodeFloat64(v) }
func (c *enc) bool(v bool)         { _ = c.e.EncodeBool(v) }
func (c *enc) dur(v time.Duration) { _ = c.e.EncodeInt(int64(v)) }
func (c *enc) bin(v []byte) {
	_ = c.e.EncodeBytesLen(len(v))
	c.w.buf = append(c.w.buf, v...)
}

// Key-value helpers: the key, then the value.
func (c *enc) kStr(k, v string)         { c.str(k); c.str(v) }
func (c *enc) kUint(k string, v uint64) { c.str(k); c.uint(v) }
func (c *enc) kInt(k string, v int64)   { c.str(k); c.int(v) }

// envelope writes the map header of a top-level message with n fields besides "t" and
// "id", then "t" and "id". "t" always comes first: a decoder reads it without a second
// pass (decoders must still accept it anywhere).
func (c *enc) envelope(t Type, id uint64, n int) {
	c.mapLen(n + 2)
	c.kUint("t", uint64(t))
	c.kUint("id", id)
}

// count returns how many of the conditions are true: the number of optional fields a
// map will carry.
func count(conds ...bool) int {
	n := 0
	for _, c := range conds {
		if c {
			n++
		}
	}
	return n
}

// AppendFrame appends msg as one frame (length prefix and msgpack body) to dst and
// returns the extended slice. maxFrame is the receiver's maximum body length (0 means
// DefaultMaxFrame): a larger body is not appended, and the error is an *Error with
// CodeFrameTooLarge, since sending it would get the connection closed. A message whose
// fields cannot be represented (an enum holding no named value) is an *Error with
// CodeBadField. AppendFrame does no I/O. Cost: O(size of msg); it allocates only when
// dst must grow (a FIRE frame into a reused buffer: 0 allocations, BenchmarkEncodeFire).
func AppendFrame(dst []byte, msg Message, maxFrame int) ([]byte, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	c := encPool.Get().(*enc)
	start := len(dst)
	c.w.buf = append(dst, 0, 0, 0, 0)
	msg.encode(c)
	out, err := c.w.buf, c.err
	c.w.buf, c.err = nil, nil
	encPool.Put(c)
	if err != nil {
		err.ID = msg.RequestID()
		err.Message = "cannot encode " + msg.Type().String() + ": " + err.Message
		return dst[:start], err
	}
	n := len(out) - start - headerLen
	if n > maxFrame {
		return dst[:start], &Error{ID: msg.RequestID(), Code: CodeFrameTooLarge,
			Message: fmt.Sprintf("%v body of %d bytes exceeds the maximum frame size %d", msg.Type(), n, maxFrame)}
	}
	binary.BigEndian.PutUint32(out[start:], uint32(n))
	return out, nil
}

// sortedKeys returns m's keys in order, so that a message always encodes to the same bytes.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
