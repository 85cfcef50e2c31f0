package task

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

func letter(ns, id string) DeadLetter {
	return DeadLetter{
		Task:     Task{Namespace: ns, ID: id, Type: "t", Payload: []byte(id)},
		Attempts: []AttemptRecord{{Attempt: 1, Err: "boom " + id}},
		DiedAt:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Reason:   "attempts exhausted (1 of 1)",
	}
}

func ids(page []DeadLetter) []string {
	out := make([]string, len(page))
	for i, d := range page {
		out[i] = d.Task.ID
	}
	return out
}

func mustVerify(t *testing.T, q *dlq) {
	t.Helper()
	if err := q.verify(); err != nil {
		t.Fatal(err)
	}
}

// listAll pages through q with the given limit and returns every ID in order.
func listAll(t *testing.T, q *dlq, limit int) []string {
	t.Helper()
	var out []string
	cursor := ""
	for {
		page, next, err := q.List(cursor, limit)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ids(page)...)
		if next == "" {
			return out
		}
		cursor = next
	}
}

func TestDLQEvictsOldest(t *testing.T) {
	q := newDLQ(3)
	for _, id := range []string{"a", "b", "c"} {
		if ev := q.Add(letter("ns", id)); ev != nil {
			t.Fatalf("Add(%s) evicted %s below capacity", id, ev.Task.ID)
		}
		mustVerify(t, q)
	}
	for _, step := range []struct{ add, evicted string }{{"d", "a"}, {"e", "b"}, {"f", "c"}} {
		ev := q.Add(letter("ns", step.add))
		if ev == nil || ev.Task.ID != step.evicted || string(ev.Task.Payload) != step.evicted || ev.Attempts[0].Err != "boom "+step.evicted {
			t.Fatalf("Add(%s) evicted %+v, want %s", step.add, ev, step.evicted)
		}
		mustVerify(t, q)
	}
	if q.Len() != 3 || q.Evicted() != 3 {
		t.Fatalf("Len %d, Evicted %d; want 3, 3", q.Len(), q.Evicted())
	}
	if got := listAll(t, q, 0); !slices.Equal(got, []string{"d", "e", "f"}) {
		t.Fatalf("List = %v", got)
	}
	if _, ok := q.Get("ns", "a"); ok {
		t.Fatal("evicted entry still found")
	}
}

func TestDLQDefaultCapacity(t *testing.T) {
	for _, c := range []int{0, -1} {
		if q := newDLQ(c); q.capacity != DefaultDLQCapacity {
			t.Errorf("newDLQ(%d) capacity %d", c, q.capacity)
		}
	}
}

func TestDLQReplaceSameID(t *testing.T) {
	q := newDLQ(2)
	q.Add(letter("ns", "a"))
	q.Add(letter("ns", "b"))
	again := letter("ns", "a")
	again.Reason = "second death"
	if ev := q.Add(again); ev != nil {
		t.Fatalf("replacing evicted %s", ev.Task.ID)
	}
	mustVerify(t, q)
	if q.Len() != 2 || q.Evicted() != 0 {
		t.Fatalf("Len %d, Evicted %d", q.Len(), q.Evicted())
	}
	if got := listAll(t, q, 0); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("List = %v; the replaced entry must move to the end", got)
	}
	if d, _ := q.Get("ns", "a"); d.Reason != "second death" {
		t.Fatalf("Get returned the old entry: %q", d.Reason)
	}
	// Same ID in another namespace is another entry.
	q.Add(letter("other", "a"))
	if d, ok := q.Get("ns", "b"); ok {
		t.Fatalf("the oldest (b) should have been evicted, got %+v", d)
	}
	if _, ok := q.Get("other", "a"); !ok {
		t.Fatal("other/a missing")
	}
	mustVerify(t, q)
}

func TestDLQCopiesSlices(t *testing.T) {
	q := newDLQ(0)
	d := letter("ns", "a")
	q.Add(d)
	d.Task.Payload[0] = 'X'
	d.Attempts[0].Err = "changed"
	got, _ := q.Get("ns", "a")
	if string(got.Task.Payload) != "a" || got.Attempts[0].Err != "boom a" {
		t.Fatalf("the queue shares the caller's slices: %q, %q", got.Task.Payload, got.Attempts[0].Err)
	}
}

func TestDLQGetRemovePurge(t *testing.T) {
	q := newDLQ(10)
	for _, id := range []string{"a", "b", "c", "d"} {
		q.Add(letter("ns", id))
	}
	if d, ok := q.Get("ns", "b"); !ok || d.Task.ID != "b" || d.Reason == "" {
		t.Fatalf("Get(b) = %+v, %v", d, ok)
	}
	if _, ok := q.Get("ns", "zz"); ok {
		t.Fatal("Get of a missing ID succeeded")
	}
	if _, ok := q.Get("nope", "b"); ok {
		t.Fatal("Get in the wrong namespace succeeded")
	}
	if d, ok := q.Remove("ns", "b"); !ok || d.Task.ID != "b" {
		t.Fatalf("Remove(b) = %+v, %v", d, ok)
	}
	mustVerify(t, q)
	if _, ok := q.Remove("ns", "b"); ok {
		t.Fatal("second Remove(b) succeeded")
	}
	if !q.Purge("ns", "a") || q.Purge("ns", "a") {
		t.Fatal("Purge(a) twice: want true then false")
	}
	mustVerify(t, q)
	if got := listAll(t, q, 0); !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("List = %v", got)
	}
	_, cursor, _ := q.List("", 1) // names c
	if n := q.PurgeAll(); n != 2 || q.Len() != 0 {
		t.Fatalf("PurgeAll = %d, Len %d", n, q.Len())
	}
	mustVerify(t, q)
	if page, next, err := q.List(cursor, 0); err != nil || len(page) != 0 || next != "" {
		t.Fatalf("old cursor after PurgeAll: %v, %q, %v", ids(page), next, err)
	}
	q.Add(letter("ns", "e"))
	if page, _, err := q.List(cursor, 0); err != nil || !slices.Equal(ids(page), []string{"e"}) {
		t.Fatalf("old cursor after PurgeAll and Add: %v, %v", ids(page), err)
	}
	if q.Evicted() != 0 {
		t.Fatalf("Evicted %d: removals are not evictions", q.Evicted())
	}
}

func TestDLQBadCursor(t *testing.T) {
	q := newDLQ(10)
	for i := range 5 {
		q.Add(letter("ns", strconv.Itoa(i)))
	}
	for _, c := range []string{"x", "-1", "1.5", " 1", "1 ", "0x1", "99999999999999999999", "6"} {
		if _, _, err := q.List(c, 10); !errors.Is(err, ErrBadCursor) {
			t.Errorf("List(%q) = %v, want ErrBadCursor", c, err)
		}
	}
	for _, c := range []string{"", "0", "5"} {
		if _, _, err := q.List(c, 10); err != nil {
			t.Errorf("List(%q) = %v", c, err)
		}
	}
}

func TestDLQListLimits(t *testing.T) {
	q := newDLQ(2000)
	for i := range 1500 {
		q.Add(letter("ns", strconv.Itoa(i)))
	}
	for _, tc := range []struct{ limit, want int }{{0, DefaultDLQPageSize}, {-3, DefaultDLQPageSize}, {1, 1}, {999, 999}, {5000, MaxDLQPageSize}} {
		page, next, err := q.List("", tc.limit)
		if err != nil || len(page) != tc.want || next == "" {
			t.Errorf("List(limit %d) = %d entries, next %q, %v; want %d", tc.limit, len(page), next, err, tc.want)
		}
	}
	// A page that ends exactly at the last entry says there is no next page.
	page, next, _ := q.List("1400", 100)
	if len(page) != 100 || next != "" {
		t.Errorf("last full page: %d entries, next %q", len(page), next)
	}
	if page, next, _ := q.List("", 0); len(page) != 100 || page[0].Task.ID != "0" || next != "100" {
		t.Errorf("first page: %d entries from %s, next %q", len(page), page[0].Task.ID, next)
	}
}

// TestDLQPagingWithConcurrentChanges pages through 2.5 pages while entries are removed
// (including the one the cursor names), evicted and added between pages.
func TestDLQPagingWithConcurrentChanges(t *testing.T) {
	q := newDLQ(252)
	for i := 1; i <= 250; i++ {
		q.Add(letter("ns", strconv.Itoa(i)))
	}
	page1, next, err := q.List("", 100)
	if err != nil || len(page1) != 100 || page1[0].Task.ID != "1" || page1[99].Task.ID != "100" {
		t.Fatalf("page 1: %v ... %v", err, ids(page1))
	}
	// Between pages: the cursor's own entry goes, as do a seen one, the next one and one
	// further on; two new ones arrive (filling the queue) and then a third, which evicts
	// the oldest (2).
	for _, id := range []string{"100", "5", "101", "150"} {
		if !q.Purge("ns", id) {
			t.Fatalf("Purge(%s)", id)
		}
	}
	for _, id := range []string{"251", "252", "253", "254", "255"} {
		q.Add(letter("ns", id))
	}
	mustVerify(t, q)
	page2, next, err := q.List(next, 100)
	if err != nil {
		t.Fatal(err)
	}
	var want2 []string
	for i := 102; len(want2) < 100; i++ {
		if i != 150 {
			want2 = append(want2, strconv.Itoa(i))
		}
	}
	if !slices.Equal(ids(page2), want2) {
		t.Fatalf("page 2 = %v\nwant %v", ids(page2), want2)
	}
	// Between pages 2 and 3: remove everything on page 2 and the entry after it.
	for _, id := range append(want2, "203") {
		q.Purge("ns", id)
	}
	mustVerify(t, q)
	page3, next, err := q.List(next, 100)
	if err != nil {
		t.Fatal(err)
	}
	var want3 []string
	for i := 204; i <= 255; i++ {
		want3 = append(want3, strconv.Itoa(i))
	}
	if !slices.Equal(ids(page3), want3) || next != "" {
		t.Fatalf("page 3 = %v, next %q\nwant %v", ids(page3), next, want3)
	}
}

// TestDLQModel drives the queue with seeded random operations against a plain slice, and
// checks every paging step: pages are in order, no entry appears twice in one pass, and
// every entry live from a pass's start to its end is seen.
func TestDLQModel(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 7))
		capacity := 1 + rng.IntN(200)
		q := newDLQ(capacity)
		var model []string // live IDs in order, oldest first
		var evicted uint64
		var cursor string
		seen := map[string]bool{}   // IDs listed in the current pass
		stable := map[string]bool{} // IDs live since the current pass began
		for op := range 3000 {
			switch r := rng.IntN(10); {
			case r < 5: // add, sometimes an existing ID
				id := strconv.Itoa(rng.IntN(3 * capacity))
				if i := slices.Index(model, id); i >= 0 {
					model = slices.Delete(model, i, i+1)
				} else if len(model) == capacity {
					delete(stable, model[0])
					model = model[1:]
					evicted++
				}
				model = append(model, id)
				delete(stable, id) // re-added: it moves, and may be seen again
				q.Add(letter("ns", id))
			case r < 8: // remove
				if len(model) == 0 {
					continue
				}
				i := rng.IntN(len(model))
				id := model[i]
				model = slices.Delete(model, i, i+1)
				delete(stable, id)
				if _, ok := q.Remove("ns", id); !ok {
					t.Fatalf("seed %d op %d: Remove(%s) missed", seed, op, id)
				}
			default: // one page
				if cursor == "" {
					clear(seen)
					clear(stable)
					for _, id := range model {
						stable[id] = true
					}
				}
				page, next, err := q.List(cursor, 1+rng.IntN(20))
				if err != nil {
					t.Fatalf("seed %d op %d: %v", seed, op, err)
				}
				for i, d := range page {
					if i > 0 && d.seq <= page[i-1].seq {
						t.Fatalf("seed %d op %d: page out of order", seed, op)
					}
					if seen[d.Task.ID] && stable[d.Task.ID] {
						t.Fatalf("seed %d op %d: %s listed twice in one pass", seed, op, d.Task.ID)
					}
					seen[d.Task.ID] = true
				}
				if cursor = next; cursor == "" {
					for id := range stable {
						if !seen[id] {
							t.Fatalf("seed %d op %d: %s was live throughout the pass but not listed", seed, op, id)
						}
					}
				}
			}
			if err := q.verify(); err != nil {
				t.Fatalf("seed %d op %d: %v", seed, op, err)
			}
			if q.Len() != len(model) || q.Evicted() != evicted {
				t.Fatalf("seed %d op %d: Len %d Evicted %d, model %d %d", seed, op, q.Len(), q.Evicted(), len(model), evicted)
			}
		}
		if got := listAll(t, q, 7); !slices.Equal(got, model) {
			t.Fatalf("seed %d: final order %v\nwant %v", seed, got, model)
		}
	}
}

func TestDLQConcurrent(t *testing.T) {
	q := newDLQ(64)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(3)
		go func() { // adders
			defer wg.Done()
			for i := range 2000 {
				q.Add(letter(fmt.Sprint("ns", w), strconv.Itoa(i%100)))
			}
		}()
		go func() { // removers and readers
			defer wg.Done()
			for i := range 2000 {
				q.Get(fmt.Sprint("ns", w), strconv.Itoa(i%100))
				q.Remove(fmt.Sprint("ns", w), strconv.Itoa((i*7)%100))
				_ = q.Len() + int(q.Evicted())
			}
		}()
		go func() { // pagers
			defer wg.Done()
			cursor := ""
			for range 500 {
				page, next, err := q.List(cursor, 10)
				if err != nil {
					t.Error(err)
					return
				}
				for i := 1; i < len(page); i++ {
					if page[i].seq <= page[i-1].seq {
						t.Error("page out of order")
						return
					}
				}
				cursor = next
			}
		}()
	}
	wg.Wait()
	mustVerify(t, q)
	if q.PurgeAll() > 64 {
		t.Fatal("over capacity")
	}
}

// TestDLQVerifyCatches: the checker is only worth its keep if it notices corruption.
func TestDLQVerifyCatches(t *testing.T) {
	fresh := func() *dlq {
		q := newDLQ(10)
		for _, id := range []string{"a", "b", "c"} {
			q.Add(letter("ns", id))
		}
		return q
	}
	for name, corrupt := range map[string]func(q *dlq){
		"pos":           func(q *dlq) { q.order[1].e.pos = 2 },
		"seq order":     func(q *dlq) { q.order[1].seq, q.order[2].seq = q.order[2].seq, q.order[1].seq },
		"head":          func(q *dlq) { q.order[0].e = nil },
		"unmapped":      func(q *dlq) { delete(q.byKey, dlqKey{"ns", "b"}) },
		"entry seq":     func(q *dlq) { q.order[2].e.d.seq = 99 },
		"future seq":    func(q *dlq) { q.seq = 1 },
		"over capacity": func(q *dlq) { q.capacity = 2 },
	} {
		q := fresh()
		corrupt(q)
		if q.verify() == nil {
			t.Errorf("%s: corruption not detected", name)
		}
	}
}
