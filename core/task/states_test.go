package task

import (
	"errors"
	"strings"
	"testing"
)

// legalMoves is the state machine written out independently of the table in states.go,
// so that a slip in either shows up as a mismatch.
var legalMoves = map[[2]State]bool{
	{Pending, Due}:       true,
	{Pending, Cancelled}: true,
	{Due, Running}:       true,
	{Due, Cancelled}:     true,
	{Due, Pending}:       true,
	{Running, Succeeded}: true,
	{Running, Failed}:    true,
	{Running, Dead}:      true,
	{Running, Pending}:   true,
	{Running, Cancelled}: true,
	{Failed, Due}:        true,
	{Failed, Pending}:    true,
	{Failed, Cancelled}:  true,
	{Dead, Pending}:      true,
	{Succeeded, Pending}: true,
	{Cancelled, Pending}: true,
	{Waiting, Pending}:   true,
	{Waiting, Cancelled}: true,
}

var allStates = []State{Pending, Due, Running, Succeeded, Failed, Dead, Cancelled, Waiting}

func TestTransitionsEveryPair(t *testing.T) {
	legal := 0
	for _, from := range allStates {
		for _, to := range allStates {
			want := legalMoves[[2]State{from, to}]
			if got := canTransition(from, to); got != want {
				t.Errorf("canTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
			err := transition(from, to)
			switch {
			case want && err != nil:
				t.Errorf("transition(%s, %s) = %v, want nil", from, to, err)
			case !want && !errors.Is(err, ErrIllegalTransition):
				t.Errorf("transition(%s, %s) = %v, want ErrIllegalTransition", from, to, err)
			case !want && err.Error() != "task: illegal state transition: "+from.String()+" -> "+to.String():
				t.Errorf("transition(%s, %s) message %q", from, to, err)
			}
			if want {
				legal++
			}
		}
	}
	if legal != len(legalMoves) {
		t.Errorf("%d legal pairs among the states, %d listed: the list names a non-state", legal, len(legalMoves))
	}
}

func TestTransitionsInvalidStates(t *testing.T) {
	for _, bad := range []State{0, numStates, 255} {
		for _, s := range allStates {
			if canTransition(bad, s) || canTransition(s, bad) {
				t.Errorf("a move between %s and %s is allowed", bad, s)
			}
			if err := transition(bad, s); !errors.Is(err, ErrIllegalTransition) || !strings.Contains(err.Error(), bad.String()) {
				t.Errorf("transition(%s, %s) = %v", bad, s, err)
			}
		}
	}
}

// Every state must be reachable from a task's first state (PENDING, or WAITING for a
// task with parents) and every non-terminal state must be able to leave: a table edit
// that strands a state is caught here.
func TestTransitionsReachability(t *testing.T) {
	seen := map[State]bool{Pending: true, Waiting: true}
	for queue := []State{Pending, Waiting}; len(queue) > 0; queue = queue[1:] {
		for _, to := range allStates {
			if canTransition(queue[0], to) && !seen[to] {
				seen[to] = true
				queue = append(queue, to)
			}
		}
	}
	for _, s := range allStates {
		if !seen[s] {
			t.Errorf("%s is unreachable from PENDING and WAITING", s)
		}
		if !canTransition(s, Cancelled) && !s.Terminal() {
			t.Errorf("non-terminal %s cannot be cancelled", s)
		}
	}
}

func TestTerminal(t *testing.T) {
	want := map[State]bool{Succeeded: true, Dead: true, Cancelled: true}
	for _, s := range append(allStates, 0, numStates) {
		if s.Terminal() != want[s] {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
	}
}

func TestStateStrings(t *testing.T) {
	names := []string{"PENDING", "DUE", "RUNNING", "SUCCEEDED", "FAILED", "DEAD", "CANCELLED", "WAITING"}
	for i, s := range allStates {
		if s.String() != names[i] {
			t.Errorf("State %d String = %q, want %q", s, s, names[i])
		}
		for _, in := range []string{names[i], strings.ToLower(names[i]), strings.ToUpper(names[i][:1]) + strings.ToLower(names[i][1:])} {
			if got, err := ParseState(in); err != nil || got != s {
				t.Errorf("ParseState(%q) = %v, %v; want %s", in, got, err, s)
			}
		}
	}
	for _, tc := range []struct {
		s    State
		want string
	}{{0, "State(0)"}, {9, "State(9)"}, {255, "State(255)"}} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(tc.s), got, tc.want)
		}
	}
	for _, in := range []string{"", "State(0)", "State(1)", "pend", " PENDING", "PENDING ", "DONE"} {
		if s, err := ParseState(in); !errors.Is(err, ErrUnknownState) || s != 0 {
			t.Errorf("ParseState(%q) = %v, %v; want ErrUnknownState", in, s, err)
		} else if !strings.Contains(err.Error(), "task: unknown state") {
			t.Errorf("ParseState(%q) error %q lacks the package prefix", in, err)
		}
	}
}

// TestParseStateBytes: ParseStateBytes agrees with ParseState on names in any case
// (Unicode folding included: U+017F folds to s), on what is not a name, and allocates
// nothing.
func TestParseStateBytes(t *testing.T) {
	ins := []string{"", "State(1)", "pend", " PENDING", "PENDING ", "DONE", "\u017fucceeded", "\xff", "DEAD\x00"}
	for _, s := range allStates {
		ins = append(ins, s.String(), strings.ToLower(s.String()), strings.ToLower(s.String()[:1])+s.String()[1:])
	}
	for _, in := range ins {
		want, err := ParseState(in)
		if got, ok := ParseStateBytes([]byte(in)); got != want || ok != (err == nil) {
			t.Errorf("ParseStateBytes(%q) = %v, %v; ParseState gives %v, %v", in, got, ok, want, err)
		}
	}
	name := []byte("cancelled")
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseStateBytes(name) }); n != 0 {
		t.Errorf("ParseStateBytes: %v allocations", n)
	}
}

func TestTransitionNoAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() {
		_ = transition(Pending, Due)
		_ = canTransition(Running, Dead)
		_ = Running.String()
	}); n != 0 {
		t.Errorf("%v allocations per legal Transition", n)
	}
}
