package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/client"
)

// ---- dag: a workflow's graph
//
// The server gives each task its parents (GET's and LIST's depends_on), not its
// children; dag finds those by listing every task the server holds (LIST pages of
// maxPageLimit items, payloads left out) and keeping the namespace's: O(tasks held)
// requests' work and O(tasks in the namespace) memory, a tool for looking at a workflow,
// not for a hot path. A parent the server no longer holds (dropped by its retention)
// shows as state "?".

// dagNode is one task of the graph printed.
type dagNode struct {
	ID       string   `json:"id"`
	State    string   `json:"state"`
	Parents  []string `json:"parents,omitempty"`
	Children []string `json:"children,omitempty"`
}

func dagCommand() *command {
	var dot bool
	return &command{
		name:    "dag",
		args:    "ID",
		summary: "show the workflow a task belongs to: every task linked to it by parents and children, each with its state (-dot: Graphviz)",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&dot, "dot", false, "print the graph as Graphviz DOT (parent -> child edges)")
		},
		check: oneID,
		do: func(ctx context.Context, e *env, args []string) error {
			if _, err := e.c.Get(ctx, e.g.namespace, args[0], client.OmitPayload()); err != nil {
				return err // NOT_FOUND, as get says it
			}
			nodes, err := workflowOf(ctx, e, args[0])
			if err != nil {
				return err
			}
			switch {
			case dot:
				return writeDOT(e.stdout, nsOrDefault(e.g.namespace), nodes)
			case e.g.json:
				return writeJSON(e.stdout, nodes)
			}
			return writeDAG(e.stdout, nodes)
		},
	}
}

func nsOrDefault(ns string) string {
	if ns == "" {
		return task.DefaultNamespace
	}
	return ns
}

// workflowOf lists every task, keeps the namespace's, and returns the tasks reachable
// from id by following parents and children, in topological order (parents first; ties
// by ID), each node's parents and children sorted by ID.
func workflowOf(ctx context.Context, e *env, id string) ([]dagNode, error) {
	ns := nsOrDefault(e.g.namespace)
	state := map[string]string{}
	parents := map[string][]string{}
	children := map[string][]string{}
	for cursor := ""; ; {
		items, next, err := e.c.List(ctx, 0, cursor, maxPageLimit, client.OmitPayload())
		if err != nil {
			return nil, err
		}
		for _, in := range items {
			if nsOf(in.Task) != ns {
				continue
			}
			state[in.Task.ID] = in.State.String()
			parents[in.Task.ID] = in.Task.Parents()
			for _, p := range in.Task.Parents() {
				children[p] = append(children[p], in.Task.ID)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	seen := map[string]bool{id: true}
	for queue := []string{id}; len(queue) > 0; queue = queue[1:] {
		for _, n := range append(slices.Clone(parents[queue[0]]), children[queue[0]]...) {
			if !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
	}
	// Kahn's order over the nodes seen: a node once every parent seen is placed.
	byID := make(map[string]*dagNode, len(seen))
	waiting := make(map[string]int, len(seen))
	var ready []string
	for n := range seen {
		st, ok := state[n]
		if !ok {
			st = "?"
		}
		byID[n] = &dagNode{ID: n, State: st, Parents: slices.Sorted(slices.Values(parents[n])), Children: slices.Sorted(slices.Values(children[n]))}
		if waiting[n] = len(parents[n]); waiting[n] == 0 {
			ready = append(ready, n)
		}
	}
	out := make([]dagNode, 0, len(seen))
	for len(ready) > 0 {
		slices.Sort(ready)
		n := ready[0]
		ready = ready[1:]
		out = append(out, *byID[n])
		for _, c := range byID[n].Children {
			if waiting[c]--; waiting[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	return out, nil
}

// writeDAG prints nodes as a table: one task a row, its state, parents and children.
func writeDAG(w io.Writer, nodes []dagNode) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TASK\tSTATE\tPARENTS\tCHILDREN")
	list := func(ids []string) string {
		if len(ids) == 0 {
			return "-"
		}
		cells := make([]string, len(ids))
		for i, id := range ids {
			cells[i] = cell(id)
		}
		return strings.Join(cells, ",")
	}
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cell(n.ID), n.State, list(n.Parents), list(n.Children))
	}
	return tw.Flush()
}

// writeDOT prints nodes as a Graphviz digraph named after the namespace: a node per
// task labelled with its ID and state, an edge from each parent to each child.
func writeDOT(w io.Writer, ns string, nodes []dagNode) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotID(ns))
	for _, n := range nodes {
		fmt.Fprintf(&b, "  %s [label=%s];\n", dotID(n.ID), dotID(n.ID+"\n"+n.State))
	}
	for _, n := range nodes {
		for _, c := range n.Children {
			fmt.Fprintf(&b, "  %s -> %s;\n", dotID(n.ID), dotID(c))
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// dotID quotes s as a DOT ID: in double quotes, with quotes and backslashes escaped and
// a newline as DOT's \n.
func dotID(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
