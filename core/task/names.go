package task

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Each enum of the schedule model has one table of names, below: String, MarshalText and
// UnmarshalText read it, the server's codec writes and reads the same names on the wire
// (KindNames, AnchorNames, MisfireNames, ParentPolicyNames) and tockctl parses its flags with
// UnmarshalText. States have theirs in states.go (upper-case, parsed ignoring case).
var (
	kindNames    = names[Kind]{typ: "Kind", list: []string{KindAt: "at", KindAfter: "after", KindEvery: "every", KindCron: "cron"}}
	anchorNames  = names[Anchor]{typ: "Anchor", list: []string{FixedRate: "rate", FixedDelay: "delay"}}
	misfireNames = names[MisfirePolicy]{typ: "MisfirePolicy", list: []string{MisfireFireOnce: "once", MisfireSkip: "skip"}}
	parentNames  = names[ParentPolicy]{typ: "ParentPolicy", list: []string{ParentCancel: "cancel", ParentRunAnyway: "run"}}
)

// names is the name table of an enum T: list[v] is value v's name, "" for a value that
// has none (the zero Kind). Read-only once initialised.
type names[T ~uint8] struct {
	typ  string // T's name, for values without one: "Kind(7)"
	list []string
}

// name returns v's name, or "" and false for a value that has none. O(1).
func (n *names[T]) name(v T) (string, bool) {
	if int(v) < len(n.list) && n.list[v] != "" {
		return n.list[v], true
	}
	return "", false
}

// str is String: v's name, or "T(n)" for a value that has none (so that a corrupt value
// shows up in logs instead of masquerading as a real one).
func (n *names[T]) str(v T) string {
	if s, ok := n.name(v); ok {
		return s
	}
	return n.typ + "(" + strconv.Itoa(int(v)) + ")"
}

// parse returns the value named b (exactly: names are lower-case and compared as
// bytes), without allocating. O(len(list)).
func (n *names[T]) parse(b []byte) (T, bool) {
	for i, s := range n.list {
		if s != "" && s == string(b) {
			return T(i), true
		}
	}
	return 0, false
}

func (n *names[T]) marshal(v T) ([]byte, error) {
	if s, ok := n.name(v); ok {
		return []byte(s), nil
	}
	return nil, fmt.Errorf("%w: %s has no name", ErrUnknownName, n.str(v))
}

func (n *names[T]) unmarshal(b []byte, v *T) error {
	x, ok := n.parse(b)
	if !ok {
		return fmt.Errorf("%w: %q is not a %s (want %s)", ErrUnknownName, b, n.typ, strings.Join(n.valid(), ", "))
	}
	*v = x
	return nil
}

// valid returns the names in value order, without the empty ones.
func (n *names[T]) valid() []string {
	var out []string
	for _, s := range n.list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (k Kind) String() string { return kindNames.str(k) }

// MarshalText returns k's name (at, after, every, cron); a Kind without one is
// ErrUnknownName.
func (k Kind) MarshalText() ([]byte, error) { return kindNames.marshal(k) }

// UnmarshalText sets k to the Kind that text names; another text is ErrUnknownName and
// leaves k as it was.
func (k *Kind) UnmarshalText(text []byte) error { return kindNames.unmarshal(text, k) }

// KindNames returns the Kinds' names indexed by Kind ("" at 0): a copy, for a codec that
// compares names in place.
func KindNames() []string { return slices.Clone(kindNames.list) }

func (a Anchor) String() string { return anchorNames.str(a) }

// MarshalText returns a's name (rate, delay); an Anchor without one is ErrUnknownName.
func (a Anchor) MarshalText() ([]byte, error) { return anchorNames.marshal(a) }

// UnmarshalText sets a to the Anchor that text names; another text is ErrUnknownName and
// leaves a as it was.
func (a *Anchor) UnmarshalText(text []byte) error { return anchorNames.unmarshal(text, a) }

// AnchorNames returns the Anchors' names indexed by Anchor: a copy, for a codec.
func AnchorNames() []string { return slices.Clone(anchorNames.list) }

func (p MisfirePolicy) String() string { return misfireNames.str(p) }

// MarshalText returns p's name (once, skip); a MisfirePolicy without one is
// ErrUnknownName.
func (p MisfirePolicy) MarshalText() ([]byte, error) { return misfireNames.marshal(p) }

// UnmarshalText sets p to the MisfirePolicy that text names; another text is
// ErrUnknownName and leaves p as it was.
func (p *MisfirePolicy) UnmarshalText(text []byte) error { return misfireNames.unmarshal(text, p) }

// MisfireNames returns the MisfirePolicies' names indexed by policy: a copy, for a codec.
func MisfireNames() []string { return slices.Clone(misfireNames.list) }

func (p ParentPolicy) String() string { return parentNames.str(p) }

// MarshalText returns p's name (cancel, run); a ParentPolicy without one is
// ErrUnknownName.
func (p ParentPolicy) MarshalText() ([]byte, error) { return parentNames.marshal(p) }

// UnmarshalText sets p to the ParentPolicy that text names; another text is
// ErrUnknownName and leaves p as it was.
func (p *ParentPolicy) UnmarshalText(text []byte) error { return parentNames.unmarshal(text, p) }

// ParentPolicyNames returns the ParentPolicies' names indexed by policy: a copy, for a
// codec.
func ParentPolicyNames() []string { return slices.Clone(parentNames.list) }
