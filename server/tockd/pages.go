package tockd

import (
	"fmt"
	"unicode/utf8"

	"github.com/tock-sched/tock/core/task"
	"github.com/tock-sched/tock/server/protocol"
)

// Every reply fits max_frame (PROTOCOL.md, "Reading tasks back"):
//   - SUBMIT refuses a payload over MaxFrame - replyReserve (checkPayload), so that a
//     task's snapshot, dead letter and FIRE fit a frame with the whole payload: every
//     other field of a task is bounded (under 2 KiB encoded, 0.7 KiB of it the longest
//     trace context), and so are a snapshot's
//     error texts once cut (under 1 KiB).
//   - GET answers the task's snapshot whole when it fits; otherwise its error texts are
//     cut to cutTextLen bytes and its history to its first and latest attempts
//     (truncated), and if it still does not fit (a payload recorded under a larger
//     MaxFrame, or given to a caller's Engine directly), its payload is left out
//     (payload_len). omit_payload leaves the payload out in any case.
//   - LIST and DLQ_LIST pages end early where the next item would not fit, so a page
//     holds at least one item (cut as GET's would be, if it must) and paging always
//     continues. A shortened page is read again from the engine with the smaller limit,
//     for the engine's cursor after its last item.
//
// Items are measured by encoding them (sizer): these replies are administrative, and
// replyCost's bound, good enough for the reply queue, would end pages of small tasks
// well before max_frame.
const (
	// replyReserve is the part of MaxFrame a payload leaves to the rest of a reply.
	replyReserve = 4 << 10
	// cutTextLen is what an error text is cut to when an item does not fit.
	cutTextLen = 256
)

// maxReplyPayload is the largest payload SUBMIT accepts: one that every reply carrying
// it can hold.
func (q *requests) maxReplyPayload() int { return q.opts.MaxFrame - replyReserve }

// checkPayload refuses (INVALID_TASK, field payload) a payload that replies could not
// carry whole.
func (q *requests) checkPayload(w *protocol.Task) error {
	if n := len(w.Payload); n > q.maxReplyPayload() {
		return &protocol.Error{Code: protocol.CodeInvalidTask, Field: "payload",
			Message: fmt.Sprintf("payload of %d bytes exceeds %d, the most a reply can carry (max_frame %d less %d)",
				n, q.maxReplyPayload(), q.opts.MaxFrame, replyReserve)}
	}
	return nil
}

// getReply answers GET with in's snapshot, cut to fit MaxFrame if it must.
func (q *requests) getReply(id uint64, in task.Info, omitPayload bool) protocol.Message {
	w, err := protocol.FromInfo(in, q.durabilityOf(in))
	if err != nil {
		return internal(id, err)
	}
	// The sizer's frame has ID 0: the reply's ID takes up to 8 bytes more than its
	// length prefix does.
	var z sizer
	infoFit.fit(&z, &w, q.opts.MaxFrame-8, omitPayload)
	return &protocol.TaskInfo{ID: id, Info: w}
}

// listReply answers LIST with a page that fits MaxFrame.
func (q *requests) listReply(m *protocol.List) (protocol.Message, bool) {
	read := func(limit int) ([]task.Info, string, error) { return q.engine.List(m.State, m.Cursor, limit) }
	wire := func(in task.Info) (protocol.Info, error) { return protocol.FromInfo(in, q.durabilityOf(in)) }
	items, next, e := fitPage(q.opts.MaxFrame, int(m.Limit), m.OmitPayload, read, wire, infoFit)
	if e != nil {
		e.ID = m.ID
		return e, e.Code.Closes()
	}
	return &protocol.TaskPage{ID: m.ID, Items: items, Next: next}, false
}

// dlqReply answers DLQ_LIST with a page that fits MaxFrame.
func (q *requests) dlqReply(m *protocol.DLQList) (protocol.Message, bool) {
	read := func(limit int) ([]task.DeadLetter, string, error) { return q.engine.DeadLetters(m.Cursor, limit) }
	wire := func(dl task.DeadLetter) (protocol.DeadLetter, error) {
		return protocol.FromDeadLetter(dl, protocol.Ephemeral)
	}
	items, next, e := fitPage(q.opts.MaxFrame, int(m.Limit), m.OmitPayload, read, wire, deadLetterFit)
	if e != nil {
		e.ID = m.ID
		return e, e.Code.Closes()
	}
	return &protocol.DLQPage{ID: m.ID, Items: items, Next: next}, false
}

// itemFit is how an item kind of a reply (a snapshot, a dead letter) is measured and
// cut (sizer): size measures one as encoded, cut shortens its error texts and attempts
// (marking it truncated), omit leaves its payload out.
type itemFit[W any] struct {
	size func(z *sizer, w *W) int
	cut  func(w *W)
	omit func(w *W)
}

var (
	infoFit = itemFit[protocol.Info]{size: (*sizer).info,
		cut: func(in *protocol.Info) {
			in.LastError, in.History, in.Truncated = cutText(in.LastError), cutAttempts(in.History), true
		},
		omit: func(in *protocol.Info) { omitPayload(&in.Task, &in.Cut) }}
	deadLetterFit = itemFit[protocol.DeadLetter]{size: (*sizer).deadLetter,
		cut: func(dl *protocol.DeadLetter) {
			dl.Reason, dl.Attempts, dl.Truncated = cutText(dl.Reason), cutAttempts(dl.Attempts), true
		},
		omit: func(dl *protocol.DeadLetter) { omitPayload(&dl.Task, &dl.Cut) }}
)

// fit makes w take at most budget bytes: the payload left out if omit, then, if still
// over, error texts and attempts cut, then the payload left out.
func (k itemFit[W]) fit(z *sizer, w *W, budget int, omit bool) {
	if omit {
		k.omit(w)
	}
	if k.size(z, w) <= budget {
		return
	}
	k.cut(w)
	if k.size(z, w) > budget {
		k.omit(w)
	}
}

// fitPage reads a page of at most limit items (read) and converts them (wire), ending
// it early where the next item would not fit maxFrame; the first item always goes in,
// cut to fit if it must. A shortened page is read again with the smaller limit, for
// read's cursor after its last item. The error (its ID unset) is read's, mapped as a
// cursor's (BAD_FIELD cursor), or wire's (INTERNAL).
func fitPage[T, W any](maxFrame, limit int, omit bool, read func(limit int) ([]T, string, error),
	wire func(T) (W, error), k itemFit[W]) ([]W, string, *protocol.Error) {
	var z sizer
	for {
		page, next, err := read(limit)
		if err != nil {
			return nil, "", mapEngineError(err, "cursor")
		}
		items := make([]W, 0, len(page))
		size := pageOverhead
		for i, it := range page {
			w, err := wire(it)
			if err != nil {
				return nil, "", internal(0, err)
			}
			if i == 0 {
				k.fit(&z, &w, maxFrame-size, omit)
			} else if omit {
				k.omit(&w)
			}
			n := k.size(&z, &w)
			if i > 0 && size+n > maxFrame {
				break
			}
			size += n
			items = append(items, w)
		}
		if len(items) == len(page) {
			return items, next, nil
		}
		limit = len(items) // for the engine's cursor after the last item that fits
	}
}

// pageOverhead bounds a TASK_PAGE's or DLQ_PAGE's bytes but its items: the length
// prefix, the map, "t" and "id" (at most 9 + 4 bytes), "items" and the array's header,
// "next" and its cursor (whatever the engine's cursors hold, at most MaxCursorLen).
const pageOverhead = 4 + 1 + 13 + 6 + 5 + 5 + 3 + protocol.MaxCursorLen

// sizer measures items by encoding them into a buffer it reuses.
type sizer struct{ buf []byte }

// info is the bytes in takes in a reply, at most 18 more than it does: it is encoded
// as a TASK_INFO with ID 0 (prefix, map, "t", "id", "info").
func (z *sizer) info(in *protocol.Info) int {
	return z.measure(&protocol.TaskInfo{Info: *in})
}

// deadLetter is the bytes dl takes in a reply, at most 28 more than it does: it is
// encoded as a DLQ_PAGE of one, with ID 0.
func (z *sizer) deadLetter(dl *protocol.DeadLetter) int {
	return z.measure(&protocol.DLQPage{Items: []protocol.DeadLetter{*dl}})
}

func (z *sizer) measure(m protocol.Message) int {
	var err error
	z.buf, err = protocol.AppendFrame(z.buf[:0], m, protocol.MaxFrameLimit)
	if err != nil { // only beyond the codec's limits, which a snapshot cannot reach
		return protocol.MaxFrameLimit
	}
	return len(z.buf)
}

// omitPayload leaves t's payload out and records its length in cut.
func omitPayload(t *protocol.Task, cut *protocol.Cut) {
	if len(t.Payload) > 0 {
		cut.PayloadLen = uint64(len(t.Payload))
		t.Payload = nil
	}
}

// cutAttempts keeps the first and the latest attempt, their texts cut. It copies: the
// records may be shared with the engine's snapshot.
func cutAttempts(as []protocol.AttemptRecord) []protocol.AttemptRecord {
	if len(as) > 2 {
		as = []protocol.AttemptRecord{as[0], as[len(as)-1]}
	} else {
		as = append([]protocol.AttemptRecord(nil), as...)
	}
	for i := range as {
		as[i].Err = cutText(as[i].Err)
	}
	return as
}

// cutText cuts s to at most cutTextLen bytes, at a rune boundary.
func cutText(s string) string {
	if len(s) <= cutTextLen {
		return s
	}
	n := cutTextLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
