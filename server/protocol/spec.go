package protocol

import (
	"maps"
	"slices"
	"strconv"
	"unsafe"

	"github.com/tock-sched/tock/core/task"
)

// A map type's keys are defined once, as a list of fields (messages.go): each names its
// key, says whether it is required, and reads and writes its value through an accessor of
// the Go struct. From that one list come the decoder's key table, the required mask (bit
// i for the i-th key, set from the field's own flag, never written by hand) and the
// encoder's key order and omissions. The primitives the fields call (reader.uint,
// enc.str, ...) are the hand-tuned ones of reader.go and encode.go.
//
// Costs: the plain kinds (uint, int, string, bool, binary, a named enum: most fields,
// all of FIRE's and ACK's) are read and written in place: one switch case around the
// primitive, the value at the offset its accessor gave at init (the one use of unsafe,
// the offset checked to lie inside the struct), the key written as precomputed bytes.
// Any other field costs two or three indirect calls (the table's, the field's, its
// accessor). No allocation beyond the primitive's own.

// field is one key of the map type M. A plain field (kind not viaFuncs) is read and
// written in place, at offset off in M; any other through read and write.
type field[M any] struct {
	key      string
	required bool
	kind     plain
	off      uintptr                   // plain: where the value lies in M (taken from the accessor at init)
	limit    uint64                    // plain: the largest uint, or the longest string in bytes
	names    []string                  // plainEnum: the name of each value
	read     func(m *M, d *dec) *Error // reads the value into m
	// write writes key and m's value and returns true, or, when opt (the key is
	// optional) and the value is zero, writes nothing and returns false.
	write func(m *M, c *enc, key string, opt bool) bool
	omit  func(m *M) bool    // set by omitIf: replaces the zero test
	after func(m *M, c *enc) // set by refuse: runs when the key was written
	wire  string             // the key as the encoder writes it (a fixstr), set by newMapSpec
}

// plain is a kind of field read and written in place: one switch case instead of
// indirect calls, on the codec's hot paths (FIRE, ACK, TASK_STATUS).
type plain uint8

const (
	viaFuncs plain = iota // not plain: call read and write
	plainUint
	plainInt
	plainStr
	plainName // a plainStr the Decoder interns
	plainBool
	plainEnum // a uint8 enum, on the wire the name of its value
	plainBin  // a []byte, empty is nil
)

// offsetOf returns the offset in M of the value p returns. It panics for an accessor
// that returns a pointer outside the struct (a programming error, at init).
func offsetOf[M, V any](p func(*M) *V) uintptr {
	m := new(M)
	off := uintptr(unsafe.Pointer(p(m))) - uintptr(unsafe.Pointer(m))
	if off+unsafe.Sizeof(*new(V)) > unsafe.Sizeof(*m) {
		panic("protocol: an accessor outside its struct")
	}
	return off
}

// req returns f made required: the decoder refuses a map without it, and the encoder
// always writes it.
func (f field[M]) req() field[M] {
	f.required = true
	return f
}

// omitIf returns f written only when skip(m) is false (instead of when it is not zero).
func (f field[M]) omitIf(skip func(m *M) bool) field[M] {
	f.omit = skip
	return f
}

// refuse returns f whose encoder records a failure of the field named key, with msg,
// when f is written and bad(m): a combination of values the decoder would refuse.
func (f field[M]) refuse(key, msg string, bad func(m *M) bool) field[M] {
	f.after = func(m *M, c *enc) {
		if bad(m) {
			c.fail(key, msg)
		}
	}
	return f
}

// maxKeys bounds a map type's keys, the envelope's "t" and "id" included: the encoder
// writes every map header as a fixmap and patches its count in once the fields are
// written (patchMapLen). A map may have keys that are never all written at once; one
// written with more than 15 (FIRE's rarest: a traced, versioned shard's run with a
// payload) gets a map 16 header instead.
const maxKeys = 20

// patchMapLen sets the count of the map whose fixmap header is c.buf[at] to n: in the
// header, or, for n > 15, in a map 16 header that takes the fixmap's place.
func patchMapLen(c *enc, at, n int) {
	if n < 16 {
		c.buf[at] |= byte(n)
		return
	}
	c.buf = append(c.buf, 0, 0)
	copy(c.buf[at+3:], c.buf[at+1:len(c.buf)-2])
	c.buf[at], c.buf[at+1], c.buf[at+2] = codeMap16, byte(n>>8), byte(n)
}

// mapSpec is a map type's fields and the decoder table made from them.
type mapSpec[M any] struct {
	fields []field[M]
	table  fieldTable
}

// newMapSpec builds the spec of the map type M from its fields, in the order the encoder
// writes them. Its table is checked when M has a checkFields rule. It panics (at package
// initialisation) on a bad key list (see checkKeys).
func newMapSpec[M any](envelope bool, fs ...field[M]) *mapSpec[M] {
	s := &mapSpec[M]{fields: fs}
	var keys []string
	if envelope {
		keys = []string{"t", "id"}
	}
	off := len(keys)
	for i := range fs {
		f := &fs[i]
		keys = append(keys, f.key)
		f.wire = string([]byte{codeFixStr | byte(len(f.key)&0x1f)}) + f.key
		if f.required {
			s.table.required |= 1 << (off + i)
		}
	}
	checkKeys(keys, maxKeys)
	s.table.keys = keys
	if envelope {
		s.table.required |= s.table.bit("t") | s.table.bit("id")
	}
	_, s.table.checked = any(new(M)).(checker)
	s.table.read = func(x any, d *dec, i int) (err *Error) {
		f := &s.fields[i]
		at := unsafe.Add(unsafe.Pointer(x.(*M)), f.off)
		switch f.kind {
		case plainUint:
			*(*uint64)(at), err = d.uintMax(f.limit)
		case plainInt:
			*(*int64)(at), err = d.r.int()
		case plainStr:
			*(*string)(at), err = d.str(int(f.limit))
		case plainName:
			*(*string)(at), err = d.name(int(f.limit))
		case plainBool:
			*(*bool)(at), err = d.r.bool()
		case plainEnum:
			*(*uint8)(at), err = enum[uint8](d, f.names)
		case plainBin:
			*(*[]byte)(at), err = d.bin(int(f.limit))
		default:
			err = f.read(x.(*M), d)
		}
		return err
	}
	return s
}

// checkKeys panics (at package initialisation) on a key list with a key twice, a key
// longer than a fixstr holds (31 bytes, the form the encoder writes and the decoder
// expects first), or more keys than limit allows: maxKeys for a spec, whose encoder
// writes a fixmap header; maxHandKeys for a hand-written map type (handTable).
func checkKeys(keys []string, limit int) {
	for i, k := range keys {
		if slices.Contains(keys[:i], k) {
			panic("protocol: key " + strconv.Quote(k) + " given twice")
		}
		if len(k) > 31 {
			panic("protocol: key " + strconv.Quote(k) + " is no fixstr")
		}
	}
	if len(keys) > limit {
		panic("protocol: more than " + strconv.Itoa(limit) + " keys in one map")
	}
}

// writeFields writes m's fields that are not omitted, in order, and returns how many.
func (s *mapSpec[M]) writeFields(c *enc, m *M) int {
	n := 0
	for i := range s.fields {
		f := &s.fields[i]
		opt := !f.required
		if f.omit != nil {
			if f.omit(m) {
				continue
			}
			opt = false
		}
		wrote := n
		at := unsafe.Add(unsafe.Pointer(m), f.off)
		switch f.kind {
		case plainUint:
			if v := *(*uint64)(at); !opt || v != 0 {
				c.buf = append(c.buf, f.wire...)
				c.uint(v)
				n++
			}
		case plainInt:
			if v := *(*int64)(at); !opt || v != 0 {
				c.buf = append(c.buf, f.wire...)
				c.int(v)
				n++
			}
		case plainStr, plainName:
			if v := *(*string)(at); !opt || v != "" {
				c.buf = append(c.buf, f.wire...)
				c.str(v)
				n++
			}
		case plainBool:
			if v := *(*bool)(at); !opt || v {
				c.buf = append(c.buf, f.wire...)
				c.bool(v)
				n++
			}
		case plainEnum:
			if v := *(*uint8)(at); !opt || v != 0 {
				putEnum(c, f.key, f.names, v)
				n++
			}
		case plainBin:
			if v := *(*[]byte)(at); !opt || len(v) > 0 {
				c.buf = append(c.buf, f.wire...)
				c.bin(v)
				n++
			}
		default:
			if f.write(m, c, f.key, opt) {
				n++
			}
		}
		if f.after != nil && n > wrote {
			f.after(m, c)
		}
	}
	return n
}

// writeMap writes m as a map: a fixmap header (maxKeys holds), patched once the count
// is known.
func (s *mapSpec[M]) writeMap(c *enc, m *M) {
	at := len(c.buf)
	c.buf = append(c.buf, codeFixMap)
	patchMapLen(c, at, s.writeFields(c, m))
}

// readMap reads a map into m.
func (s *mapSpec[M]) readMap(d *dec, m *M) *Error {
	return d.readFields(m, &s.table, 0, d.depth)
}

// within lifts the fields of an embedded or nested struct E to its container M.
func within[M, E any](get func(m *M) *E, fs ...field[E]) []field[M] {
	out := make([]field[M], len(fs))
	for i, f := range fs {
		out[i] = field[M]{key: f.key, required: f.required, kind: f.kind, limit: f.limit, names: f.names}
		if f.kind != viaFuncs {
			out[i].off = offsetOf(get) + f.off
		} else {
			out[i].read = func(m *M, d *dec) *Error { return f.read(get(m), d) }
			out[i].write = func(m *M, c *enc, key string, opt bool) bool { return f.write(get(m), c, key, opt) }
		}
		if f.omit != nil {
			out[i].omit = func(m *M) bool { return f.omit(get(m)) }
		}
		if f.after != nil {
			out[i].after = func(m *M, c *enc) { f.after(get(m), c) }
		}
	}
	return out
}

// ---- field kinds: optional, left out when zero, unless made req() ----

// plainField is a field of a plain kind; the typed constructors below, its only callers,
// pair each kind with its Go type.
func plainField[M, V any](key string, kind plain, limit uint64, p func(*M) *V) field[M] {
	return field[M]{key: key, kind: kind, limit: limit, off: offsetOf(p)}
}

func uintField[M any](key string, p func(*M) *uint64) field[M] {
	return plainField(key, plainUint, 1<<64-1, p)
}

// uintMaxField is a uint of at most limit.
func uintMaxField[M any](key string, limit uint64, p func(*M) *uint64) field[M] {
	return plainField(key, plainUint, limit, p)
}

func intField[M any](key string, p func(*M) *int64) field[M] {
	return plainField(key, plainInt, 0, p)
}

// strField is a UTF-8 string of at most limit bytes.
func strField[M any](key string, limit int, p func(*M) *string) field[M] {
	return plainField(key, plainStr, uint64(limit), p)
}

// nameField is a strField the Decoder interns (namespaces, task types).
func nameField[M any](key string, limit int, p func(*M) *string) field[M] {
	return plainField(key, plainName, uint64(limit), p)
}

func boolField[M any](key string, p func(*M) *bool) field[M] {
	return plainField(key, plainBool, 0, p)
}

// positiveField is an int > 0, left out when <= 0 (0: none); a negative one is BAD_FIELD.
func positiveField[M any](key string, p func(*M) *int64) field[M] {
	return field[M]{key: key,
		read: func(m *M, d *dec) *Error {
			v, err := d.r.int()
			if err == nil && v < 0 {
				return d.r.badField("negative %s", key)
			}
			*p(m) = v
			return err
		},
		write: func(m *M, c *enc, key string, opt bool) bool {
			v := *p(m)
			if opt && v <= 0 {
				return false
			}
			c.kInt(key, v)
			return true
		},
	}
}

// binField is a binary of at most limit bytes, left out when empty.
func binField[M any](key string, limit int, p func(*M) *[]byte) field[M] {
	return plainField(key, plainBin, uint64(limit), p)
}

// enumField is one of names (a value with no name cannot be encoded).
func enumField[M any, T ~uint8](key string, names []string, p func(*M) *T) field[M] {
	f := plainField(key, plainEnum, 0, p)
	f.names = names
	return f
}

// scalarField is a value of type V that read and write (key, then value) read and
// write, left out when zero.
func scalarField[M any, V comparable](key string, read func(d *dec) (V, *Error), write func(c *enc, key string, v V), p func(*M) *V) field[M] {
	return field[M]{key: key,
		read: func(m *M, d *dec) (err *Error) {
			*p(m), err = read(d)
			return err
		},
		write: func(m *M, c *enc, key string, opt bool) bool {
			var zero V
			v := *p(m)
			if opt && v == zero {
				return false
			}
			write(c, key, v)
			return true
		},
	}
}

func stateField[M any](key string, p func(*M) *task.State) field[M] {
	return scalarField(key, (*dec).state, putState, p)
}

func codeField[M any](key string, p func(*M) *Code) field[M] {
	return scalarField(key, (*dec).errCode, func(c *enc, key string, v Code) { c.kUint(key, uint64(v)) }, p)
}

// wireMap is a map type of wiretask.go, with its own field table and encoder.
type wireMap[T any] interface {
	*T
	decodable
	encode(c *enc)
}

// subField is a nested map, read and written as e says; always written.
func subField[M, T any](key string, e elems[T], p func(*M) *T) field[M] {
	return field[M]{key: key,
		read: func(m *M, d *dec) *Error { return e.read(d, p(m)) },
		write: func(m *M, c *enc, key string, _ bool) bool {
			c.str(key)
			e.write(c, p(m))
			return true
		},
	}
}

// elems is how a nested value is read and written: an array's element, or a sub-map.
type elems[T any] struct {
	read  func(d *dec, x *T) *Error
	write func(c *enc, x *T)
}

// arrayField is an array of at most limit elements, left out when empty; the encoder
// refuses a longer one, which the decoder would.
func arrayField[M, T any](key string, limit int, e elems[T], p func(*M) *[]T) field[M] {
	return field[M]{key: key,
		read: func(m *M, d *dec) (err *Error) {
			*p(m), err = readEach(d, limit, e.read)
			return err
		},
		write: func(m *M, c *enc, key string, opt bool) bool {
			items := *p(m)
			if opt && len(items) == 0 {
				return false
			}
			if len(items) > limit {
				c.fail(key, strconv.Itoa(len(items))+" elements exceed the limit of "+strconv.Itoa(limit))
			}
			c.str(key)
			c.arrayLen(len(items))
			for i := range items {
				e.write(c, &items[i])
			}
			return true
		},
	}
}

// readEach reads an array of at most limit elements into a new []T (nil when empty),
// naming each element's index in error paths.
func readEach[T any](d *dec, limit int, read func(d *dec, x *T) *Error) ([]T, *Error) {
	n, err := d.r.arrayLen(limit)
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([]T, n)
	depth := d.depth + 1
	for i := range out {
		d.depth = depth
		if err := read(d, &out[i]); err != nil {
			return nil, d.atIdx(err, i)
		}
	}
	return out, nil
}

// runsField is FIRES' "runs": an array of at most MaxFiresRuns FIRE maps (without "t"
// and "id"), left out when empty. Decoding copies every run's task ID and payload into
// one buffer (dec.arena) as large as the bytes of the body left to read, which hold
// them all, so that a FIRES costs the same allocations whatever its number of runs: the
// slice of runs and that buffer.
func runsField[M any](p func(*M) *[]Fire) field[M] {
	f := arrayField("runs", MaxFiresRuns, specMaps(fireRunSpec), p)
	f.read = func(m *M, d *dec) (err *Error) {
		d.arena = make([]byte, 0, d.r.left())
		*p(m), err = readEach(d, MaxFiresRuns, fireRunSpec.readMapElem)
		d.arena = nil
		return err
	}
	return f
}

// readMapElem is readMap as an array's element reader.
func (s *mapSpec[M]) readMapElem(d *dec, m *M) *Error { return s.readMap(d, m) }

// wireMaps are the maps of a wireMap type.
func wireMaps[T any, P wireMap[T]]() elems[T] {
	return elems[T]{
		read:  func(d *dec, x *T) *Error { return d.sub(P(x)) },
		write: func(c *enc, x *T) { P(x).encode(c) },
	}
}

// specMaps are the maps of a map type with a spec.
func specMaps[T any](s *mapSpec[T]) elems[T] {
	return elems[T]{
		read:  func(d *dec, x *T) *Error { return s.readMap(d, x) },
		write: func(c *enc, x *T) { s.writeMap(c, x) },
	}
}

// uints are unsigned integers of at most limit.
func uints(limit uint64) elems[uint64] {
	return elems[uint64]{
		read: func(d *dec, x *uint64) (err *Error) {
			*x, err = d.uintMax(limit)
			return err
		},
		write: func(c *enc, x *uint64) { c.uint(*x) },
	}
}

// names are interned strings of at most limit bytes.
func names(limit int) elems[string] {
	return elems[string]{
		read: func(d *dec, x *string) (err *Error) {
			*x, err = d.name(limit)
			return err
		},
		write: func(c *enc, x *string) { c.str(*x) },
	}
}

// statsField is a map of at most MaxStats names to values, written in key order; left
// out when nil (an empty map is written).
func statsField[M any, V uint64 | int64](key string, read func(r *reader) (V, *Error), write func(c *enc, v V), p func(*M) *map[string]V) field[M] {
	return field[M]{key: key,
		read: func(m *M, d *dec) *Error {
			n, err := d.r.mapLen()
			if err != nil {
				return err
			}
			if n > MaxStats {
				return d.r.badField("%d entries exceed the limit of %d", n, MaxStats)
			}
			out := make(map[string]V, n)
			*p(m) = out
			for range n {
				k, err := d.r.str(MaxNameLen)
				if err != nil {
					return err
				}
				if out[k], err = read(&d.r); err != nil {
					return err
				}
			}
			return nil
		},
		write: func(m *M, c *enc, key string, opt bool) bool {
			v := *p(m)
			if opt && v == nil { // an empty map is written
				return false
			}
			c.str(key)
			c.mapLen(len(v))
			for _, k := range slices.Sorted(maps.Keys(v)) { // the same map, the same bytes
				c.str(k)
				write(c, v[k])
			}
			return true
		},
	}
}
