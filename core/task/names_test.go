package task

import (
	"encoding"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// textEnum is what each enum with a name table offers.
type textEnum interface {
	fmt.Stringer
	encoding.TextMarshaler
}

// TestEnumText: for every value of each enum, MarshalText gives String's name and
// UnmarshalText takes it back; a value without a name fails to marshal, an unknown name
// fails to unmarshal with ErrUnknownName and leaves the value alone; the Names copies
// are the same tables and writing to them changes nothing.
func TestEnumText(t *testing.T) {
	roundTrip := func(v textEnum, back func([]byte) (textEnum, error), named bool) {
		t.Helper()
		b, err := v.MarshalText()
		if !named {
			if !errors.Is(err, ErrUnknownName) || !strings.Contains(err.Error(), v.String()) {
				t.Errorf("MarshalText(%s) = %q, %v; want ErrUnknownName naming it", v, b, err)
			}
			return
		}
		if err != nil || string(b) != v.String() {
			t.Errorf("MarshalText(%s) = %q, %v", v, b, err)
			return
		}
		if got, err := back(b); err != nil || got != v {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", b, got, err, v)
		}
	}
	for k := range Kind(8) {
		roundTrip(k, func(b []byte) (textEnum, error) { var x Kind; err := x.UnmarshalText(b); return x, err }, k >= KindAt && k <= KindCron)
	}
	for a := range Anchor(4) {
		roundTrip(a, func(b []byte) (textEnum, error) { var x Anchor; err := x.UnmarshalText(b); return x, err }, a <= FixedDelay)
	}
	for p := range MisfirePolicy(4) {
		roundTrip(p, func(b []byte) (textEnum, error) { var x MisfirePolicy; err := x.UnmarshalText(b); return x, err }, p <= MisfireSkip)
	}
	for p := range ParentPolicy(4) {
		roundTrip(p, func(b []byte) (textEnum, error) { var x ParentPolicy; err := x.UnmarshalText(b); return x, err }, p <= ParentRunAnyway)
	}

	k := KindCron
	for _, bad := range []string{"", "At", "every ", "Kind(1)", "fixed-rate"} {
		if err := k.UnmarshalText([]byte(bad)); !errors.Is(err, ErrUnknownName) || k != KindCron {
			t.Errorf("UnmarshalText(%q) = %v, kind %v", bad, err, k)
		}
	}
	p := MisfireSkip
	if err := p.UnmarshalText([]byte("fire-once")); !errors.Is(err, ErrUnknownName) || !strings.Contains(err.Error(), "once, skip") {
		t.Errorf("misfire UnmarshalText(fire-once) = %v", err)
	}

	names := KindNames()
	if len(names) != int(KindCron)+1 || names[KindEvery] != "every" || names[0] != "" {
		t.Errorf("KindNames() = %q", names)
	}
	names[KindEvery] = "x"
	if KindEvery.String() != "every" || AnchorNames()[FixedDelay] != "delay" || MisfireNames()[MisfireSkip] != "skip" ||
		ParentPolicyNames()[ParentRunAnyway] != "run" {
		t.Error("a Names copy shares the table")
	}
}

// TestEnumParseAllocs: reading a name, as the codec does, costs no allocation.
func TestEnumParseAllocs(t *testing.T) {
	b := []byte("cron")
	var k Kind
	if n := testing.AllocsPerRun(100, func() { k, _ = kindNames.parse(b) }); n != 0 || k != KindCron {
		t.Errorf("parse: %v allocs, kind %v", n, k)
	}
	if n := testing.AllocsPerRun(100, func() { _ = k.UnmarshalText(b) }); n != 0 {
		t.Errorf("UnmarshalText: %v allocs", n)
	}
}
