package protocol

import (
	"strings"
	"testing"
)

// TestCheckedTables: a table is marked checked exactly when its Go type has a
// checkFields rule, so that no rule is skipped and no type is asserted for nothing.
func TestCheckedTables(t *testing.T) {
	for ty := Type(1); ty < numTypes; ty++ {
		if s := specs[ty]; s != nil {
			if _, ok := s.new().(checker); ok != s.table.checked {
				t.Errorf("%v: checker %v, table checked %v", ty, ok, s.table.checked)
			}
		}
	}
	for _, x := range []decodable{&Task{}, &Schedule{}, &Retry{}, &AttemptRecord{}, &Info{}, &DeadLetter{}, &ItemResult{}} {
		if _, ok := x.(checker); ok != x.fields().checked {
			t.Errorf("%T: checker %v, table checked %v", x, ok, x.fields().checked)
		}
	}
}

// TestRequiredFollowsKeys: the required mask is built from each field's own flag, so
// it follows the key wherever it stands in the list.
func TestRequiredFollowsKeys(t *testing.T) {
	a := uintField("a", func(m *Ack) *uint64 { return &m.RunID })
	b := uintField("b", func(m *Ack) *uint64 { return &m.Epoch }).req()
	for _, order := range [][]field[Ack]{{a, b}, {b, a}} {
		s := newMapSpec(true, order...)
		for i, k := range s.table.keys {
			want := k == "t" || k == "id" || k == "b"
			if got := s.table.required&(1<<i) != 0; got != want {
				t.Errorf("keys %v: %q required %v, want %v", s.table.keys, k, got, want)
			}
		}
	}
}

// TestSpecRefusesBadLists: a key twice, or more keys than a fixmap holds, fails at
// initialisation.
func TestSpecRefusesBadLists(t *testing.T) {
	f := uintField("k", func(m *Ack) *uint64 { return &m.RunID })
	many := make([]field[Ack], maxKeys-1) // with "t" and "id": maxKeys+1
	for i := range many {
		many[i] = uintField("k"+strings.Repeat("x", i), func(m *Ack) *uint64 { return &m.RunID })
	}
	for name, fs := range map[string][]field[Ack]{"twice": {f, f}, "too many": many} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: newMapSpec did not panic", name)
				}
			}()
			newMapSpec(true, fs...)
		}()
	}
}

// TestAppendFrameForeignType: a type that embeds a message satisfies Message but is
// not one; AppendFrame refuses it instead of writing the wrong bytes or panicking.
func TestAppendFrameForeignType(t *testing.T) {
	type wrapped struct{ *Ack }
	out, err := AppendFrame([]byte("x"), wrapped{&Ack{ID: 3, RunID: 1}}, 0)
	if err == nil || string(out) != "x" {
		t.Fatalf("AppendFrame = %q, %v; want the input back and an error", out, err)
	}
}
