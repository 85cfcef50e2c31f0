package protocol

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
)

// collidingNames returns two namespaces that share a slot of the name cache.
func collidingNames(t *testing.T) (string, string) {
	var c nameCache
	seen := map[*string]string{}
	for i := range 1000 {
		n := "ns-" + strconv.Itoa(i)
		s := c.slot([]byte(n))
		if o, ok := seen[s]; ok {
			return o, n
		}
		seen[s] = n
	}
	t.Fatal("no two of 1000 names share one of 64 slots")
	return "", ""
}

// TestDecoderNames: names a Decoder interns come out equal to what was sent, whether
// they are found in the cache, collide with another name in it, or are new; messages
// keep their names after the Decoder's buffer is reused; and a name that is not UTF-8 is
// refused even when its slot holds a valid one.
func TestDecoderNames(t *testing.T) {
	a, b := collidingNames(t)
	d := NewDecoder(0)
	var kept []*Fire
	for i, ns := range []string{a, a, b, a, b, b, "default", a} {
		want := *benchFire
		want.Namespace, want.TaskType = ns, "type-"+ns
		d.Feed(mustFrame(t, &want))
		m, err := d.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !reflect.DeepEqual(m, &want) {
			t.Fatalf("frame %d: got %+v, want %+v", i, m, &want)
		}
		kept = append(kept, m.(*Fire))
	}
	for i, f := range kept[:len(kept)-1] { // every frame but the last has been overwritten
		if f.TaskType != "type-"+f.Namespace || f.Namespace != a && f.Namespace != b && f.Namespace != "default" {
			t.Fatalf("message %d changed after later frames: %+v", i, f)
		}
	}

	// An invalid name is refused each time, also when its slot holds a valid name.
	invalid := "d\xefault"
	var valid string
	for i := 0; valid == ""; i++ {
		if n := "ns-" + strconv.Itoa(i); d.names.slot([]byte(n)) == d.names.slot([]byte(invalid)) {
			valid = n
		}
	}
	for _, ns := range []string{valid, invalid, invalid} {
		body := rawMap(t, "t", 50, "id", 0, "ns", ns, "tid", "t", "type", "email", "run", 1, "attempt", 1, "due", 0, "epoch", 1, "ttr", 1, "durability", "durable")
		d.Feed(frame(body))
		_, err := d.Next()
		var pe *Error
		switch {
		case ns == valid && err != nil:
			t.Fatalf("namespace %q: %v", ns, err)
		case ns == invalid && (!errors.As(err, &pe) || pe.Code != CodeBadField || pe.Field != "ns"):
			t.Fatalf("namespace %q: %v, want BAD_FIELD ns", ns, err)
		}
	}
}
