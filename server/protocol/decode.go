package protocol

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxDepth bounds the nesting of maps and arrays in a body, skipped values included, so
// that a frame of 1 MiB of array headers cannot recurse a million levels deep. The
// deepest real message (DLQ_PAGE: items, a dead letter, its task, its schedule) nests 5.
const maxDepth = 16

// Decoder splits a byte stream into frames and decodes them. Feed it bytes as they
// arrive, in pieces of any size, and call Next until it reports that it needs more.
// It does no I/O. Not safe for concurrent use: one Decoder per connection, used by the
// goroutine that reads it.
//
// Invariant: buf[off:] holds the bytes fed and not yet consumed; a frame is consumed
// (off advances past it) before it is decoded, so an error in one frame's body leaves
// the Decoder at the start of the next. A length prefix above the maximum is the one
// error the stream cannot recover from: the Decoder stops there, and every later Next
// returns the same error.
//
// A Decoder interns the namespaces and task types of the messages it decodes (see
// nameCache): equal names in its messages may share one string. Told its peer
// (SetPeer), it refuses the types that peer may not send; by default it accepts all.
type Decoder struct {
	max   int
	buf   []byte
	off   int
	err   *Error // sticky: FRAME_TOO_LARGE
	dec   dec    // reads each frame's body
	names nameCache
}

// NewDecoder returns a Decoder that accepts frame bodies of up to maxFrame bytes;
// maxFrame <= 0 means DefaultMaxFrame, and values above MaxFrameLimit are lowered to it.
func NewDecoder(maxFrame int) *Decoder {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	d := &Decoder{max: min(maxFrame, MaxFrameLimit)}
	d.dec.names = &d.names
	return d
}

// Feed appends p to the bytes waiting to be decoded; p is copied, and may be reused as
// soon as Feed returns. Amortised O(len(p)). The Decoder holds what it is fed until Next
// consumes it, so a reader feeds one read at a time and drains Next in between; it then
// holds at most one frame plus one read. After FRAME_TOO_LARGE, Feed discards p.
func (d *Decoder) Feed(p []byte) {
	if d.err != nil {
		return // the stream is broken; hold nothing more
	}
	if d.off > 0 && d.off == len(d.buf) {
		d.buf, d.off = d.buf[:0], 0
	} else if d.off > len(d.buf)/2 && d.off > 4096 {
		n := copy(d.buf, d.buf[d.off:])
		d.buf, d.off = d.buf[:n], 0
	}
	d.buf = append(d.buf, p...)
}

// Buffered returns how many fed bytes are not yet consumed.
func (d *Decoder) Buffered() int { return len(d.buf) - d.off }

// Next returns the next message. It returns (nil, nil) when the bytes fed so far hold
// no complete frame: feed more and call again. Otherwise it consumes one frame and
// returns its message, or an *Error: FRAME_TOO_LARGE (sticky; detected from the length
// prefix alone, before any body byte is awaited or buffered for it), UNEXPECTED (a type
// the Decoder's peer may not send), or the error of Decode for that body (the Decoder
// moves on to the next frame after either). Cost: Decode's, less
// the copies of names the Decoder has interned before.
func (d *Decoder) Next() (Message, error) {
	if d.err != nil {
		return nil, d.err
	}
	avail := d.buf[d.off:]
	if len(avail) < headerLen {
		return nil, nil
	}
	n := binary.BigEndian.Uint32(avail)
	if uint64(n) > uint64(d.max) {
		d.err = &Error{Code: CodeFrameTooLarge, Message: fmt.Sprintf("length prefix %d exceeds the maximum frame size %d", n, d.max)}
		return nil, d.err
	}
	if len(avail) < headerLen+int(n) {
		return nil, nil
	}
	d.off += headerLen + int(n)
	return d.dec.decode(avail[headerLen : headerLen+int(n)])
}

// Decode decodes one frame body (without its length prefix). The message it returns
// shares no memory with body. Errors are *Error values: BAD_FRAME (not msgpack, not a
// map, no integer "t", trailing bytes, nesting deeper than 16), UNKNOWN_TYPE, or
// BAD_FIELD naming the field (wrong msgpack type, out of range, missing, duplicated).
// Their ID is the request ID when the body holds a readable one. Keys a message does not
// define are skipped. O(len(body)); allocates the message, and its strings, slices and
// maps (an ACK: 1 allocation), less the names a Decoder interns (see Decoder.Next).
func Decode(body []byte) (Message, error) {
	d := decPool.Get().(*dec)
	m, err := d.decode(body)
	decPool.Put(d)
	return m, err
}

// decode is Decode with d.
func (d *dec) decode(body []byte) (Message, error) {
	d.reset(body)
	m, err := d.message()
	if err != nil {
		d.finish(err)
		err.ID = d.id
		if !d.haveID {
			err.ID = peekID(body)
		}
	}
	d.reset(nil)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// dec reads one body: off indexes the next unread byte. Every read checks the bytes
// left before it indexes, so a truncated or lying body is an error, never a panic.
// Strings and binaries are sliced out of body, and copied before a message keeps them.
//
// Where in the message an error lies (task.schedule.cron, tasks[2].tid) costs nothing
// while decoding succeeds: badField and badFrame make the error without its path, each
// map and array level the error is returned through adds its key or index (at, atIdx),
// innermost first, and finish writes the path into the error once it reaches the top.
type dec struct {
	body    []byte
	off     int
	depth   int    // the number of keys and indices above the value being read
	id      uint64 // the envelope's "id", once read
	haveID  bool
	err     *Error     // the last error badField or badFrame made: finish completes it
	errAt   int        // for a BAD_FRAME err: the byte it was found at
	errPath []pathElem // the keys and indices err has been returned through, innermost first
	names   *nameCache // the Decoder's, which name interns through; nil: no interning
	peer    peer       // the Decoder's: who sends the frames, which fixes the types accepted
}

type pathElem struct {
	key string // a key from a field table (never allocated)
	idx int    // an array index, or -1
}

// decPool recycles decoders (and their path slices): the message types' set methods take
// the *dec through an interface call, so one made per body would escape to the heap.
var decPool = sync.Pool{New: func() any { return new(dec) }}

func (d *dec) reset(body []byte) {
	d.body, d.off, d.depth = body, 0, 0
	d.id, d.haveID = 0, false
	d.err, d.errPath = nil, d.errPath[:0]
}

func (d *dec) left() int { return len(d.body) - d.off }

// at adds key to the path of err, which a value under key returned; at returns err.
func (d *dec) at(err *Error, key string) *Error {
	d.errPath = append(d.errPath, pathElem{key: key, idx: -1})
	return err
}

// atIdx adds array index i to the path of err, which element i returned; it returns err.
func (d *dec) atIdx(err *Error, i int) *Error {
	d.errPath = append(d.errPath, pathElem{idx: i})
	return err
}

// fieldPath renders the path errors have been returned through: task.schedule.cron,
// tasks[2].tid.
func (d *dec) fieldPath() string {
	var b strings.Builder
	for i := len(d.errPath) - 1; i >= 0; i-- {
		p := d.errPath[i]
		if p.idx >= 0 {
			b.WriteString("[" + strconv.Itoa(p.idx) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p.key)
	}
	return b.String()
}

// badField makes a BAD_FIELD error; finish names its field.
func (d *dec) badField(format string, args ...any) *Error {
	d.err = newError(CodeBadField, "", fmt.Sprintf(format, args...))
	return d.err
}

// badFrame makes a BAD_FRAME error at the current byte; finish ends its message with
// where it lies: "... (in task.payload) at byte 17".
func (d *dec) badFrame(format string, args ...any) *Error {
	d.err, d.errAt = newError(CodeBadFrame, "", fmt.Sprintf(format, args...)), d.off
	return d.err
}

// finish completes err, which decoding returned at the top: an error of badField gets
// its field, one of badFrame its place; other errors were made complete.
func (d *dec) finish(err *Error) {
	if err != d.err {
		return
	}
	switch err.Code {
	case CodeBadField:
		err.Field = d.fieldPath()
	case CodeBadFrame:
		if p := d.fieldPath(); p != "" {
			err.Message += " (in " + p + ")"
		}
		err.Message += " at byte " + strconv.Itoa(d.errAt)
	}
}

// truncated is the error for a value that runs past the end of the body.
func (d *dec) truncated() *Error { return d.badFrame("truncated msgpack value") }

// code returns the next value's first byte without consuming it.
func (d *dec) code() (byte, *Error) {
	if d.off < len(d.body) {
		return d.body[d.off], nil
	}
	return 0, d.truncated()
}

// peek returns the next value's first byte without consuming it, or 0xc1 (never a valid
// first byte, so of no type) at the end of the body.
func (d *dec) peek() byte {
	if d.off < len(d.body) {
		return d.body[d.off]
	}
	return 0xc1
}

// typeName names the msgpack type of a value by its first byte, for errors.
func typeName(c byte) string {
	switch {
	case c <= 0x7f || c >= 0xe0 || c >= 0xcc && c <= 0xd3:
		return "integer"
	case c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf:
		return "map"
	case c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd:
		return "array"
	case c >= 0xa0 && c <= 0xbf || c >= 0xd9 && c <= 0xdb:
		return "string"
	case c == 0xc0:
		return "nil"
	case c == 0xc2 || c == 0xc3:
		return "boolean"
	case c >= 0xc4 && c <= 0xc6:
		return "binary"
	case c == 0xca || c == 0xcb:
		return "float"
	case c == 0xc1:
		return "invalid byte 0xc1"
	}
	return "extension"
}

func isBool(c byte) bool  { return c == codeFalse || c == codeTrue }
func isInt(c byte) bool   { return c <= 0x7f || c >= 0xe0 || c >= 0xcc && c <= 0xd3 }
func isStr(c byte) bool   { return c >= 0xa0 && c <= 0xbf || c >= 0xd9 && c <= 0xdb }
func isBin(c byte) bool   { return c >= 0xc4 && c <= 0xc6 }
func isMap(c byte) bool   { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }
func isArray(c byte) bool { return c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd }

// want checks the next value's type; nil is reported as nil, so callers that allow it
// (optional fields) test for it first. The hot readers spell it out as
// `if !isX(d.peek()) { return d.wrongType(what) }`, which inlines where the indirect call
// to ok does not.
func (d *dec) want(ok func(byte) bool, what string) *Error {
	if ok(d.peek()) {
		return nil
	}
	return d.wrongType(what)
}

// wrongType is want's error: the next value is missing or not of the type what names.
func (d *dec) wrongType(what string) *Error {
	c, err := d.code()
	if err != nil {
		return err
	}
	return d.badField("want %s, got %s", what, typeName(c))
}

// follow consumes a value's first byte and the n-byte big-endian number after it (n is
// 0, 1, 2, 4 or 8), and returns the number.
func (d *dec) follow(n int) (uint64, *Error) {
	p := d.off + 1
	if n > len(d.body)-p {
		return 0, d.truncated()
	}
	var v uint64
	switch b := d.body[p : p+n]; n {
	case 1:
		v = uint64(b[0])
	case 2:
		v = uint64(binary.BigEndian.Uint16(b))
	case 4:
		v = uint64(binary.BigEndian.Uint32(b))
	case 8:
		v = binary.BigEndian.Uint64(b)
	}
	d.off = p + n
	return v, nil
}

// integer consumes an integer of any msgpack integer encoding (else BAD_FIELD: want
// what) and returns its bits and whether its encoding is a signed one; if it is, v is
// the value as an int64.
func (d *dec) integer(what string) (v uint64, signed bool, err *Error) {
	switch c := d.peek(); {
	case c <= 0x7f: // positive fixint
		d.off++
		return uint64(c), false, nil
	case c >= 0xe0: // negative fixint
		d.off++
		return uint64(int8(c)), true, nil
	case c >= codeUint8 && c <= codeUint64: // uint 8, 16, 32, 64
		v, err = d.follow(1 << (c - codeUint8))
		return v, false, err
	case c >= codeInt8 && c <= codeInt64: // int 8, 16, 32, 64 bits: sign-extend from w bytes
		w := 1 << (c - codeInt8)
		v, err = d.follow(w)
		shift := 64 - 8*w
		return uint64(int64(v<<shift) >> shift), true, err
	}
	return 0, false, d.wrongType(what)
}

// uint reads an integer of any msgpack integer encoding whose value is >= 0.
func (d *dec) uint() (uint64, *Error) {
	v, signed, err := d.integer("unsigned integer")
	if err == nil && signed && int64(v) < 0 {
		return 0, d.badField("want unsigned integer, got %d", int64(v))
	}
	return v, err
}

// uintMax reads an unsigned integer of at most limit.
func (d *dec) uintMax(limit uint64) (uint64, *Error) {
	v, err := d.uint()
	if err == nil && v > limit {
		return 0, d.badField("%d exceeds %d", v, limit)
	}
	return v, err
}

// errCode reads an error code (ERROR, and the failures in BATCH_RESULT and ACKED): a
// uint below 2^16. A code this package does not know is kept (clients treat it as
// INTERNAL).
func (d *dec) errCode() (Code, *Error) {
	v, err := d.uintMax(math16)
	return Code(v), err
}

// int reads an integer of any msgpack integer encoding that fits an int64.
func (d *dec) int() (int64, *Error) {
	v, signed, err := d.integer("integer")
	if err == nil && !signed && v > math.MaxInt64 {
		return 0, d.badField("%d overflows a signed 64-bit integer", v)
	}
	return int64(v), err
}

// float reads a float32, float64 or integer (some encoders write whole floats as integers).
func (d *dec) float() (float64, *Error) {
	c, err := d.code()
	if err != nil {
		return 0, err
	}
	switch {
	case isInt(c):
		v, err := d.int()
		return float64(v), err
	case c == codeFloat:
		v, err := d.follow(4)
		return float64(math.Float32frombits(uint32(v))), err
	case c == codeDouble:
		v, err := d.follow(8)
		return math.Float64frombits(v), err
	}
	return 0, d.badField("want float, got %s", typeName(c))
}

func (d *dec) bool() (bool, *Error) {
	if err := d.want(isBool, "boolean"); err != nil {
		return false, err
	}
	d.off++
	return d.body[d.off-1] == codeTrue, nil
}

// raw reads a str or bin value (the caller has checked that one is next) of at most
// limit bytes and returns its bytes, aliased into body.
func (d *dec) raw(limit int) ([]byte, *Error) {
	c := d.peek()
	var n uint64
	var err *Error
	switch {
	case c <= 0xbf: // fixstr
		n = uint64(c & 0x1f)
		d.off++
	case c >= codeStr8: // str 8, 16, 32
		n, err = d.follow(1 << (c - codeStr8))
	default: // bin 8, 16, 32
		n, err = d.follow(1 << (c - codeBin8))
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(d.left()) {
		return nil, d.truncated()
	}
	if n > uint64(limit) {
		return nil, d.badField("%d bytes exceed the limit of %d", n, limit)
	}
	p, end := d.off, d.off+int(n)
	d.off = end
	return d.body[p:end:end], nil
}

// strBytes reads a UTF-8 string of at most limit bytes and returns its bytes aliased
// into the body: for comparing at once (string(b) == name does not allocate), never for
// keeping, since the body's buffer is reused.
func (d *dec) strBytes(limit int) ([]byte, *Error) {
	b, err := d.strRaw(limit)
	if err == nil {
		err = d.utf8(b)
	}
	return b, err
}

// strRaw is strBytes without the check that the string is UTF-8, for callers that can
// tell by comparison that it is (a known name), and check it only when that fails.
func (d *dec) strRaw(limit int) ([]byte, *Error) {
	if !isStr(d.peek()) {
		return nil, d.wrongType("string")
	}
	return d.raw(limit)
}

// utf8 checks that the string b, just read, is valid UTF-8.
func (d *dec) utf8(b []byte) *Error {
	if !utf8.Valid(b) {
		return d.badField("string is not valid UTF-8")
	}
	return nil
}

// str reads a UTF-8 string of at most limit bytes, copied.
func (d *dec) str(limit int) (string, *Error) {
	b, err := d.strBytes(limit)
	return string(b), err
}

// bin reads a binary value of at most limit bytes, copied; empty is nil.
func (d *dec) bin(limit int) ([]byte, *Error) {
	if err := d.want(isBin, "binary"); err != nil {
		return nil, err
	}
	b, err := d.raw(limit)
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
func (d *dec) entries(c, code16 byte) (uint64, *Error) {
	if c < code16 {
		d.off++
		return uint64(c & 0x0f), nil
	}
	return d.follow(2 << (c - code16))
}

// arrayLen reads an array header of at most limit elements.
func (d *dec) arrayLen(limit int) (int, *Error) {
	if err := d.want(isArray, "array"); err != nil {
		return 0, err
	}
	n, err := d.entries(d.body[d.off], codeArray16)
	if err != nil {
		return 0, err
	}
	if n > uint64(d.left()) { // every element takes at least one byte
		return 0, d.truncated()
	}
	if n > uint64(limit) {
		return 0, d.badField("%d elements exceed the limit of %d", n, limit)
	}
	return int(n), nil
}

// mapLen reads a map header; every entry takes at least two bytes.
func (d *dec) mapLen() (int, *Error) {
	if !isMap(d.peek()) {
		return 0, d.wrongType("map")
	}
	n, err := d.entries(d.body[d.off], codeMap16)
	if err != nil {
		return 0, err
	}
	if n > uint64(d.left()/2) {
		return 0, d.truncated()
	}
	return int(n), nil
}

// isNil consumes a nil if one is next.
func (d *dec) isNil() bool {
	if d.peek() == codeNil {
		d.off++
		return true
	}
	return false
}

// skip consumes one value of any type, checking it is well-formed.
func (d *dec) skip(depth int) *Error {
	if depth > maxDepth {
		return d.badFrame("nesting deeper than %d", maxDepth)
	}
	c, err := d.code()
	if err != nil {
		return err
	}
	switch {
	case isMap(c):
		n, err := d.mapLen()
		if err != nil {
			return err
		}
		for range 2 * n {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case isArray(c):
		n, err := d.arrayLen(math.MaxInt)
		if err != nil {
			return err
		}
		for range n {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case isStr(c) || isBin(c):
		_, err := d.raw(math.MaxInt)
		return err
	case c == 0xc1:
		return d.badFrame("invalid msgpack byte 0xc1")
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
		l, err := d.follow(1 << (c - codeExt8))
		if err != nil {
			return err
		}
		if l >= uint64(d.left()) {
			return d.truncated()
		}
		d.off += 1 + int(l)
		return nil
	}
	if n >= uint64(d.left()) {
		return d.truncated()
	}
	d.off += 1 + int(n)
	return nil
}

// A fieldTable lists the keys of one map type: key i sets bit i of the presence mask.
// A spec (spec.go) makes it, or handTable (wiretask.go) for a hand-written map type;
// either way from key names, so that the required mask follows the keys (∀ i: bit i of
// required set ⇔ keys[i] was named required).
type fieldTable struct {
	keys     []string
	required uint64 // bit i set: keys[i] must be present (and not nil)
	// read reads the value of key off+i into x, a pointer to the map type (off: the keys
	// readFields reads itself, "t" and "id" of an envelope).
	read func(x any, d *dec, i int) *Error
	// checked: x is a checker, whose rule across the fields runs once the map is read.
	checked bool
}

// bit returns key's presence bit; it panics for a key t lacks (a programming error).
func (t *fieldTable) bit(key string) uint64 {
	for i, k := range t.keys {
		if k == key {
			return 1 << i
		}
	}
	panic("protocol: no key " + strconv.Quote(key))
}

// decodable is a map type of wiretask.go: its fields, and how to read the value of key
// i (its table's read calls set, through setBy).
type decodable interface {
	fields() *fieldTable
	set(d *dec, i int) *Error
}

// setBy is the read of a decodable type's table: its set method.
func setBy[T any, P interface {
	*T
	decodable
}](x any, d *dec, i int) *Error {
	return P(x.(*T)).set(d, i)
}

// checker is a map type with a rule across its fields, checked after the map is read
// with the presence mask.
type checker interface {
	checkFields(d *dec, present uint64) *Error
}

// readMap reads a map into x: each key must be a string; a key of x's table is read by
// x.set, any other key is skipped; a nil value counts as absent; a key twice is BAD_FIELD;
// then every required key must have been present, and x's checkFields (if any) passes.
// O(keys) when the keys come in the table's order (as this package writes them), else
// O(keys x len(table)); no allocation of its own.
func (d *dec) readMap(x decodable, depth int) *Error {
	return d.readFields(x, x.fields(), 0, depth)
}

// readFields is readMap with the table given, x a pointer to its map type: an envelope's
// table has "t" and "id" in front (off = 2), which readFields reads itself.
func (d *dec) readFields(x any, t *fieldTable, off int, depth int) *Error {
	if depth > maxDepth {
		return d.badFrame("nesting deeper than %d", maxDepth)
	}
	n, err := d.mapLen()
	if err != nil {
		return err
	}
	var present uint64
	next := 0 // the key expected next: encoders that write keys in table order hit it
	for range n {
		i, err := d.key(t, next)
		if err != nil {
			return err
		}
		next = i + 1
		if i < 0 {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			continue
		}
		if present&(1<<i) != 0 {
			return d.at(d.badField("key appears twice"), t.keys[i])
		}
		if !d.isNil() {
			present |= 1 << i
			var err *Error
			switch {
			case i >= off:
				d.depth = depth + 1
				err = t.read(x, d, i-off)
			case i == 0: // "t": its value was read by findType
				_, err = d.uint()
			default: // "id"
				d.id, err = d.uint()
				d.haveID = err == nil
			}
			if err != nil {
				return d.at(err, t.keys[i])
			}
		}
	}
	if missing := t.required &^ present; missing != 0 {
		for i, key := range t.keys {
			if missing&(1<<i) != 0 {
				return d.at(d.badField("required field is missing"), key)
			}
		}
	}
	if t.checked {
		return x.(checker).checkFields(d, present>>off)
	}
	return nil
}

// key reads a map key and returns its index in t, or -1 for a key t does not list. It
// first tries t.keys[next] in the form this package writes it, a fixstr, with one
// comparison of the bytes (no UTF-8 check: keys are only compared); any other key or
// form is read as a string and looked up in the whole table.
func (d *dec) key(t *fieldTable, next int) (int, *Error) {
	if next < len(t.keys) {
		k := t.keys[next]
		end := d.off + 1 + len(k)
		if len(k) <= 31 && end <= len(d.body) && d.body[d.off] == codeFixStr|byte(len(k)) && string(d.body[d.off+1:end]) == k {
			d.off = end
			return next, nil
		}
	}
	if !isStr(d.peek()) {
		return -1, d.wrongType("string key")
	}
	k, err := d.raw(math.MaxInt)
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

// sub reads a nested map value.
func (d *dec) sub(x decodable) *Error { return d.readMap(x, d.depth) }

// message reads a whole body: a map whose "t" selects the message type.
func (d *dec) message() (Message, *Error) {
	c, err := d.code()
	if err != nil {
		return nil, d.badFrame("empty body")
	}
	if !isMap(c) {
		return nil, d.badFrame("body is a %s, not a map", typeName(c))
	}
	t, err := d.findType()
	if err != nil {
		return nil, err
	}
	s := specOf(t)
	if s == nil {
		return nil, newError(CodeUnknownType, "", "unknown message type "+strconv.FormatUint(t, 10))
	}
	if err := d.peer.allows(Type(t), s.from); err != nil {
		return nil, err
	}
	m := s.new()
	if err := d.readFields(m, s.table, 2, 0); err != nil {
		return nil, err
	}
	if d.left() != 0 {
		return nil, d.badFrame("%d bytes after the message", d.left())
	}
	m.setID(d.id)
	d.peer.saw(m)
	return m, nil
}

// findType returns the value of the top-level "t" without consuming anything: from the
// first key when "t" is first (as this package writes it), else by a scan of the map.
func (d *dec) findType() (uint64, *Error) {
	// As this package writes it: a fixmap whose first key is "t", a positive fixint.
	if b := d.body[d.off:]; len(b) >= 4 && b[0] > codeFixMap && b[0] < codeFixArray &&
		int(b[0]&0x0f) <= (len(b)-1)/2 && b[1] == codeFixStr|1 && b[2] == 't' && b[3] <= 0x7f {
		return uint64(b[3]), nil
	}
	save := d.off
	defer func() { d.off = save }()
	n, err := d.mapLen()
	if err != nil {
		return 0, err
	}
	for range n {
		if err := d.want(isStr, "string key"); err != nil {
			return 0, newError(CodeBadFrame, "", "a top-level key is not a string")
		}
		k, err := d.raw(math.MaxInt)
		if err != nil {
			return 0, err
		}
		if string(k) == "t" {
			v, err := d.uint()
			if err != nil {
				return 0, newError(CodeBadFrame, "t", "\"t\" is not an unsigned integer")
			}
			return v, nil
		}
		if err := d.skip(1); err != nil {
			return 0, err
		}
	}
	return 0, newError(CodeBadFrame, "t", "no \"t\" key: the message type is missing")
}

// peekID finds a top-level "id" in body, for an error reply; 0 when there is none.
func peekID(body []byte) uint64 {
	d := decPool.Get().(*dec)
	defer func() { d.reset(nil); decPool.Put(d) }()
	d.reset(body)
	n, err := d.mapLen()
	if err != nil {
		return 0
	}
	for range n {
		if d.want(isStr, "") != nil {
			return 0
		}
		k, err := d.raw(math.MaxInt)
		if err != nil {
			return 0
		}
		if string(k) == "id" {
			v, _ := d.uint()
			return v
		}
		if d.skip(1) != nil {
			return 0
		}
	}
	return 0
}
