package main

import (
	"fmt"
	"strconv"
	"strings"
)

// dagDiamond is -dag diamond: fan:4, a root, two children and a sink.
const dagDiamond = "diamond"

// dagSpec is -dag: the tasks form workflows of size consecutive indices each, task
// g*size the root, the next size-2 its children (each depending on the root), and the
// last the sink (depending on every child). The zero value is no DAG. A workflow never
// spans two submits: a producer's range and each of its batches hold whole workflows.
type dagSpec struct {
	size int // tasks per workflow, 3 to maxBatch; 0: no DAG
}

// parseDAG parses -dag: "" (none), "diamond" or "fan:N".
func parseDAG(s string) (dagSpec, error) {
	switch {
	case s == "":
		return dagSpec{}, nil
	case s == dagDiamond:
		return dagSpec{size: 4}, nil
	}
	n, ok := strings.CutPrefix(s, "fan:")
	v, err := strconv.Atoi(n)
	if !ok || err != nil || v < 3 || v > maxBatch {
		return dagSpec{}, fmt.Errorf("-dag %q: want fan:N (N from 3 to %d: a root, N-2 children depending on it, a sink depending on every child) or %s (fan:4)",
			s, maxBatch, dagDiamond)
	}
	return dagSpec{size: v}, nil
}

// on reports whether the spec is a DAG.
func (d dagSpec) on() bool { return d.size > 0 }

// unit is the tasks that must stay together in one submit: a workflow, or one task.
func (d dagSpec) unit() int { return max(d.size, 1) }

// parents returns task i's parents as the index range [lo, hi) (empty for a root, or
// with no DAG): a child's is its root, a sink's every child of its workflow. O(1).
func (d dagSpec) parents(i int) (lo, hi int) {
	if d.size == 0 {
		return 0, 0
	}
	pos := i % d.size
	root := i - pos
	switch pos {
	case 0:
		return 0, 0
	case d.size - 1:
		return root + 1, i
	}
	return root, root + 1
}

// String is the spec as -dag takes it.
func (d dagSpec) String() string {
	if d.size == 0 {
		return ""
	}
	return "fan:" + strconv.Itoa(d.size)
}
