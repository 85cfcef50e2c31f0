package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// maxReply bounds the bytes of a webhook's reply that are read.
const maxReply = 64 << 10

// send is h's sender goroutine: it posts h's queue in order until Close closes it.
func (n *Notifier) send(h *hook) {
	defer n.wg.Done()
	for q := range h.queue {
		if n.ctx.Err() != nil { // Close gave up: count what is left
			n.stats.dropped.Add(1)
			continue
		}
		a := q.withSuppressed()
		err := n.deliver(h, a)
		switch {
		case err == nil:
			n.stats.sent.Add(1)
		case n.ctx.Err() != nil:
			n.stats.dropped.Add(1)
		default:
			n.stats.failed.Add(1)
			n.opts.Logger.Warn("notify: alert not delivered", "webhook", h.name, "key", a.Key, "err", err)
		}
	}
}

// deliver posts a to h, retrying what may succeed later, with a doubling backoff.
func (n *Notifier) deliver(h *hook, a Alert) error {
	var body []byte
	if h.Format == FormatFeishu {
		body = feishuBody(a, h.Secret, n.opts.Clock())
	} else {
		body = jsonBody(a)
	}
	wait := n.opts.RetryBackoff
	for attempt := 0; ; attempt++ {
		retry, err := n.post(h, body)
		if err == nil {
			return nil
		}
		if !retry || attempt >= n.opts.Retries || n.ctx.Err() != nil {
			return fmt.Errorf("%w: after %d attempt(s): %s", ErrDelivery, attempt+1, redactText(err.Error()))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-n.ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %s (retry cut off by Close)", ErrDelivery, redactText(err.Error()))
		}
		wait = min(2*wait, n.opts.MaxRetryBackoff)
	}
}

// post makes one attempt; retry tells whether a failure may pass on a later attempt. Its
// error may quote the webhook's full URL: the caller redacts it (redactText).
func (n *Notifier) post(h *hook, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := n.client.Do(req)
	if err != nil {
		return true, err // its text names the URL: deliver redacts it
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, fmt.Errorf("status %s", resp.Status)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return false, fmt.Errorf("status %s", resp.Status)
	case err != nil:
		return true, fmt.Errorf("reading reply: %w", err)
	case h.Format == FormatFeishu:
		var r struct {
			Code int    `json:"code"`
			Msg  string `json:"msg"`
		}
		if json.Unmarshal(reply, &r) == nil && r.Code != 0 {
			return false, fmt.Errorf("feishu code %d: %s", r.Code, r.Msg)
		}
	}
	return false, nil
}
