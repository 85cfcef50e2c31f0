package protocol

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// encoding is one msgpack value in one of its possible forms.
type encoding struct {
	name string
	b    []byte
}

// intForms returns v in every msgpack integer form that holds it, written by the
// msgpack library's width-preserving methods (as a foreign encoder may write them).
func intForms(t *testing.T, v int64, u uint64, neg bool) []encoding {
	var out []encoding
	add := func(name string, f func(e *msgpack.Encoder) error) {
		out = append(out, encoding{name, encLib(t, f)})
	}
	if !neg {
		if u <= math.MaxInt8 {
			add("positive fixint", func(e *msgpack.Encoder) error { return e.EncodeUint(u) })
		}
		if u <= math.MaxUint8 {
			add("uint8", func(e *msgpack.Encoder) error { return e.EncodeUint8(uint8(u)) })
		}
		if u <= math.MaxUint16 {
			add("uint16", func(e *msgpack.Encoder) error { return e.EncodeUint16(uint16(u)) })
		}
		if u <= math.MaxUint32 {
			add("uint32", func(e *msgpack.Encoder) error { return e.EncodeUint32(uint32(u)) })
		}
		add("uint64", func(e *msgpack.Encoder) error { return e.EncodeUint64(u) })
		if u > math.MaxInt64 {
			return out
		}
		v = int64(u)
	}
	if v >= -32 && v < 0 {
		add("negative fixint", func(e *msgpack.Encoder) error { return e.EncodeInt(v) })
	}
	if v >= math.MinInt8 && v <= math.MaxInt8 {
		add("int8", func(e *msgpack.Encoder) error { return e.EncodeInt8(int8(v)) })
	}
	if v >= math.MinInt16 && v <= math.MaxInt16 {
		add("int16", func(e *msgpack.Encoder) error { return e.EncodeInt16(int16(v)) })
	}
	if v >= math.MinInt32 && v <= math.MaxInt32 {
		add("int32", func(e *msgpack.Encoder) error { return e.EncodeInt32(int32(v)) })
	}
	add("int64", func(e *msgpack.Encoder) error { return e.EncodeInt64(v) })
	return out
}

// lenForms returns a str, bin, array or map header for n in every form that holds it:
// the fix form (fix|n, when n < fixMax), then the 8-bit (code8, if the family has one),
// 16-bit (code16) and 32-bit (code16+1) forms.
func lenForms(n int, fix byte, fixMax int, code8, code16 byte) []encoding {
	var out []encoding
	if n < fixMax {
		out = append(out, encoding{"fix", []byte{fix | byte(n)}})
	}
	if code8 != 0 && n <= math.MaxUint8 {
		out = append(out, encoding{"8-bit", []byte{code8, byte(n)}})
	}
	if n <= math.MaxUint16 {
		out = append(out, encoding{"16-bit", binary.BigEndian.AppendUint16([]byte{code16}, uint16(n))})
	}
	return append(out, encoding{"32-bit", binary.BigEndian.AppendUint32([]byte{code16 + 1}, uint32(n))})
}

// readerOf returns a reader at the start of body.
func readerOf(body []byte) *reader { return &reader{body: body} }

// checkTruncations decodes every proper prefix of b with read: each is BAD_FRAME.
func checkTruncations(t *testing.T, what string, b []byte, read func(r *reader) *Error) {
	t.Helper()
	for cut := range len(b) {
		if err := read(readerOf(b[:cut])); err == nil || err.Code != CodeBadFrame {
			t.Fatalf("%s cut to %d of %d bytes: got %v, want BAD_FRAME", what, cut, len(b), err)
		}
	}
}

// checkConsumed checks that read consumed exactly b, and that skip does too.
func checkConsumed(t *testing.T, what string, b []byte, r *reader) {
	t.Helper()
	if r.off != len(b) {
		t.Fatalf("%s: consumed %d of %d bytes", what, r.off, len(b))
	}
	if s := readerOf(b); s.skip(0) != nil || s.off != len(b) {
		t.Fatalf("%s: skip consumed %d of %d bytes", what, s.off, len(b))
	}
}

// TestDecIntegers reads every integer edge (and its neighbours) in every msgpack form
// that holds it: uint accepts exactly the values >= 0, int exactly those that fit an
// int64, float all of them as int does; every form is consumed exactly, and every
// truncation is BAD_FRAME.
func TestDecIntegers(t *testing.T) {
	type value struct {
		v   int64  // when neg
		u   uint64 // when not neg
		neg bool
	}
	var cases []value
	for _, edge := range widthEdges {
		for _, v := range []int64{edge - 1, edge, edge + 1} { // wraps at the int64 ends: still valid values
			cases = append(cases, value{v, uint64(v), v < 0})
		}
	}
	for _, u := range []uint64{math.MaxInt64 + 1, math.MaxUint64 - 1, math.MaxUint64} {
		cases = append(cases, value{0, u, false})
	}
	for _, c := range cases {
		for _, f := range intForms(t, c.v, c.u, c.neg) {
			what := f.name
			r := readerOf(f.b)
			u, err := r.uint()
			switch {
			case c.neg && (err == nil || err.Code != CodeBadField):
				t.Fatalf("uint of %d as %s: %v, %v; want BAD_FIELD", c.v, what, u, err)
			case !c.neg && (err != nil || u != c.u):
				t.Fatalf("uint of %d as %s: %v, %v", c.u, what, u, err)
			case !c.neg:
				checkConsumed(t, what, f.b, r)
			}
			r = readerOf(f.b)
			v, err := r.int()
			fits := c.neg || c.u <= math.MaxInt64
			want := c.v
			if !c.neg {
				want = int64(c.u)
			}
			switch {
			case !fits && (err == nil || err.Code != CodeBadField):
				t.Fatalf("int of %d as %s: %v, %v; want BAD_FIELD", c.u, what, v, err)
			case fits && (err != nil || v != want):
				t.Fatalf("int of %d as %s: %v, %v", want, what, v, err)
			case fits:
				checkConsumed(t, what, f.b, r)
				if x, err := readerOf(f.b).float(); err != nil || x != float64(want) {
					t.Fatalf("float of %d as %s: %v, %v", want, what, x, err)
				}
			}
			checkTruncations(t, what, f.b, func(r *reader) *Error { _, err := r.int(); return err })
		}
	}
}

// TestDecFloats reads float32 and float64 as the library writes them.
func TestDecFloats(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1.5, -0.25, 1e300, math.MaxFloat64, math.SmallestNonzeroFloat64,
		math.Inf(1), math.Inf(-1), math.NaN()} {
		forms := []struct {
			b    []byte
			want float64
		}{
			{encLib(t, func(e *msgpack.Encoder) error { return e.EncodeFloat64(f) }), f},
			{encLib(t, func(e *msgpack.Encoder) error { return e.EncodeFloat32(float32(f)) }), float64(float32(f))},
		}
		for _, form := range forms {
			r := readerOf(form.b)
			got, err := r.float()
			if err != nil || math.Float64bits(got) != math.Float64bits(form.want) && !(math.IsNaN(got) && math.IsNaN(form.want)) {
				t.Fatalf("float % x: %v, %v; want %v", form.b, got, err, form.want)
			}
			checkConsumed(t, "float", form.b, r)
			checkTruncations(t, "float", form.b, func(r *reader) *Error { _, err := r.float(); return err })
			if _, err := readerOf(form.b).int(); err == nil || err.Code != CodeBadField {
				t.Fatalf("int of a float: %v, want BAD_FIELD", err)
			}
		}
	}
}

// TestDecLengths reads strings, binaries, arrays and maps of every length edge in every
// header form that holds the length, checks the limits, and truncates each.
func TestDecLengths(t *testing.T) {
	for _, n := range lengthEdges {
		s := strings.Repeat("é", n/2) + strings.Repeat("x", n%2) // n bytes of UTF-8
		for _, h := range lenForms(n, codeFixStr, 32, codeStr8, codeStr16) {
			b := append(h.b, s...)
			what := "str " + h.name
			r := readerOf(b)
			if got, err := r.str(n); err != nil || got != s {
				t.Fatalf("%s of %d bytes: %v", what, n, err)
			}
			checkConsumed(t, what, b, r)
			checkTruncations(t, what, b, func(r *reader) *Error { _, err := r.str(n); return err })
			if n > 0 {
				if _, err := readerOf(b).str(n - 1); err == nil || err.Code != CodeBadField {
					t.Fatalf("%s of %d bytes, limit %d: %v, want BAD_FIELD", what, n, n-1, err)
				}
			}
			if _, err := readerOf(b).bin(n); err == nil || err.Code != CodeBadField {
				t.Fatalf("bin of a %s: %v, want BAD_FIELD", what, err)
			}
		}
		p := []byte(s)
		for _, h := range lenForms(n, 0, 0, codeBin8, codeBin16) {
			b := append(h.b, p...)
			what := "bin " + h.name
			r := readerOf(b)
			got, err := r.bin(n)
			if err != nil || !bytes.Equal(got, p) || (n == 0) != (got == nil) {
				t.Fatalf("%s of %d bytes: %v", what, n, err)
			}
			if n > 0 && &got[0] == &b[len(h.b)] {
				t.Fatalf("%s: the binary aliases the body", what)
			}
			checkConsumed(t, what, b, r)
			checkTruncations(t, what, b, func(r *reader) *Error { _, err := r.bin(n); return err })
			if _, err := readerOf(b).str(n); err == nil || err.Code != CodeBadField {
				t.Fatalf("str of a %s: %v, want BAD_FIELD", what, err)
			}
		}
		for _, h := range lenForms(n, codeFixArray, 16, 0, codeArray16) {
			b := append(h.b, bytes.Repeat([]byte{codeNil}, n)...)
			checkHeader(t, "array "+h.name, n, len(h.b), b, func(r *reader) (int, *Error) { return r.arrayLen(n) })
			if n > 0 {
				if _, err := readerOf(b).arrayLen(n - 1); err == nil || err.Code != CodeBadField {
					t.Fatalf("array %s of %d, limit %d: %v, want BAD_FIELD", h.name, n, n-1, err)
				}
			}
		}
		for _, h := range lenForms(n, codeFixMap, 16, 0, codeMap16) {
			b := append(h.b, bytes.Repeat([]byte{1}, 2*n)...)
			checkHeader(t, "map "+h.name, n, len(h.b), b, (*reader).mapLen)
		}
	}
}

// checkHeader checks that read takes the first hdr bytes of b as a header of n entries,
// that skip consumes all of b, and that every truncation of b is BAD_FRAME.
func checkHeader(t *testing.T, what string, n, hdr int, b []byte, read func(r *reader) (int, *Error)) {
	t.Helper()
	r := readerOf(b)
	if got, err := read(r); err != nil || got != n || r.off != hdr {
		t.Fatalf("%s of %d: %v, %v; consumed %d bytes of a %d-byte header", what, n, got, err, r.off, hdr)
	}
	if s := readerOf(b); s.skip(0) != nil || s.off != len(b) {
		t.Fatalf("%s: skip consumed %d of %d bytes", what, s.off, len(b))
	}
	checkTruncations(t, what, b, func(r *reader) *Error { return r.skip(0) })
}

// TestDecScalars: booleans, nil and extensions are read or skipped exactly, and a value
// of one family is never accepted as another.
func TestDecScalars(t *testing.T) {
	for _, v := range []bool{false, true} {
		b := encLib(t, func(e *msgpack.Encoder) error { return e.EncodeBool(v) })
		r := readerOf(b)
		if got, err := r.bool(); err != nil || got != v {
			t.Fatalf("bool %v: %v, %v", v, got, err)
		}
		checkConsumed(t, "bool", b, r)
		if _, err := readerOf(b).uint(); err == nil || err.Code != CodeBadField {
			t.Fatalf("uint of a bool: %v, want BAD_FIELD", err)
		}
	}
	if r := readerOf([]byte{codeNil}); !r.isNil() || r.off != 1 {
		t.Fatal("nil not consumed")
	}
	if r := readerOf([]byte{0}); r.isNil() || r.off != 0 {
		t.Fatal("0 taken for nil")
	}
	if r := readerOf(nil); r.isNil() {
		t.Fatal("end of body taken for nil")
	}
	exts := [][]byte{
		{0xd4, 1, 9}, {0xd5, 1, 9, 9}, {0xd6, 1, 9, 9, 9, 9}, append([]byte{0xd7, 1}, make([]byte, 8)...),
		append([]byte{0xd8, 1}, make([]byte, 16)...), {0xc7, 2, 1, 9, 9}, {0xc8, 0, 2, 1, 9, 9},
		{0xc9, 0, 0, 0, 2, 1, 9, 9}, {0xc7, 0, 1},
	}
	for _, b := range exts {
		s := readerOf(b)
		if err := s.skip(0); err != nil || s.off != len(b) {
			t.Fatalf("skip of ext % x: consumed %d, %v", b, s.off, err)
		}
		checkTruncations(t, "ext", b, func(r *reader) *Error { return r.skip(0) })
		if _, err := readerOf(b).int(); err == nil || err.Code != CodeBadField {
			t.Fatalf("int of ext % x: %v, want BAD_FIELD", b, err)
		}
	}
	if err := readerOf([]byte{0xc1}).skip(0); err == nil || err.Code != CodeBadFrame {
		t.Fatalf("skip of 0xc1: %v, want BAD_FRAME", err)
	}
	if _, err := readerOf(nil).uint(); err == nil || err.Code != CodeBadFrame {
		t.Fatalf("uint at the end of the body: %v, want BAD_FRAME", err)
	}
}
