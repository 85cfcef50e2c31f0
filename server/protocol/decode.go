package protocol

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"unsafe"
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

// dec decodes the message of one body, field by field: it reads the values through its
// reader r and knows what they mean. It owns the key tables and required masks of the map
// types (readFields), the range of a field's value (uintMax, errCode, state, enum), the
// interning of names, the depth of nesting, the envelope's "id" and who may send which
// type (peer), and the path of an error's field.
//
// Invariants:
//   - depth is the number of keys and indices above the value being read. A map deeper
//     than maxDepth is refused (readFields), a skipped value too (r.skip), so neither
//     recursion goes deeper than maxDepth levels however the body nests.
//   - haveID ⇔ the envelope's "id" has been read, and then id is its value.
//   - errPath holds the keys and indices the error being returned has passed, innermost
//     first; it is empty while decoding succeeds, so an error's place (task.schedule.cron,
//     tasks[2].tid) costs nothing until an error exists: r.badField and r.badFrame make it
//     without its path, each map and array level it is returned through adds its key or
//     index (at, atIdx), and finish writes the path into it once it reaches the top.
//   - Between bodies (reset) no state of the last body is left but errPath's capacity.
//
// Costs: see Decode. r is a field, not a pointer and not embedded: its methods are
// called on d.r directly, inline where they are small, and are not dec's.
type dec struct {
	r       reader
	depth   int        // the number of keys and indices above the value being read
	id      uint64     // the envelope's "id", once read
	haveID  bool       // whether id has been read
	errPath []pathElem // the keys and indices r.err has been returned through, innermost first
	names   *nameCache // the Decoder's, which name interns through; nil: no interning
	peer    peer       // the Decoder's: who sends the frames, which fixes the types accepted
	// arena, while the runs of a FIRES are read (runsField), is the one buffer their
	// strings and binaries are copied into (str, bin); nil otherwise: each is a copy of
	// its own.
	arena []byte
}

type pathElem struct {
	key string // a key from a field table (never allocated)
	idx int    // an array index, or -1
}

// decPool recycles decoders (and their path slices): the message types' set methods take
// the *dec through an interface call, so one made per body would escape to the heap.
var decPool = sync.Pool{New: func() any { return new(dec) }}

func (d *dec) reset(body []byte) {
	d.r = reader{body: body}
	d.depth, d.id, d.haveID = 0, 0, false
	d.errPath = d.errPath[:0]
	d.arena = nil
}

// str reads a UTF-8 string of at most limit bytes: copied into d.arena while there is
// one, else a copy of its own (reader.str).
func (d *dec) str(limit int) (string, *Error) {
	if d.arena == nil {
		return d.r.str(limit)
	}
	b, err := d.r.strBytes(limit)
	if err != nil || len(b) == 0 {
		return "", err
	}
	b = d.keep(b)
	return unsafe.String(&b[0], len(b)), nil
}

// bin reads a binary of at most limit bytes, empty is nil: copied into d.arena while
// there is one, else a copy of its own (reader.bin).
func (d *dec) bin(limit int) ([]byte, *Error) {
	if d.arena == nil {
		return d.r.bin(limit)
	}
	b, err := d.binView(limit)
	if err != nil || len(b) == 0 {
		return nil, err
	}
	return d.keep(b), nil
}

// binView reads a binary of at most limit bytes, aliased into the body: for copying
// before the body's decode ends (dec.bin, Task.checkFields), never for keeping.
func (d *dec) binView(limit int) ([]byte, *Error) {
	if !isBin(d.r.peek()) {
		return nil, d.r.wrongType("binary")
	}
	return d.r.raw(limit)
}

// keep copies b to the end of d.arena and returns the copy, its capacity cut to its
// length, so that appending to one run's payload never writes over the next run's
// bytes. The arena holds the body's bytes left when it was made, more than all the
// values after that can take, so it never grows; if it did, the values kept before
// would keep the old array, unchanged: nothing written into the arena is ever written
// again.
func (d *dec) keep(b []byte) []byte {
	at := len(d.arena)
	d.arena = append(d.arena, b...)
	return d.arena[at:len(d.arena):len(d.arena)]
}

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

// finish completes err, which decoding returned at the top: an error of r.badField gets
// its field, one of r.badFrame its place; other errors were made complete.
func (d *dec) finish(err *Error) {
	if err != d.r.err {
		return
	}
	switch err.Code {
	case CodeBadField:
		err.Field = d.fieldPath()
	case CodeBadFrame:
		if p := d.fieldPath(); p != "" {
			err.Message += " (in " + p + ")"
		}
		err.Message += " at byte " + strconv.Itoa(d.r.errAt)
	}
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
		return d.r.badFrame("nesting deeper than %d", maxDepth)
	}
	n, err := d.r.mapLen()
	if err != nil {
		return err
	}
	var present uint64
	next := 0 // the key expected next: encoders that write keys in table order hit it
	for range n {
		i, err := d.r.key(t, next)
		if err != nil {
			return err
		}
		next = i + 1
		if i < 0 {
			if err := d.r.skip(depth + 1); err != nil {
				return err
			}
			continue
		}
		if present&(1<<i) != 0 {
			return d.at(d.r.badField("key appears twice"), t.keys[i])
		}
		if !d.r.isNil() {
			present |= 1 << i
			var err *Error
			switch {
			case i >= off:
				d.depth = depth + 1
				err = t.read(x, d, i-off)
			case i == 0: // "t": its value was read by findType
				_, err = d.r.uint()
			default: // "id"
				d.id, err = d.r.uint()
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
				return d.at(d.r.badField("required field is missing"), key)
			}
		}
	}
	if t.checked {
		return x.(checker).checkFields(d, present>>off)
	}
	return nil
}

// sub reads a nested map value.
func (d *dec) sub(x decodable) *Error { return d.readMap(x, d.depth) }

// uintMax reads an unsigned integer of at most limit.
func (d *dec) uintMax(limit uint64) (uint64, *Error) {
	v, err := d.r.uint()
	if err == nil && v > limit {
		return 0, d.r.badField("%d exceeds %d", v, limit)
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

// message reads a whole body: a map whose "t" selects the message type.
func (d *dec) message() (Message, *Error) {
	c, err := d.r.code()
	if err != nil {
		return nil, d.r.badFrame("empty body")
	}
	if !isMap(c) {
		return nil, d.r.badFrame("body is a %s, not a map", typeName(c))
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
	if d.r.left() != 0 {
		return nil, d.r.badFrame("%d bytes after the message", d.r.left())
	}
	m.setID(d.id)
	d.peer.saw(m)
	return m, nil
}

// findType returns the value of the top-level "t" without consuming anything: from the
// first key when "t" is first (as this package writes it), else by a scan of the map
// with a copy of the reader, whose cursor moves while d.r's stays.
func (d *dec) findType() (uint64, *Error) {
	// As this package writes it: a fixmap whose first key is "t", a positive fixint.
	if b := d.r.body[d.r.off:]; len(b) >= 4 && b[0] > codeFixMap && b[0] < codeFixArray &&
		int(b[0]&0x0f) <= (len(b)-1)/2 && b[1] == codeFixStr|1 && b[2] == 't' && b[3] <= 0x7f {
		return uint64(b[3]), nil
	}
	scan := d.r
	t, err := scanType(&scan)
	// The scan's error, if one of its own reads made it, is completed by finish as d.r's.
	d.r.err, d.r.errAt = scan.err, scan.errAt
	return t, err
}

// scanType reads the top-level map r is at, to the value of its "t".
func scanType(r *reader) (uint64, *Error) {
	n, err := r.mapLen()
	if err != nil {
		return 0, err
	}
	for range n {
		if !isStr(r.peek()) {
			return 0, newError(CodeBadFrame, "", "a top-level key is not a string")
		}
		k, err := r.raw(math.MaxInt)
		if err != nil {
			return 0, err
		}
		if string(k) == "t" {
			v, err := r.uint()
			if err != nil {
				return 0, newError(CodeBadFrame, "t", "\"t\" is not an unsigned integer")
			}
			return v, nil
		}
		if err := r.skip(1); err != nil {
			return 0, err
		}
	}
	return 0, newError(CodeBadFrame, "t", "no \"t\" key: the message type is missing")
}

// peekID finds a top-level "id" in body, for an error reply; 0 when there is none.
func peekID(body []byte) uint64 {
	r := reader{body: body}
	n, err := r.mapLen()
	if err != nil {
		return 0
	}
	for range n {
		if !isStr(r.peek()) {
			return 0
		}
		k, err := r.raw(math.MaxInt)
		if err != nil {
			return 0
		}
		if string(k) == "id" {
			v, _ := r.uint()
			return v
		}
		if r.skip(1) != nil {
			return 0
		}
	}
	return 0
}
