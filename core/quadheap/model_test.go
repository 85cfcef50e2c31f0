package quadheap

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// op is one step of the model test and the fuzz target.
type op uint8

const (
	opPush op = iota
	opRemove
	opUpdate
	opPop
	opCheck // Min, Contains, Deadline, Len: no mutation
	opGrow
	opReset
	numOps
)

// model is the reference: the set of present ids and their deadlines.
type model map[uint32]int64

// min returns the smallest deadline in m.
func (m model) min() (int64, bool) {
	first, best := true, int64(0)
	for _, d := range m {
		if first || d < best {
			first, best = false, d
		}
	}
	return best, !first
}

// step applies o to h and to m, checks h's answers against m, then calls
// verify and checks Len.
func step(t testing.TB, h *Heap, m model, o op, id uint32, deadline int64) {
	t.Helper()
	_, present := m[id]
	switch o {
	case opPush:
		if got := h.Push(id, deadline); got != !present {
			t.Fatalf("Push(%d, %d) = %v, want %v", id, deadline, got, !present)
		}
		if !present {
			m[id] = deadline
		}
	case opRemove:
		if got := h.Remove(id); got != present {
			t.Fatalf("Remove(%d) = %v, want %v", id, got, present)
		}
		delete(m, id)
	case opUpdate:
		if got := h.Update(id, deadline); got != present {
			t.Fatalf("Update(%d, %d) = %v, want %v", id, deadline, got, present)
		}
		if present {
			m[id] = deadline
		}
	case opPop, opCheck:
		var gotID uint32
		var gotD int64
		var ok bool
		if o == opPop {
			gotID, gotD, ok = h.Pop()
		} else {
			gotID, gotD, ok = h.Min()
		}
		want, wantOK := m.min()
		if ok != wantOK || gotD != want {
			t.Fatalf("op %d: got deadline %d, %v; reference minimum %d, %v", o, gotD, ok, want, wantOK)
		}
		if ok {
			if d, in := m[gotID]; !in || d != gotD {
				t.Fatalf("op %d: got id %d with deadline %d; reference has %d, %v", o, gotID, gotD, d, in)
			}
			if o == opPop {
				delete(m, gotID)
			}
		}
		d, in := m[id]
		if got := h.Contains(id); got != in {
			t.Fatalf("Contains(%d) = %v, want %v", id, got, in)
		}
		if gd, gok := h.Deadline(id); gok != in || gd != d {
			t.Fatalf("Deadline(%d) = %d, %v; want %d, %v", id, gd, gok, d, in)
		}
	case opGrow:
		h.Grow(int(deadline&0xffff), id)
	case opReset:
		h.Reset()
		clear(m)
	}
	if err := h.verify(); err != nil {
		t.Fatalf("after op %d (id %d, deadline %d): %v", o, id, deadline, err)
	}
	if h.Len() != len(m) {
		t.Fatalf("Len() = %d, reference has %d", h.Len(), len(m))
	}
}

// opMix is TestModel's mix of ops, in thousandths: a draw x from [0, 1000) picks the
// first op whose bound is above x (so opPush 40%, opReset 0.1%).
var opMix = []struct {
	below int
	op    op
}{{400, opPush}, {550, opRemove}, {750, opUpdate}, {950, opPop}, {990, opCheck}, {999, opGrow}, {1000, opReset}}

// pickOp draws one op from opMix.
func pickOp(r *rand.Rand) op {
	x := r.IntN(1000)
	for _, m := range opMix[:len(opMix)-1] {
		if x < m.below {
			return m.op
		}
	}
	return opMix[len(opMix)-1].op
}

func TestModel(t *testing.T) {
	for _, tc := range []struct {
		name      string
		seed      uint64
		ops       int
		ids       uint32 // ids drawn from [0, ids)
		deadlines int64  // deadlines drawn from [0, deadlines); 0 = any int64
	}{
		// Few ids and deadlines: many duplicates, absent ids and ties.
		{"dense ties", 1, 20000, 64, 16},
		// More ids than the heap holds at once, arbitrary deadlines.
		{"wide", 2, 10000, 1024, 0},
		// Sparse ids exercise pos growth.
		{"sparse ids", 3, 3000, 1 << 12, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(tc.seed, 0x9e3779b97f4a7c15))
			var h Heap
			m := make(model)
			for range tc.ops {
				o := pickOp(r)
				id := r.Uint32N(tc.ids)
				if o == opRemove || o == opUpdate {
					// Mostly target present ids so those paths run often.
					if h.Len() > 0 && r.IntN(4) > 0 {
						id = h.entries[r.IntN(h.Len())].id
					}
				}
				d := int64(r.Uint64())
				if tc.deadlines > 0 {
					d = r.Int64N(tc.deadlines)
				}
				if o == opGrow {
					d = r.Int64N(2 * int64(h.Len()+1))
				}
				step(t, &h, m, o, id, d)
			}
			// Everything left drains in order and matches the reference.
			for len(m) > 0 {
				step(t, &h, m, opPop, 0, 0)
			}
		})
	}
}

// FuzzOps reads the input as 4-byte ops: an op code, an id, and a 16-bit
// little-endian deadline (signed, so negatives and ties are common). Each op
// is checked against the reference model and followed by verify.
func FuzzOps(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{byte(opPop), 0, 0, 0})
	// Push three, remove the middle one, update one, pop all.
	f.Add([]byte{
		byte(opPush), 1, 10, 0,
		byte(opPush), 2, 20, 0,
		byte(opPush), 3, 5, 0,
		byte(opPush), 3, 7, 0, // duplicate
		byte(opRemove), 2, 0, 0,
		byte(opRemove), 2, 0, 0, // absent
		byte(opUpdate), 1, 1, 0,
		byte(opUpdate), 9, 1, 0, // absent
		byte(opPop), 0, 0, 0,
		byte(opPop), 0, 0, 0,
		byte(opPop), 0, 0, 0,
	})
	// Enough pushes for three levels, with ties and negative deadlines.
	var deep []byte
	for i := range 40 {
		deep = append(deep, byte(opPush), byte(i*7), byte(i%5), byte(0x80*(i%2)))
	}
	for i := range 10 {
		deep = append(deep, byte(opRemove), byte(i*14), 0, 0, byte(opUpdate), byte(i*21), byte(i), 0xff)
	}
	deep = append(deep, byte(opGrow), 255, 100, 0, byte(opCheck), 7, 0, 0, byte(opReset), 0, 0, 0)
	f.Add(deep)

	f.Fuzz(func(t *testing.T, data []byte) {
		var h Heap
		m := make(model)
		for ; len(data) >= 4; data = data[4:] {
			o := op(data[0]) % numOps
			d := int64(int16(binary.LittleEndian.Uint16(data[2:4])))
			step(t, &h, m, o, uint32(data[1]), d)
		}
		for len(m) > 0 {
			step(t, &h, m, opPop, 0, 0)
		}
	})
}
