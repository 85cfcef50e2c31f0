package partition

import "slices"

// Rebalance returns the owner of each of p partitions among nodes, starting
// from prev, the map in force before the live set changed. It keeps every
// partition whose previous owner is live, except what a node must shed to
// stay within ceil(p/n) or give to bring another node up to floor(p/n), so
// every node ends with floor(p/n) or ceil(p/n) partitions and the map moves
// the fewest partitions any such map can (see the package doc). A prev that
// is nil or not of length p is replaced by Assign(p, nodes) first. The result
// depends only on prev, p and the set of nodes (not their order or
// duplicates). Cost: O(p·n) hashes and comparisons, plus O(p) for each
// partition moved to meet the floor; one slice of p owners and O(n) scratch.
func Rebalance(prev []NodeID, p int, nodes []NodeID) ([]NodeID, error) {
	set, err := nodeSet(p, nodes)
	if err != nil {
		return nil, err
	}
	if len(prev) != p {
		if prev, err = Assign(p, set); err != nil {
			return nil, err
		}
	}
	n := len(set)
	lo, hi := p/n, (p+n-1)/n
	owners := slices.Clone(prev)
	held := make(map[NodeID]int, n)
	for _, x := range set {
		held[x] = 0
	}
	for part, x := range owners {
		if _, live := held[x]; live {
			held[x]++
		} else {
			owners[part] = ""
		}
	}
	// Shed: a node over hi gives up its lowest-weight partitions.
	for _, x := range set {
		for held[x] > hi {
			shed, sw := -1, uint64(0)
			for part, o := range owners {
				if o != x {
					continue
				}
				// Lowest weight first; among equal weights, the larger index.
				if w := weight(part, x); shed < 0 || w <= sw {
					shed, sw = part, w
				}
			}
			owners[shed] = ""
			held[x]--
		}
	}
	// Fill: each free partition, in index order, goes to the node holding the
	// fewest, ties to the higher rendezvous weight, then the smaller ID.
	for part, o := range owners {
		if o != "" {
			continue
		}
		best, bw := set[0], weight(part, set[0])
		for _, x := range set[1:] {
			w := weight(part, x)
			if held[x] < held[best] || held[x] == held[best] && beats(x, w, best, bw) {
				best, bw = x, w
			}
		}
		owners[part] = best
		held[best]++
	}
	// Floor: while a node holds fewer than lo, it takes, from the nodes
	// holding the most, the partition it has the highest weight for.
	for {
		low, top := set[0], held[set[0]]
		for _, x := range set[1:] {
			if held[x] < held[low] {
				low = x
			}
			top = max(top, held[x])
		}
		if held[low] >= lo {
			break
		}
		take, tw := -1, uint64(0)
		for part, o := range owners {
			if held[o] != top {
				continue
			}
			if w := weight(part, low); take < 0 || w > tw {
				take, tw = part, w
			}
		}
		held[owners[take]]--
		owners[take] = low
		held[low]++
	}
	return owners, nil
}
