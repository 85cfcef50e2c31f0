package protocol

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// widthEdges are the integers at which a msgpack encoding changes width, with their
// neighbours added by the tests: fixint, 8, 16, 32 and 64 bits, unsigned and signed.
var widthEdges = []int64{0, 1, 31, 32, 33, 127, 128, 255, 256, 32767, 32768, 65535, 65536,
	math.MaxInt32, math.MaxUint32, 1 << 32, math.MaxInt64,
	-1, -31, -32, -33, -127, -128, -129, -32767, -32768, -32769,
	math.MinInt32 + 1, math.MinInt32, math.MinInt32 - 1, math.MinInt64 + 1, math.MinInt64}

// lengthEdges are the lengths at which a str, bin, array or map header changes form.
var lengthEdges = []int{0, 1, 15, 16, 17, 31, 32, 33, 255, 256, 257, 65535, 65536, 65537}

// encLib encodes with the msgpack library, as the encoder this package had before did.
func encLib(t *testing.T, f func(e *msgpack.Encoder) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f(msgpack.NewEncoder(&b)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// encOwn encodes with enc.
func encOwn(f func(c *enc)) []byte {
	var c enc
	f(&c)
	return c.buf
}

// TestEncMatchesLibrary proves that enc writes what the msgpack library's Encoder wrote
// for every kind of value this package encodes: each width edge and its neighbours,
// every header length edge, special floats, and 20,000 random integers of every width.
func TestEncMatchesLibrary(t *testing.T) {
	check := func(what string, v any, own func(c *enc), lib func(e *msgpack.Encoder) error) {
		t.Helper()
		if got, want := encOwn(own), encLib(t, lib); !bytes.Equal(got, want) {
			t.Fatalf("%s %v: enc writes % x, the library % x", what, v, got[:min(len(got), 12)], want[:min(len(want), 12)])
		}
	}
	checkInt := func(v int64) {
		t.Helper()
		check("int", v, func(c *enc) { c.int(v) }, func(e *msgpack.Encoder) error { return e.EncodeInt(v) })
	}
	checkUint := func(v uint64) {
		t.Helper()
		check("uint", v, func(c *enc) { c.uint(v) }, func(e *msgpack.Encoder) error { return e.EncodeUint(v) })
	}
	for _, edge := range widthEdges {
		for _, v := range []int64{edge - 1, edge, edge + 1} { // wraps at the int64 ends: still valid values
			checkInt(v)
			checkUint(uint64(v))
		}
	}
	checkUint(math.MaxUint64)
	checkUint(math.MaxUint64 - 1)
	checkUint(1 << 63)
	r := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		u := r.Uint64() >> r.IntN(64) // every width equally often
		checkUint(u)
		checkInt(int64(u))
		checkInt(-int64(u >> 1))
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1.5, 0.25, 1e300, math.MaxFloat64, math.SmallestNonzeroFloat64,
		math.Inf(1), math.Inf(-1), math.NaN()} {
		check("float", f, func(c *enc) { c.float(f) }, func(e *msgpack.Encoder) error { return e.EncodeFloat64(f) })
	}
	for _, v := range []bool{false, true} {
		check("bool", v, func(c *enc) { c.bool(v) }, func(e *msgpack.Encoder) error { return e.EncodeBool(v) })
	}
	for _, n := range append(lengthEdges, 1<<20) {
		s := strings.Repeat("x", n)
		check("string of length", n, func(c *enc) { c.str(s) }, func(e *msgpack.Encoder) error { return e.EncodeString(s) })
		check("key-value string of length", n, func(c *enc) { c.kStr(s, s) }, func(e *msgpack.Encoder) error {
			_ = e.EncodeString(s)
			return e.EncodeString(s)
		})
		p := []byte(s)
		// The old encoder wrote a binary as the library's header, then the bytes.
		check("binary of length", n, func(c *enc) { c.bin(p) }, func(e *msgpack.Encoder) error {
			_ = e.EncodeBytesLen(n)
			return e.Encode(msgpack.RawMessage(p))
		})
		check("map header", n, func(c *enc) { c.mapLen(n) }, func(e *msgpack.Encoder) error { return e.EncodeMapLen(n) })
		check("array header", n, func(c *enc) { c.arrayLen(n) }, func(e *msgpack.Encoder) error { return e.EncodeArrayLen(n) })
	}
	check("empty binary", nil, func(c *enc) { c.bin(nil) }, func(e *msgpack.Encoder) error { return e.EncodeBytesLen(0) })
	check("key-value uint", nil, func(c *enc) { c.kUint("run", 1<<40) }, func(e *msgpack.Encoder) error {
		_ = e.EncodeString("run")
		return e.EncodeUint(1 << 40)
	})
	check("key-value int", nil, func(c *enc) { c.kInt("due", -1<<40) }, func(e *msgpack.Encoder) error {
		_ = e.EncodeString("due")
		return e.EncodeInt(-1 << 40)
	})
}
