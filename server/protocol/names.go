package protocol

// nameCacheBits sizes a Decoder's name cache: 64 slots hold the few namespaces and task
// types one connection names, with room for the collisions of a direct-mapped table.
const nameCacheBits = 6

// nameCache interns the namespaces and task types of one connection's messages, which
// repeat in almost every FIRE and submitted task. It is a direct-mapped table indexed by
// a hash of the name's bytes: a name found in its slot costs a hash and a comparison
// instead of an allocation (and the UTF-8 check it passed when it was stored); a name
// that is not replaces the slot's. It never holds more than 1<<nameCacheBits strings,
// each a copy, never a view of a frame's buffer. Owned by the Decoder's goroutine.
type nameCache [1 << nameCacheBits]string

// slot returns the slot for the name b: FNV-1a of the bytes, top bits.
func (c *nameCache) slot(b []byte) *string {
	h := uint32(2166136261)
	for _, x := range b {
		h = (h ^ uint32(x)) * 16777619
	}
	return &c[h>>(32-nameCacheBits)]
}

// name reads a namespace or task type of at most limit bytes: str, but interned
// through the Decoder's cache when d has one. O(len) and, for a name the cache holds,
// no allocation.
func (d *dec) name(limit int) (string, *Error) {
	if d.names == nil {
		return d.r.str(limit)
	}
	b, err := d.r.strRaw(limit)
	if err != nil {
		return "", err
	}
	s := d.names.slot(b)
	if *s != string(b) {
		if err := d.r.utf8(b); err != nil {
			return "", err
		}
		*s = string(b)
	}
	return *s, nil
}
