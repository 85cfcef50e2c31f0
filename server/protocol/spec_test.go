package protocol

import (
	"slices"
	"strings"
	"testing"
)

// TestHandTableRequiredByName: a hand-written table's required mask comes from the
// names given, so it follows each key wherever the key stands in the list; a required
// name that is no key fails at initialisation.
func TestHandTableRequiredByName(t *testing.T) {
	required := []string{"tid", "type", "schedule", "durability"}
	keys := slices.Clone(taskFields.keys)
	for range keys {
		keys = append(keys[1:], keys[0]) // every rotation: each key at every place
		tab := handTable[Task](keys, required...)
		for i, k := range tab.keys {
			if got, want := tab.required&(1<<i) != 0, slices.Contains(required, k); got != want {
				t.Errorf("keys %v: %q required %v, want %v", keys, k, got, want)
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("handTable accepted a required name that is no key")
		}
	}()
	handTable[Task](taskFields.keys, "task_id")
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
