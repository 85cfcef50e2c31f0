package protocol

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// reader reads the msgpack values of one frame body: integers, floats, booleans, strings,
// binaries, array and map headers, and skips values it is not asked to read. It knows
// msgpack and nothing of messages: which keys a map has (key looks a key up in the table
// it is given), which values a field allows and where in a message a value lies are the
// decoder's (dec), which holds a reader by value.
//
// Invariants:
//   - ∀ calls: 0 ≤ off ≤ len(body) before and after. Every read checks the bytes left
//     before it indexes, so a truncated or lying body is an error, never a panic.
//   - Only the reader's methods move off (dec.reset replaces the reader whole, for a new
//     body; a look-ahead reads a copy). A failed read leaves off anywhere in that range,
//     and its caller reads no further.
//   - ∀ lengths a value claims (string, binary, array, map): the length is checked against
//     the bytes left (an array element takes at least one, a map entry two) and against
//     the caller's limit before anything is sliced or counted, so a claimed length never
//     sizes what the decoder allocates.
//   - A string or binary read by raw, strRaw or strBytes aliases body (for comparing, never for
//     keeping: the body's buffer is reused); str and bin return copies.
//   - err is the last error badField or badFrame made, errAt the byte a BAD_FRAME was
//     found at. The reader leaves err without its field path: dec.finish completes it.
//     Other errors (a dec's newError) are complete when made and never stored here.
//
// Costs: O(1) a value, except a string's UTF-8 check and copy, O(len), and skip, O(bytes
// skipped) with its recursion bounded by maxDepth. No allocation but the copies of str
// and bin and the errors. The small reads (peek, code, isNil, str) inline into their
// callers; the reader being a field of dec, not behind a pointer, costs them nothing.
// It has 25 methods, the most a type in server/ may have: a new read replaces one, or
// belongs to dec.
type reader struct {
	body  []byte
	off   int    // the next unread byte
	err   *Error // the last error badField or badFrame made
	errAt int    // for a BAD_FRAME err: the byte it was found at
}

func (r *reader) left() int { return len(r.body) - r.off }

// badField makes a BAD_FIELD error; dec.finish names its field.
func (r *reader) badField(format string, args ...any) *Error {
	r.err = newError(CodeBadField, "", fmt.Sprintf(format, args...))
	return r.err
}

// badFrame makes a BAD_FRAME error at the current byte; dec.finish ends its message with
// where it lies: "... (in task.payload) at byte 17".
func (r *reader) badFrame(format string, args ...any) *Error {
	r.err, r.errAt = newError(CodeBadFrame, "", fmt.Sprintf(format, args...)), r.off
	return r.err
}

// truncated is the error for a value that runs past the end of the body.
func (r *reader) truncated() *Error { return r.badFrame("truncated msgpack value") }

// code returns the next value's first byte without consuming it.
func (r *reader) code() (byte, *Error) {
	if r.off < len(r.body) {
		return r.body[r.off], nil
	}
	return 0, r.truncated()
}

// peek returns the next value's first byte without consuming it, or 0xc1 (never a valid
// first byte, so of no type) at the end of the body. The readers test the type with it,
// as `if !isX(r.peek()) { return r.wrongType(what) }`, which inlines where a call through
// a func value would not.
func (r *reader) peek() byte {
	if r.off < len(r.body) {
		return r.body[r.off]
	}
	return 0xc1
}

// wrongType is the error for a next value that is missing or not of the type what names.
// Callers that allow nil (optional fields) test for it first.
func (r *reader) wrongType(what string) *Error {
	c, err := r.code()
	if err != nil {
		return err
	}
	return r.badField("want %s, got %s", what, typeName(c))
}

// follow consumes a value's first byte and the n-byte big-endian number after it (n is
// 0, 1, 2, 4 or 8), and returns the number.
func (r *reader) follow(n int) (uint64, *Error) {
	p := r.off + 1
	if n > len(r.body)-p {
		return 0, r.truncated()
	}
	var v uint64
	switch b := r.body[p : p+n]; n {
	case 1:
		v = uint64(b[0])
	case 2:
		v = uint64(binary.BigEndian.Uint16(b))
	case 4:
		v = uint64(binary.BigEndian.Uint32(b))
	case 8:
		v = binary.BigEndian.Uint64(b)
	}
	r.off = p + n
	return v, nil
}

// integer consumes an integer of any msgpack integer encoding (else BAD_FIELD: want
// what) and returns its bits and whether its encoding is a signed one; if it is, v is
// the value as an int64.
func (r *reader) integer(what string) (v uint64, signed bool, err *Error) {
	switch c := r.peek(); {
	case c <= 0x7f: // positive fixint
		r.off++
		return uint64(c), false, nil
	case c >= 0xe0: // negative fixint
		r.off++
		return uint64(int8(c)), true, nil
	case c >= codeUint8 && c <= codeUint64: // uint 8, 16, 32, 64
		v, err = r.follow(1 << (c - codeUint8))
		return v, false, err
	case c >= codeInt8 && c <= codeInt64: // int 8, 16, 32, 64 bits: sign-extend from w bytes
		w := 1 << (c - codeInt8)
		v, err = r.follow(w)
		shift := 64 - 8*w
		return uint64(int64(v<<shift) >> shift), true, err
	}
	return 0, false, r.wrongType(what)
}

// uint reads an integer of any msgpack integer encoding whose value is >= 0.
func (r *reader) uint() (uint64, *Error) {
	v, signed, err := r.integer("unsigned integer")
	if err == nil && signed && int64(v) < 0 {
		return 0, r.badField("want unsigned integer, got %d", int64(v))
	}
	return v, err
}

// int reads an integer of any msgpack integer encoding that fits an int64.
func (r *reader) int() (int64, *Error) {
	v, signed, err := r.integer("integer")
	if err == nil && !signed && v > math.MaxInt64 {
		return 0, r.badField("%d overflows a signed 64-bit integer", v)
	}
	return int64(v), err
}

// float reads a float32, float64 or integer (some encoders write whole floats as integers).
func (r *reader) float() (float64, *Error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	switch {
	case isInt(c):
		v, err := r.int()
		return float64(v), err
	case c == codeFloat:
		v, err := r.follow(4)
		return float64(math.Float32frombits(uint32(v))), err
	case c == codeDouble:
		v, err := r.follow(8)
		return math.Float64frombits(v), err
	}
	return 0, r.badField("want float, got %s", typeName(c))
}

func (r *reader) bool() (bool, *Error) {
	if !isBool(r.peek()) {
		return false, r.wrongType("boolean")
	}
	r.off++
	return r.body[r.off-1] == codeTrue, nil
}

// raw reads a str or bin value (the caller has checked that one is next) of at most
// limit bytes and returns its bytes, aliased into body.
func (r *reader) raw(limit int) ([]byte, *Error) {
	c := r.peek()
	var n uint64
	var err *Error
	switch {
	case c <= 0xbf: // fixstr
		n = uint64(c & 0x1f)
		r.off++
	case c >= codeStr8: // str 8, 16, 32
		n, err = r.follow(1 << (c - codeStr8))
	default: // bin 8, 16, 32
		n, err = r.follow(1 << (c - codeBin8))
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(r.left()) {
		return nil, r.truncated()
	}
	if n > uint64(limit) {
		return nil, r.badField("%d bytes exceed the limit of %d", n, limit)
	}
	p, end := r.off, r.off+int(n)
	r.off = end
	return r.body[p:end:end], nil
}

// strBytes reads a UTF-8 string of at most limit bytes and returns its bytes aliased
// into the body: for comparing at once (string(b) == name does not allocate), never for
// keeping, since the body's buffer is reused.
func (r *reader) strBytes(limit int) ([]byte, *Error) {
	b, err := r.strRaw(limit)
	if err == nil {
		err = r.utf8(b)
	}
	return b, err
}

// strRaw is strBytes without the check that the string is UTF-8, for callers that can
// tell by comparison that it is (a known name), and check it (utf8) only when that fails.
func (r *reader) strRaw(limit int) ([]byte, *Error) {
	if !isStr(r.peek()) {
		return nil, r.wrongType("string")
	}
	return r.raw(limit)
}

// utf8 checks that the string b, just read, is valid UTF-8.
func (r *reader) utf8(b []byte) *Error {
	if !utf8.Valid(b) {
		return r.badField("string is not valid UTF-8")
	}
	return nil
}

// str reads a UTF-8 string of at most limit bytes, copied.
func (r *reader) str(limit int) (string, *Error) {
	b, err := r.strBytes(limit)
	return string(b), err
}

// key reads a map key and returns its index in t.keys, or -1 for a key t does not list
// (t is only read for its keys, and passed whole as one word instead of a slice's
// three: key is called once a key). It first tries t.keys[next] in the form this package
// writes it, a fixstr, with one comparison of the bytes (no UTF-8 check: keys are only
// compared); any other key or form is read as a string and looked up in all of t.keys.
func (r *reader) key(t *fieldTable, next int) (int, *Error) {
	if next < len(t.keys) {
		k := t.keys[next]
		end := r.off + 1 + len(k)
		if len(k) <= 31 && end <= len(r.body) && r.body[r.off] == codeFixStr|byte(len(k)) && string(r.body[r.off+1:end]) == k {
			r.off = end
			return next, nil
		}
	}
	if !isStr(r.peek()) {
		return -1, r.wrongType("string key")
	}
	k, err := r.raw(math.MaxInt)
	if err != nil {
		return -1, err
	}
	for j, key := range t.keys {
		if string(k) == key {
			return j, nil
		}
	}
	return -1, nil
}

// bin reads a binary value of at most limit bytes, copied; empty is nil.
func (r *reader) bin(limit int) ([]byte, *Error) {
	if !isBin(r.peek()) {
		return nil, r.wrongType("binary")
	}
	b, err := r.raw(limit)
	if err != nil || len(b) == 0 {
		return nil, err
	}
	p := make([]byte, len(b)) // with the copy below, compiled to one unzeroed allocation
	copy(p, b)
	return p, nil
}

// entries consumes the header of a map or array whose first byte is c: the fix form
// below code16 holds the count in its low 4 bits, code16 is followed by a 16-bit count,
// code16+1 by a 32-bit one.
func (r *reader) entries(c, code16 byte) (uint64, *Error) {
	if c < code16 {
		r.off++
		return uint64(c & 0x0f), nil
	}
	return r.follow(2 << (c - code16))
}

// arrayLen reads an array header of at most limit elements.
func (r *reader) arrayLen(limit int) (int, *Error) {
	if !isArray(r.peek()) {
		return 0, r.wrongType("array")
	}
	n, err := r.entries(r.body[r.off], codeArray16)
	if err != nil {
		return 0, err
	}
	if n > uint64(r.left()) { // every element takes at least one byte
		return 0, r.truncated()
	}
	if n > uint64(limit) {
		return 0, r.badField("%d elements exceed the limit of %d", n, limit)
	}
	return int(n), nil
}

// mapLen reads a map header; every entry takes at least two bytes.
func (r *reader) mapLen() (int, *Error) {
	if !isMap(r.peek()) {
		return 0, r.wrongType("map")
	}
	n, err := r.entries(r.body[r.off], codeMap16)
	if err != nil {
		return 0, err
	}
	if n > uint64(r.left()/2) {
		return 0, r.truncated()
	}
	return int(n), nil
}

// isNil consumes a nil if one is next.
func (r *reader) isNil() bool {
	if r.peek() == codeNil {
		r.off++
		return true
	}
	return false
}

// skip consumes one value of any type, nested depth levels deep, checking it is
// well-formed.
func (r *reader) skip(depth int) *Error {
	if depth > maxDepth {
		return r.badFrame("nesting deeper than %d", maxDepth)
	}
	c, err := r.code()
	if err != nil {
		return err
	}
	switch {
	case isMap(c):
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		for range 2 * n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case isArray(c):
		n, err := r.arrayLen(math.MaxInt)
		if err != nil {
			return err
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case isStr(c) || isBin(c):
		_, err := r.raw(math.MaxInt)
		return err
	case c == 0xc1:
		return r.badFrame("invalid msgpack byte 0xc1")
	}
	// Scalars and extensions: their length follows from the first byte (and for ext8/16/32
	// the length field).
	var n uint64 // bytes after the first
	switch {
	case c <= 0x7f || c >= 0xe0 || c == codeNil || isBool(c):
	case c == codeUint8 || c == codeInt8:
		n = 1
	case c == codeUint16 || c == codeInt16:
		n = 2
	case c == codeUint32 || c == codeInt32 || c == codeFloat:
		n = 4
	case c == codeUint64 || c == codeInt64 || c == codeDouble:
		n = 8
	case c >= codeFixExt1 && c <= codeFixExt16: // type byte + 1, 2, 4, 8, 16
		n = 1 + 1<<(c-codeFixExt1)
	case c >= codeExt8 && c <= codeExt32: // length of 1, 2 or 4 bytes, then type byte and data
		l, err := r.follow(1 << (c - codeExt8))
		if err != nil {
			return err
		}
		if l >= uint64(r.left()) {
			return r.truncated()
		}
		r.off += 1 + int(l)
		return nil
	}
	if n >= uint64(r.left()) {
		return r.truncated()
	}
	r.off += 1 + int(n)
	return nil
}
