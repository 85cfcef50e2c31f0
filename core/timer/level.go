package timer

import "math/bits"

// Wheel geometry. Each level has 64 slots so that one uint64 records which slots are
// occupied; a slot at level L spans 64^L ticks and the level spans 64^(L+1) ticks.
//
//	level  slot width (1 ms tick)   level span
//	0      1 ms                     64 ms
//	1      64 ms                    4.1 s
//	2      4.1 s                    4.4 min
//	3      4.4 min                  4.7 h
//	4      4.7 h                    12.4 days
//	5      12.4 days                2.2 years
//
// Six levels therefore cover 2^36 ticks: 2.2 years at the default 1 ms tick. A deadline
// further out is parked in the top level and re-examined each time its slot comes round
// (the top level acts as a ring), so it still fires at its exact tick, never early.
const (
	slotBits  = 6
	numSlots  = 1 << slotBits // slots per level
	slotMask  = numSlots - 1
	numLevels = 6
	// wheelSpan is the number of ticks the wheel covers exactly: 64^6 = 2^36.
	wheelSpan = uint64(1) << (slotBits * numLevels)
)

// levelFor returns the level at which a timer due at tick `when` is stored, given the
// wheel's current tick `elapsed` (when > elapsed). It is the level of the most significant
// 6-bit group in which the two ticks differ, capped at the top level.
func levelFor(elapsed, when uint64) int {
	masked := (elapsed ^ when) | slotMask
	if masked >= wheelSpan {
		masked = wheelSpan - 1
	}
	significant := 63 - bits.LeadingZeros64(masked)
	return significant / slotBits
}

// slotFor returns the slot of tick `when` at `level`.
func slotFor(when uint64, level int) int {
	return int((when >> (uint(level) * slotBits)) & slotMask)
}

// slotWidth is the number of ticks one slot of `level` spans: 64^level.
func slotWidth(level int) uint64 { return uint64(1) << (uint(level) * slotBits) }

// levelWidth is the number of ticks `level` spans: 64^(level+1).
func levelWidth(level int) uint64 { return uint64(1) << (uint(level+1) * slotBits) }

// nextSlotStart returns the tick at which the next occupied slot of `level` begins,
// searching forward from the slot after the one that contains `elapsed`, with one rotate
// and one trailing-zeros instruction (no scan). occupied must be non-zero.
//
// The search starts after elapsed's own slot and reaches it last: below the top level that
// slot is always empty (a slot is processed as elapsed reaches its start); in the top level
// it holds only timers a whole rotation or more away, which ride the ring until they come
// within range, so every other occupied slot of the level is due before it. A slot whose
// start is not after elapsed lies in the level's next rotation.
func nextSlotStart(occupied uint64, elapsed uint64, level int) (start uint64, slot int) {
	nowSlot := slotFor(elapsed, level)
	rotated := bits.RotateLeft64(occupied, -(nowSlot + 1))
	slot = (nowSlot + 1 + bits.TrailingZeros64(rotated)) & slotMask
	return slotStart(elapsed, level, slot), slot
}

// slotStart returns the first tick after elapsed at which slot `slot` of `level` begins:
// in the level's current rotation, or in the next one if the slot has already begun.
func slotStart(elapsed uint64, level, slot int) uint64 {
	start := elapsed&^(levelWidth(level)-1) + uint64(slot)*slotWidth(level)
	if start <= elapsed {
		start += levelWidth(level)
	}
	return start
}
