package proxy

import (
	"net/http"

	"github.com/fe64bb06/frontdoor/mentat/serve/balance"
)

// Separators between a message's role and content, and between
// messages, so that "ab"+"c" and "a"+"bc" differ.
const (
	sepRole    = 0x1e
	sepMessage = 0x1f
)

// writePrompt writes the request's leading text to bl for the prefix
// index: each chat message's role and content in order, else prompt, else
// input. Values are taken as the raw JSON bytes the client sent (escapes
// and all): the same prompt always gives the same bytes, and decoding
// would cost a copy for nothing. Only the messages array is walked, and
// only until bl is full, so the cost is bounded whatever the body's size.
// A malformed array ends the text where it breaks; the engine will refuse
// the body anyway.
func writePrompt(f *fields, bl *balance.Blocks) {
	switch {
	case len(f.Messages) > 0:
		writeMessages(f.Messages, bl)
	case len(f.Prompt) > 0:
		bl.Write(f.Prompt)
	case len(f.Input) > 0:
		bl.Write(f.Input)
	}
}

func writeMessages(raw []byte, bl *balance.Blocks) {
	s := jsonScanner{b: raw}
	if len(raw) == 0 || raw[0] != '[' {
		bl.Write(raw) // not a list: whatever it is, its bytes
		return
	}
	s.i = 1
	for !bl.Full() {
		s.ws()
		if s.i >= len(raw) || raw[s.i] == ']' {
			return
		}
		if raw[s.i] != '{' {
			start := s.i
			if s.skipValue() != nil {
				return
			}
			bl.Write(raw[start:s.i])
		} else {
			var role, content []byte
			err := s.object(func(key []byte, kesc bool) error {
				start := s.i
				if err := s.skipValue(); err != nil {
					return err
				}
				switch {
				case keyIs(key, kesc, "role"):
					role = raw[start:s.i]
				case keyIs(key, kesc, "content"):
					content = raw[start:s.i]
				}
				return nil
			})
			if err != nil {
				return
			}
			bl.Write(role)
			bl.WriteByte(sepRole)
			bl.Write(content)
		}
		bl.WriteByte(sepMessage)
		s.ws()
		if s.i < len(raw) && raw[s.i] == ',' {
			s.i++
		}
	}
}

// routingRequest is what the balancer reads from one request: the model,
// the prompt's block keys (bl, which the caller returns to the pool), and
// the session key (the configured header, else the body's user).
func routingRequest(model string, f *fields, h http.Header, sessionHeader string, bl *balance.Blocks) balance.Request {
	writePrompt(f, bl)
	req := balance.Request{Model: model, Keys: bl.Keys(), Session: h.Get(sessionHeader)}
	if req.Session == "" {
		req.Session = string(f.User)
	}
	return req
}
