package protocol

// ValidTraceparent reports whether s is a W3C Trace Context traceparent a receiver
// accepts (https://www.w3.org/TR/trace-context/#traceparent-header): version "-"
// trace-id "-" parent-id "-" flags, in lowercase hex, of 2, 32, 16 and 2 digits; the
// version not "ff", neither ID all zeros; version 00 exactly 55 bytes, a later version
// 55 bytes or more with a "-" after the flags (fields it may add are not read). As the
// W3C asks of a receiver, ToTask drops a traceparent that fails (and its tracestate)
// rather than refusing the task. O(len(s)) up to 55 bytes; no allocation.
func ValidTraceparent(s string) bool {
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	if !lowerHex(s[0:2]) || !lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:55]) {
		return false
	}
	switch {
	case s[0:2] == "ff":
		return false
	case s[0:2] == "00" && len(s) != 55:
		return false
	case len(s) > 55 && s[55] != '-':
		return false
	}
	return !allZeros(s[3:35]) && !allZeros(s[36:52])
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZeros(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}
