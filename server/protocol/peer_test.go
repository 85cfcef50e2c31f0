package protocol

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

// docSenders reads the direction column of PROTOCOL.md's table of message types: who may
// send each type.
func docSenders(t *testing.T) map[Type]senders {
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^\| (\d+) \| ([A-Z_]+) \| ([^|]+) \|`).FindAllStringSubmatch(string(doc), -1)
	out := map[Type]senders{}
	for _, r := range rows {
		var ty Type
		for i := Type(1); i < numTypes; i++ {
			if typeNames[i] == r[2] {
				ty = i
			}
		}
		if ty == 0 {
			continue // a row of another table (error codes)
		}
		var from senders
		for _, dir := range strings.Split(r[3], ",") {
			switch strings.TrimSpace(dir) {
			case "C -> S":
				from |= byClient | byWorker
			case "W -> S":
				from |= byWorker
			case "S -> C", "S -> W":
				from |= byServer
			default:
				t.Errorf("PROTOCOL.md: %v has direction %q", ty, dir)
			}
		}
		out[ty] = from
	}
	return out
}

// TestSendersMatchProtocolDoc: each type's spec names the senders PROTOCOL.md states.
func TestSendersMatchProtocolDoc(t *testing.T) {
	doc := docSenders(t)
	for ty := Type(1); ty < numTypes; ty++ {
		if s := specs[ty]; s != nil && doc[ty] != s.from {
			t.Errorf("%v: the spec's senders are %03b, PROTOCOL.md's %03b (server, client, worker from the right)", ty, s.from, doc[ty])
		}
	}
}

// TestDecoderRefusesByPeer feeds every message type, from every kind of peer, to a
// Decoder that knows that peer: it must accept exactly what PROTOCOL.md lets the peer
// send, refuse the rest with UNEXPECTED and the frame's ID, and go on with the next frame.
func TestDecoderRefusesByPeer(t *testing.T) {
	doc := docSenders(t)
	hello := func(r Role) []byte { return mustFrame(t, &Hello{ID: 1, Version: Version, Name: "x", Role: r}) }
	peers := []struct {
		name    string
		peer    Peer
		hello   []byte // fed first
		allowed func(ty Type) bool
	}{
		{"server", PeerServer, nil, func(ty Type) bool { return doc[ty]&byServer != 0 }},
		{"client before HELLO", PeerClient, nil, func(ty Type) bool { return doc[ty]&(byClient|byWorker) != 0 }},
		{"role client", PeerClient, hello(RoleClient), func(ty Type) bool { return doc[ty]&byClient != 0 && ty != TypeHello }},
		{"role worker", PeerClient, hello(RoleWorker), func(ty Type) bool { return doc[ty]&byWorker != 0 && ty != TypeHello }},
		{"worker set by SetPeer", PeerWorker, nil, func(ty Type) bool { return doc[ty]&byWorker != 0 }},
	}
	ping := mustFrame(t, &Ping{ID: 99})
	for _, p := range peers {
		for _, m := range samples() {
			d := NewDecoder(0)
			d.SetPeer(p.peer)
			if p.hello != nil {
				d.Feed(p.hello)
				if _, err := d.Next(); err != nil {
					t.Fatalf("%s: HELLO: %v", p.name, err)
				}
			}
			d.Feed(mustFrame(t, m))
			got, err := d.Next()
			if p.allowed(m.Type()) {
				if err != nil || got == nil {
					t.Errorf("%s sends %v: %v, %v; want it decoded", p.name, m.Type(), got, err)
				}
				continue
			}
			var perr *Error
			if !errors.As(err, &perr) || perr.Code != CodeUnexpected || perr.ID != m.RequestID() {
				t.Errorf("%s sends %v: %v, %v; want UNEXPECTED with id %d", p.name, m.Type(), got, err, m.RequestID())
				continue
			}
			if p.peer != PeerServer { // the next frame is read as usual
				d.Feed(ping)
				if next, err := d.Next(); err != nil || next.RequestID() != 99 {
					t.Errorf("%s: after the refused %v, PING gave %v, %v", p.name, m.Type(), next, err)
				}
			}
		}
	}
}

// TestPeerAnyAcceptsAll: a Decoder told nothing, and Decode, accept every type.
func TestPeerAnyAcceptsAll(t *testing.T) {
	d := NewDecoder(0)
	for _, m := range samples() {
		frame := mustFrame(t, m)
		d.Feed(frame)
		if _, err := d.Next(); err != nil {
			t.Errorf("Decoder: %v: %v", m.Type(), err)
		}
		if _, err := Decode(frame[headerLen:]); err != nil {
			t.Errorf("Decode: %v: %v", m.Type(), err)
		}
	}
}
