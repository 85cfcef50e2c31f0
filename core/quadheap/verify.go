package quadheap

import (
	"errors"
	"fmt"
)

// errCorrupt is wrapped by every error verify returns.
var errCorrupt = errors.New("quadheap: corrupt heap")

// verify checks every invariant in the package doc and returns the first
// violation found, wrapping errCorrupt:
//
//	∀ i > 0: entries[parent(i)].deadline <= entries[i].deadline
//	∀ i:     pos[entries[i].id] == i+1
//	∀ id:    pos[id] != 0 ⇒ entries[pos[id]-1].id == id
//
// and len(pos) == cap(pos). It costs O(n + len(pos)); tests call it after
// every mutation, and debugVerify makes every operation call it.
func (h *Heap) verify() error {
	if len(h.pos) != cap(h.pos) {
		return fmt.Errorf("%w: len(pos) = %d != cap(pos) = %d", errCorrupt, len(h.pos), cap(h.pos))
	}
	for i, e := range h.entries {
		if uint64(e.id) >= uint64(len(h.pos)) {
			return fmt.Errorf("%w: entries[%d].id = %d outside pos (len %d)", errCorrupt, i, e.id, len(h.pos))
		}
		if got := h.pos[e.id]; got != uint32(i+1) {
			return fmt.Errorf("%w: pos[%d] = %d, want %d (entries[%d])", errCorrupt, e.id, got, i+1, i)
		}
		if i > 0 {
			if p := parent(i); h.entries[p].deadline > e.deadline {
				return fmt.Errorf("%w: heap property: entries[%d].deadline = %d > entries[%d].deadline = %d",
					errCorrupt, p, h.entries[p].deadline, i, e.deadline)
			}
		}
	}
	for id, p := range h.pos {
		if p == 0 {
			continue
		}
		if int(p) > len(h.entries) {
			return fmt.Errorf("%w: pos[%d] = %d beyond len(entries) = %d", errCorrupt, id, p, len(h.entries))
		}
		if got := h.entries[p-1].id; got != uint32(id) {
			return fmt.Errorf("%w: pos[%d] = %d but entries[%d].id = %d", errCorrupt, id, p, p-1, got)
		}
	}
	return nil
}

// mustVerify panics with verify's error, if any. Only debugVerify uses it.
func (h *Heap) mustVerify() {
	if err := h.verify(); err != nil {
		panic(err)
	}
}
