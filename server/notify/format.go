package notify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// The bodies are built by hand where order matters (the generic body's "fields" object
// keeps the alert's order, which a map would lose) and with encoding/json elsewhere. The
// codec does no I/O.

// jsonBody is the generic body of a FormatJSON webhook.
func jsonBody(a Alert) []byte {
	var b bytes.Buffer
	b.WriteString(`{"kind":`)
	writeJSON(&b, string(a.Kind))
	b.WriteString(`,"key":`)
	writeJSON(&b, a.Key)
	b.WriteString(`,"severity":`)
	writeJSON(&b, string(a.Severity))
	b.WriteString(`,"title":`)
	writeJSON(&b, a.Title)
	b.WriteString(`,"text":`)
	writeJSON(&b, a.Text)
	b.WriteString(`,"fields":{`)
	for i, f := range a.Fields {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(&b, f.Key)
		b.WriteByte(':')
		writeJSON(&b, f.Value)
	}
	b.WriteString(`},"time":`)
	writeJSON(&b, a.Time.UTC().Format(time.RFC3339Nano))
	b.WriteString(`,"node":`)
	writeJSON(&b, a.Node)
	b.WriteString(`,"resolved":`)
	b.WriteString(strconv.FormatBool(a.Resolved))
	b.WriteByte('}')
	return b.Bytes()
}

// writeJSON writes s as a JSON string; marshalling a string cannot fail.
func writeJSON(b *bytes.Buffer, s string) {
	out, _ := json.Marshal(s)
	b.Write(out)
}

// Feishu card JSON 1.0, the shape custom bots accept for msg_type "interactive".
type (
	feishuMsg struct {
		Timestamp string     `json:"timestamp,omitempty"`
		Sign      string     `json:"sign,omitempty"`
		MsgType   string     `json:"msg_type"`
		Card      feishuCard `json:"card"`
	}
	feishuCard struct {
		Config   feishuConfig `json:"config"`
		Header   feishuHeader `json:"header"`
		Elements []any        `json:"elements"`
	}
	feishuConfig struct {
		WideScreenMode bool `json:"wide_screen_mode"`
	}
	feishuHeader struct {
		Title    feishuText `json:"title"`
		Template string     `json:"template"`
	}
	feishuText struct {
		Tag     string `json:"tag"`
		Content string `json:"content"`
	}
	feishuDiv struct {
		Tag    string        `json:"tag"`
		Text   *feishuText   `json:"text,omitempty"`
		Fields []feishuField `json:"fields,omitempty"`
	}
	feishuField struct {
		IsShort bool       `json:"is_short"`
		Text    feishuText `json:"text"`
	}
	feishuNote struct {
		Tag      string       `json:"tag"`
		Elements []feishuText `json:"elements"`
	}
)

// feishuTemplate is the header colour: green when resolved, else by severity.
func feishuTemplate(a Alert) string {
	switch {
	case a.Resolved:
		return "green"
	case a.Severity == SeverityCritical:
		return "red"
	case a.Severity == SeverityInfo:
		return "blue"
	default:
		return "orange"
	}
}

// feishuBody is the body of a FormatFeishu webhook, signed when secret is set; now is the
// signature's timestamp.
func feishuBody(a Alert, secret string, now time.Time) []byte {
	title := a.Title
	if a.Resolved {
		title = "[resolved] " + title
	}
	text := a.Text
	if text == "" {
		text = a.Title
	}
	elems := []any{feishuDiv{Tag: "div", Text: &feishuText{"lark_md", text}}}
	if len(a.Fields) > 0 {
		fs := make([]feishuField, len(a.Fields))
		for i, f := range a.Fields {
			fs[i] = feishuField{IsShort: true, Text: feishuText{"lark_md", "**" + f.Key + "**\n" + f.Value}}
		}
		elems = append(elems, feishuDiv{Tag: "div", Fields: fs})
	}
	note := strings.Join([]string{a.Node, a.Time.UTC().Format(time.RFC3339), a.Key}, " · ")
	elems = append(elems, feishuNote{Tag: "note", Elements: []feishuText{{"plain_text", note}}})
	m := feishuMsg{
		MsgType: "interactive",
		Card: feishuCard{
			Config:   feishuConfig{WideScreenMode: true},
			Header:   feishuHeader{Title: feishuText{"plain_text", title}, Template: feishuTemplate(a)},
			Elements: elems,
		},
	}
	if secret != "" {
		m.Timestamp = strconv.FormatInt(now.Unix(), 10)
		m.Sign = feishuSign(m.Timestamp, secret)
	}
	out, _ := json.Marshal(m) // plain structs of strings and bools: cannot fail
	return out
}

// feishuSign is a Feishu/Lark custom bot's signature: base64 of HMAC-SHA256 keyed with
// timestamp + "\n" + secret over an empty message.
func feishuSign(timestamp, secret string) string {
	h := hmac.New(sha256.New, []byte(timestamp+"\n"+secret))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}
