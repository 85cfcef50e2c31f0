package protocol

// The msgpack type codes (first bytes) the encoder writes and the decoder reads by name;
// the fix forms' ranges are spelled out where they are tested (isInt, isStr, ...). The
// 32-bit form of every 16-bit length code is the next code (str16+1 is str32, and so on
// for bin, array and map), and the widths of a family follow its first code:
// uint8+k is the 1<<k-byte unsigned integer, and so for int, fixext, ext, str and bin.
const (
	codeFixMap   = 0x80
	codeFixArray = 0x90
	codeFixStr   = 0xa0
	codeNil      = 0xc0
	codeFalse    = 0xc2
	codeTrue     = 0xc3
	codeBin8     = 0xc4
	codeBin16    = 0xc5
	codeExt8     = 0xc7
	codeExt32    = 0xc9
	codeFloat    = 0xca
	codeDouble   = 0xcb
	codeUint8    = 0xcc
	codeUint16   = 0xcd
	codeUint32   = 0xce
	codeUint64   = 0xcf
	codeInt8     = 0xd0
	codeInt16    = 0xd1
	codeInt32    = 0xd2
	codeInt64    = 0xd3
	codeFixExt1  = 0xd4
	codeFixExt16 = 0xd8
	codeStr8     = 0xd9
	codeStr16    = 0xda
	codeArray16  = 0xdc
	codeMap16    = 0xde
)

// typeName names the msgpack type of a value by its first byte, for errors.
func typeName(c byte) string {
	switch {
	case c <= 0x7f || c >= 0xe0 || c >= 0xcc && c <= 0xd3:
		return "integer"
	case c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf:
		return "map"
	case c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd:
		return "array"
	case c >= 0xa0 && c <= 0xbf || c >= 0xd9 && c <= 0xdb:
		return "string"
	case c == 0xc0:
		return "nil"
	case c == 0xc2 || c == 0xc3:
		return "boolean"
	case c >= 0xc4 && c <= 0xc6:
		return "binary"
	case c == 0xca || c == 0xcb:
		return "float"
	case c == 0xc1:
		return "invalid byte 0xc1"
	}
	return "extension"
}

func isBool(c byte) bool  { return c == codeFalse || c == codeTrue }
func isInt(c byte) bool   { return c <= 0x7f || c >= 0xe0 || c >= 0xcc && c <= 0xd3 }
func isStr(c byte) bool   { return c >= 0xa0 && c <= 0xbf || c >= 0xd9 && c <= 0xdb }
func isBin(c byte) bool   { return c >= 0xc4 && c <= 0xc6 }
func isMap(c byte) bool   { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }
func isArray(c byte) bool { return c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd }
