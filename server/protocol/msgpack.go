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
