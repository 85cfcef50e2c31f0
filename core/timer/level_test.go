package timer

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

func TestNodeLayout(t *testing.T) {
	if got := unsafe.Sizeof(node{}); got != 32 {
		t.Fatalf("sizeof(node) = %d, want 32: two nodes per cache line, 32 B per pending timer", got)
	}
}

// TestDocStatesTheSlabLayout: doc.go's figures for the slab are the constants' (a chunk
// size told two ways once: the doc said 4096-node chunks while node.go had 32768).
func TestDocStatesTheSlabLayout(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(doc), "//", " ")), " ")
	size := unsafe.Sizeof(node{})
	mib := chunkSize * int(size) >> 20
	for _, want := range []string{
		fmt.Sprintf("%d-byte nodes in fixed %d-node (%d MiB) chunks", size, chunkSize, mib),
		fmt.Sprintf("first chunk starts at %d nodes", firstChunk),
		fmt.Sprintf("list of %d MiB pointer-free chunks", mib),
		fmt.Sprintf("Pending timers cost %d B each", size),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("doc.go does not say %q", want)
		}
	}
}

func TestWheelSpanCoversAYearAtDefaultTick(t *testing.T) {
	const year = 365 * 24 * 3600 * 1000 // ms
	if wheelSpan < year {
		t.Fatalf("wheel spans %d ticks, less than a year of 1 ms ticks (%d)", wheelSpan, year)
	}
}

func TestLevelForAtEveryBoundary(t *testing.T) {
	// With elapsed = 0, a tick of 64^L - 1 is the last of level L-1 and 64^L the first of L.
	for level := 1; level < numLevels; level++ {
		a := uint64(1) << (uint(level) * slotBits)
		cases := []struct {
			when uint64
			want int
		}{{a - 1, level - 1}, {a, level}, {a + 1, level}}
		for _, c := range cases {
			if got := levelFor(0, c.when); got != c.want {
				t.Errorf("levelFor(0, %d) = %d, want %d", c.when, got, c.want)
			}
		}
	}
	// The same boundaries seen from a non-zero elapsed: only the differing digits count.
	elapsed := uint64(5)<<12 | uint64(7)<<6 | 3
	if got := levelFor(elapsed, elapsed+1); got != 0 {
		t.Errorf("next tick: level %d, want 0", got)
	}
	if got := levelFor(elapsed, elapsed|63+1); got != 1 {
		t.Errorf("first tick of the next level-0 rotation: level %d, want 1", got)
	}
	// Beyond the span everything goes to the top level.
	for _, when := range []uint64{wheelSpan - 1, wheelSpan, wheelSpan + 1, 1 << 60} {
		if got := levelFor(0, when); got != numLevels-1 {
			t.Errorf("levelFor(0, %d) = %d, want top level %d", when, got, numLevels-1)
		}
	}
}

func TestSlotForAtEveryBoundary(t *testing.T) {
	for _, c := range []struct {
		when uint64
		want int
	}{{0, 0}, {1, 1}, {62, 62}, {63, 63}, {64, 0}, {65, 1}} {
		if got := slotFor(c.when, 0); got != c.want {
			t.Errorf("slotFor(%d, level 0) = %d, want %d", c.when, got, c.want)
		}
	}
	for level := 1; level < numLevels; level++ {
		w := slotWidth(level)
		for _, c := range []struct {
			when uint64
			want int
		}{{0, 0}, {w - 1, 0}, {w, 1}, {w + 1, 1}, {63 * w, 63}, {64*w - 1, 63}, {64 * w, 0}} {
			if got := slotFor(c.when, level); got != c.want {
				t.Errorf("slotFor(%d, level %d) = %d, want %d", c.when, level, got, c.want)
			}
		}
	}
}

func TestNextSlotStart(t *testing.T) {
	cases := []struct {
		name      string
		occupied  uint64
		elapsed   uint64
		level     int
		wantStart uint64
		wantSlot  int
	}{
		{"level 0, slot after now", 1 << 10, 3, 0, 10, 10},
		{"level 0, two slots: nearest wins", 1<<10 | 1<<5, 3, 0, 5, 5},
		{"level 0, slot before now is next rotation", 1 << 2, 3, 0, 64 + 2, 2},
		{"level 0, from the middle of a later block", 1 << 1, 64*7 + 60, 0, 64*8 + 1, 1},
		{"level 1, slot after now", 1 << 4, 65, 1, 4 * 64, 4},
		{"level 1, own slot is next rotation", 1 << 1, 65, 1, 4096 + 64, 1},
		{"top level ring: own slot is next rotation", 1 << 0, 5, numLevels - 1, wheelSpan, 0},
		{"level 2, last slot", 1 << 63, 0, 2, 63 * 4096, 63},
		{"top level: own slot (next rotation) comes after later slots", 1<<0 | 1<<3, 5, numLevels - 1, 3 << 30, 3},
		{"top level: own slot and an earlier slot, both next rotation", 1<<1 | 1<<2, 2<<30 + 5, numLevels - 1, wheelSpan + 1<<30, 1},
	}
	for _, c := range cases {
		start, slot := nextSlotStart(c.occupied, c.elapsed, c.level)
		if start != c.wantStart || slot != c.wantSlot {
			t.Errorf("%s: got start %d slot %d, want %d %d", c.name, start, slot, c.wantStart, c.wantSlot)
		}
	}
}
