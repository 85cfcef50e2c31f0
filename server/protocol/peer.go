package protocol

import "fmt"

// Peer is who writes the frames a Decoder reads. It fixes the message types the Decoder
// accepts (PROTOCOL.md, "Who sends what"): a known type its peer may not send is
// refused with UNEXPECTED before its body is read, as nats-server refuses the operations
// a connection kind may not send.
type Peer uint8

const (
	// PeerAny accepts every type: a new Decoder's peer, and Decode's.
	PeerAny Peer = iota
	// PeerServer is a server, read by a client: the types the server sends.
	PeerServer
	// PeerClient is a client, read by the server: before its HELLO, any request (the
	// server answers every first frame but HELLO itself); after a HELLO with role client,
	// the client requests; a HELLO with role worker makes the peer PeerWorker. A second
	// HELLO is refused.
	PeerClient
	// PeerWorker is a connection that said HELLO with role worker: a client's requests
	// and the worker's (SUBSCRIBE, CREDIT, ACK, NACK, ACKS, CARRY).
	PeerWorker
)

// SetPeer sets who sends the frames d reads, from the next frame on.
func (d *Decoder) SetPeer(p Peer) { d.dec.peer = peer{who: p} }

// senders is the set of peers that may send a message type.
type senders uint8

const (
	byServer senders = 1 << iota
	byClient         // role client, and a worker (which may send every client request)
	byWorker
	byAnyone = byServer | byClient | byWorker // ERROR: the server never answers one
)

// peer is a Decoder's knowledge of its peer: who it is, and whether it said HELLO.
type peer struct {
	who   Peer
	hello bool // a HELLO was decoded: another is UNEXPECTED
}

// allows returns nil when the peer may send a message of type t, whose senders are
// from, else the UNEXPECTED error to answer it with.
func (p *peer) allows(t Type, from senders) *Error {
	var msg string
	switch p.who {
	case PeerAny:
		return nil
	case PeerServer:
		if from&byServer == 0 {
			msg = fmt.Sprintf("%v is sent to the server, never by it", t)
		}
	default:
		switch {
		case from&(byClient|byWorker) == 0:
			msg = fmt.Sprintf("%v is sent by the server, never to it", t)
		case t == TypeHello && p.hello:
			msg = "a second HELLO: the handshake is done"
		case from&byClient == 0 && p.who == PeerClient && p.hello:
			msg = fmt.Sprintf("%v is a worker message; this connection's role is %v", t, RoleClient)
		}
	}
	if msg == "" {
		return nil
	}
	return newError(CodeUnexpected, "", msg)
}

// saw notes a message the peer sent: a HELLO fixes the role of a client's connection.
func (p *peer) saw(m Message) {
	if h, ok := m.(*Hello); ok && p.who >= PeerClient {
		p.hello = true
		if h.Role == RoleWorker {
			p.who = PeerWorker
		}
	}
}
