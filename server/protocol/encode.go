package protocol

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
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

// enc appends msgpack values to buf. It writes the encodings the msgpack library
// (github.com/vmihailenco/msgpack/v5) picks with its default options, byte for byte, so
// the wire did not change when this replaced it (TestEncMatchesLibrary compares the two
// at every width boundary): integers in the shortest form, a non-negative one always in
// the unsigned family; strings as fixstr, then str8, str16, str32; binaries as bin8, bin16,
// bin32 (bin8 even when empty); floats always as float64; map and array headers in the
// fix form below 16 entries, then the 16-bit, then the 32-bit form. Appending cannot fail.
type enc struct {
	buf []byte
	err *Error // the first field that could not be encoded
}

// fail records that field could not be encoded; AppendFrame returns the first such error.
func (c *enc) fail(field, msg string) {
	if c.err == nil {
		c.err = newError(CodeBadField, field, msg)
	}
}

// encPool recycles encoders: every message's encode method takes the *enc through an
// interface call, so one made per frame would escape to the heap.
var encPool = sync.Pool{New: func() any { return new(enc) }}

// appendLen appends the header of a value of n bytes or entries in its 16-bit form
// (code16 and 2 bytes) or, above 65535, its 32-bit form (code16+1 and 4 bytes).
func appendLen(b []byte, code16 byte, n int) []byte {
	if n <= math.MaxUint16 {
		return append(b, code16, byte(n>>8), byte(n))
	}
	return append(b, code16+1, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func (c *enc) mapLen(n int) {
	if n < 16 {
		c.buf = append(c.buf, codeFixMap|byte(n))
		return
	}
	c.buf = appendLen(c.buf, codeMap16, n)
}

func (c *enc) arrayLen(n int) {
	if n < 16 {
		c.buf = append(c.buf, codeFixArray|byte(n))
		return
	}
	c.buf = appendLen(c.buf, codeArray16, n)
}

func (c *enc) str(s string) {
	switch n := len(s); {
	case n < 32:
		c.buf = append(c.buf, codeFixStr|byte(n))
	case n <= math.MaxUint8:
		c.buf = append(c.buf, codeStr8, byte(n))
	default:
		c.buf = appendLen(c.buf, codeStr16, n)
	}
	c.buf = append(c.buf, s...)
}

func (c *enc) uint(v uint64) {
	switch {
	case v <= math.MaxInt8: // positive fixint
		c.buf = append(c.buf, byte(v))
	case v <= math.MaxUint8:
		c.buf = append(c.buf, codeUint8, byte(v))
	case v <= math.MaxUint16:
		c.buf = append(c.buf, codeUint16, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		c.buf = append(c.buf, codeUint32, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		c.buf = binary.BigEndian.AppendUint64(append(c.buf, codeUint64), v)
	}
}

func (c *enc) int(v int64) {
	switch {
	case v >= 0:
		c.uint(uint64(v))
	case v >= -32: // negative fixint
		c.buf = append(c.buf, byte(v))
	case v >= math.MinInt8:
		c.buf = append(c.buf, codeInt8, byte(v))
	case v >= math.MinInt16:
		c.buf = append(c.buf, codeInt16, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		c.buf = append(c.buf, codeInt32, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		c.buf = binary.BigEndian.AppendUint64(append(c.buf, codeInt64), uint64(v))
	}
}

func (c *enc) float(v float64) {
	c.buf = binary.BigEndian.AppendUint64(append(c.buf, codeDouble), math.Float64bits(v))
}

func (c *enc) bool(v bool) {
	if v {
		c.buf = append(c.buf, codeTrue)
	} else {
		c.buf = append(c.buf, codeFalse)
	}
}

func (c *enc) bin(v []byte) {
	if n := len(v); n <= math.MaxUint8 {
		c.buf = append(c.buf, codeBin8, byte(n))
	} else {
		c.buf = appendLen(c.buf, codeBin16, n)
	}
	c.buf = append(c.buf, v...)
}

// Key-value helpers: the key, then the value.
func (c *enc) kStr(k, v string)         { c.str(k); c.str(v) }
func (c *enc) kUint(k string, v uint64) { c.str(k); c.uint(v) }
func (c *enc) kInt(k string, v int64)   { c.str(k); c.int(v) }

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
	c.buf = append(dst, 0, 0, 0, 0)
	specOf(uint64(msg.Type())).write(msg, c)
	out, err := c.buf, c.err
	c.buf, c.err = nil, nil
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
