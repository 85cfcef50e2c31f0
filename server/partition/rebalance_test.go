package partition

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// minMoves is the fewest partitions any map over the set nodes (distinct)
// with loads in [⌊p/n⌋, ⌈p/n⌉] can move from prev: each node x must gain
// max(0, final(x) - kept(x)), where kept(x) counts prev's partitions of x; the
// r = p mod n loads of ⌈p/n⌉ go first to nodes already above ⌊p/n⌋ (H of
// them), and each one beyond those costs one more move.
func minMoves(prev []NodeID, p int, nodes []NodeID) int {
	n := len(nodes)
	lo, r := p/n, p%n
	kept := counts(prev)
	need, above := 0, 0
	for _, x := range nodes {
		need += max(0, lo-kept[x])
		if kept[x] > lo {
			above++
		}
	}
	return need + max(0, r-above)
}

func moves(prev, next []NodeID) int {
	m := 0
	for part := range next {
		if part >= len(prev) || prev[part] != next[part] {
			m++
		}
	}
	return m
}

// checkRebalance runs Rebalance and checks every invariant of the package doc
// that holds for any prev: total, band, minimal moves, and that a node keeping
// no more than ⌊p/n⌋ of its previous partitions loses none of them.
func checkRebalance(t *testing.T, prev []NodeID, p int, nodes []NodeID) []NodeID {
	t.Helper()
	got, err := Rebalance(prev, p, nodes)
	if err != nil {
		t.Fatalf("Rebalance(P=%d, %d nodes): %v", p, len(nodes), err)
	}
	set := slices.Clone(nodes)
	slices.Sort(set)
	set = slices.Compact(set)
	n := len(set)
	lo, hi := p/n, (p+n-1)/n
	if len(got) != p {
		t.Fatalf("len %d, want %d", len(got), p)
	}
	held := counts(got)
	for part, o := range got {
		if _, ok := slices.BinarySearch(set, o); !ok {
			t.Fatalf("partition %d owned by %q, not a live node", part, o)
		}
	}
	for _, x := range set {
		if held[x] < lo || held[x] > hi {
			t.Fatalf("P=%d n=%d: %s holds %d, want %d..%d", p, n, x, held[x], lo, hi)
		}
	}
	base := prev
	if len(prev) != p {
		base, _ = Assign(p, set)
	}
	if m, want := moves(base, got), minMoves(base, p, set); m != want {
		t.Fatalf("P=%d n=%d: moved %d partitions, the fewest possible is %d", p, n, m, want)
	}
	kept := counts(base)
	for part, o := range base {
		if o != got[part] && kept[o] <= lo {
			if _, live := slices.BinarySearch(set, o); live {
				t.Fatalf("partition %d moved from %s, which held only %d <= %d", part, o, kept[o], lo)
			}
		}
	}
	return got
}

// TestRebalanceRandom feeds arbitrary previous maps (owners live, dead, empty;
// nil and wrong lengths) and checks the invariants on each.
func TestRebalanceRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		p := []int{1, 2, 7, 16, 16, 33, 64}[r.IntN(7)]
		live := randomNodes(r, 1+r.IntN(8))
		pool := append(slices.Clone(live), randomNodes(r, r.IntN(4))...)
		pool = append(pool, "")
		var prev []NodeID
		switch r.IntN(10) {
		case 0:
		case 1:
			prev = make([]NodeID, p+1)
		default:
			prev = make([]NodeID, p)
			for part := range prev {
				prev[part] = pool[r.IntN(len(pool))]
			}
		}
		checkRebalance(t, prev, p, live)
	}
}

// TestRebalanceLeave: from a map Rebalance made, a leave moves the leaver's
// partitions and nothing else. Assign moves 0.63 survivors' partitions on
// average at 3->2 (TestAssignLeave).
func TestRebalanceLeave(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const sets = 2000
	for _, n := range []int{2, 3, 4, 5, 9} {
		extra, handed := 0, 0
		for range sets {
			nodes := randomNodes(r, n)
			leaver := nodes[r.IntN(n)]
			before := checkRebalance(t, nil, DefaultCount, nodes)
			survivors := slices.DeleteFunc(slices.Clone(nodes), func(x NodeID) bool { return x == leaver })
			after := checkRebalance(t, before, DefaultCount, survivors)
			for part := range before {
				switch {
				case before[part] == leaver:
					handed++
				case before[part] != after[part]:
					extra++
				}
			}
		}
		if extra != 0 {
			t.Errorf("leave %d->%d moved %d survivors' partitions over %d sets, want 0", n, n-1, extra, sets)
		}
		t.Logf("P=%d leave %d->%d over %d sets: survivors' partitions moved %d; the leaver handed off %.2f on average",
			DefaultCount, n, n-1, sets, extra, float64(handed)/sets)
	}
}

// TestRebalanceJoin: a join moves the fewest partitions a balanced map can
// (checkRebalance), and at P=16, 3->4 exactly the joiner's 4, all to it.
// Assign, measured on the same sets, moves more.
func TestRebalanceJoin(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const sets = 2000
	for _, n := range []int{1, 2, 3, 4, 5, 8} {
		total, worst, between, aTotal, aWorst := 0, 0, 0, 0, 0
		for range sets {
			nodes := randomNodes(r, n+1)
			joiner := nodes[n]
			before := checkRebalance(t, nil, DefaultCount, nodes[:n])
			after := checkRebalance(t, before, DefaultCount, nodes)
			m := moves(before, after)
			for part := range after {
				if before[part] != after[part] && after[part] != joiner {
					between++
				}
			}
			a0, _ := Assign(DefaultCount, nodes[:n])
			a1, _ := Assign(DefaultCount, nodes)
			am := moves(a0, a1)
			total, worst, aTotal, aWorst = total+m, max(worst, m), aTotal+am, max(aWorst, am)
		}
		if n == 3 && (total != 4*sets || worst != 4 || between != 0) {
			t.Errorf("join 3->4: moved %d in all (want %d), %d at worst, %d not to the joiner", total, 4*sets, worst, between)
		}
		t.Logf("P=%d join %d->%d over %d sets: Rebalance moved %.2f on average, %d at worst, %d not to the joiner; Assign %.2f, %d at worst",
			DefaultCount, n, n+1, sets, float64(total)/sets, worst, between, float64(aTotal)/sets, aWorst)
	}
}

// TestRebalanceSequence applies random joins and leaves, each from the map the
// last step made, and checks every invariant at every step, and that a leave
// moves only the leaver's partitions.
func TestRebalanceSequence(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for seq := range 100 {
		p := []int{1, 5, 16, 64}[seq%4]
		nodes := randomNodes(r, 1+r.IntN(4))
		owners := checkRebalance(t, nil, p, nodes)
		for range 20 {
			if len(nodes) > 1 && r.IntN(2) == 0 {
				leaver := nodes[r.IntN(len(nodes))]
				nodes = slices.DeleteFunc(nodes, func(x NodeID) bool { return x == leaver })
				next := checkRebalance(t, owners, p, nodes)
				for part := range owners {
					if owners[part] != leaver && owners[part] != next[part] {
						t.Fatalf("P=%d leave of %s moved partition %d from %s", p, leaver, part, owners[part])
					}
				}
				owners = next
			} else {
				nodes = append(nodes, randomNodes(r, 1)...)
				owners = checkRebalance(t, owners, p, nodes)
			}
		}
	}
}

// TestRebalanceDeterministic: the map depends on the node set, not its order
// or duplicates; a nil prev is Assign's map rebalanced; and a balanced map of
// live nodes is a fixed point.
func TestRebalanceDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for range 2000 {
		p := 1 + r.IntN(40)
		nodes := randomNodes(r, 1+r.IntN(6))
		prev := make([]NodeID, p)
		for part := range prev {
			prev[part] = nodes[r.IntN(len(nodes))]
		}
		nodes = nodes[:1+r.IntN(len(nodes))]
		want := checkRebalance(t, prev, p, nodes)
		shuffled := append(slices.Clone(nodes), nodes[r.IntN(len(nodes))])
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got, _ := Rebalance(prev, p, shuffled); !slices.Equal(got, want) {
			t.Fatalf("order %v: %v, want %v", shuffled, got, want)
		}
		if again, _ := Rebalance(want, p, shuffled); !slices.Equal(again, want) {
			t.Fatalf("not a fixed point: %v then %v", want, again)
		}
		a, _ := Assign(p, nodes)
		fromA, _ := Rebalance(a, p, nodes)
		if fromNil, _ := Rebalance(nil, p, nodes); !slices.Equal(fromNil, fromA) {
			t.Fatalf("Rebalance(nil) %v, Rebalance(Assign) %v", fromNil, fromA)
		}
	}
}

func TestRebalanceErrors(t *testing.T) {
	if _, err := Rebalance(nil, DefaultCount, nil); err != ErrNoNodes {
		t.Errorf("no nodes: err %v, want ErrNoNodes", err)
	}
	for _, p := range []int{0, -1, MaxCount + 1} {
		if _, err := Rebalance(nil, p, []NodeID{"a"}); err == nil {
			t.Errorf("partitions=%d: no error", p)
		}
	}
}

// TestRebalanceTable pins small cases by hand.
func TestRebalanceTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		prev  []NodeID
		nodes []NodeID
		moved int
	}{
		{"unchanged", []NodeID{"a", "b", "a", "b"}, []NodeID{"a", "b"}, 0},
		{"leave", []NodeID{"a", "b", "c", "a"}, []NodeID{"a", "b"}, 1},
		{"over the bound", []NodeID{"a", "a", "a", "b"}, []NodeID{"a", "b"}, 1},
		{"join", []NodeID{"a", "a", "b", "b"}, []NodeID{"a", "b", "c", "d"}, 2},
		{"all dead", []NodeID{"x", "y", "x", "y"}, []NodeID{"a"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkRebalance(t, tc.prev, len(tc.prev), tc.nodes)
			if m := moves(tc.prev, got); m != tc.moved {
				t.Errorf("%v -> %v moved %d, want %d", tc.prev, got, m, tc.moved)
			}
		})
	}
}

func ExampleRebalance() {
	prev := []NodeID{"a", "b", "c", "a", "b", "c"}
	next, _ := Rebalance(prev, len(prev), []NodeID{"a", "b"})
	fmt.Println(next[0], next[1], next[3], next[4])
	// Output: a b a b
}
