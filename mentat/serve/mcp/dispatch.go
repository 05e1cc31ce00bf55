package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// statelessVersion is the first protocol version without sessions; the SDK
// serves it only from a stateless handler.
const statelessVersion = "2026-07-28"

// peekLimit bounds how much of a POST body the dispatcher reads to decide.
// A larger body goes to the stateful handler, which refuses it with 413
// (the SDK's own limit is the same).
const peekLimit = sdk.DefaultMaxRequestBodyBytes

// dispatcher serves both protocol eras on one path: 2025 clients (sessions,
// GET stream, DELETE) get the stateful handler, 2026-07-28 clients the
// stateless one. Both share one server, so they see the same tools.
type dispatcher struct {
	stateful, stateless http.Handler
}

// newSDKHandlers makes the SDK's two handlers of server: stateful, whose
// sessions are closed after sessionTimeout without a request, and
// stateless.
func newSDKHandlers(server *sdk.Server, sessionTimeout time.Duration, logger *slog.Logger) (stateful, stateless http.Handler) {
	get := func(*http.Request) *sdk.Server { return server }
	stateful = sdk.NewStreamableHTTPHandler(get, &sdk.StreamableHTTPOptions{
		SessionTimeout: sessionTimeout,
		Logger:         logger,
	})
	stateless = sdk.NewStreamableHTTPHandler(get, &sdk.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
		Logger:                       logger,
	})
	return stateful, stateless
}

func (d *dispatcher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.isStateless(r) {
		d.stateless.ServeHTTP(w, r)
		return
	}
	d.stateful.ServeHTTP(w, r)
}

// isStateless decides the era, in order: the MCP-Protocol-Version header;
// a session id (2025); a GET or DELETE (2025); else a POST whose single
// JSON-RPC message is server/discover or carries the protocol version in
// params._meta. The body read to decide is put back for the handler.
func (d *dispatcher) isStateless(r *http.Request) bool {
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" {
		return v >= statelessVersion
	}
	if r.Header.Get("Mcp-Session-Id") != "" || r.Method != http.MethodPost || r.Body == nil {
		return false
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, peekLimit+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	if err != nil || int64(len(buf)) > peekLimit {
		return false
	}
	return modernMessage(buf)
}

// modernMessage reports whether body is one JSON-RPC request in the
// 2026-07-28 shape. Batches and anything unparsable are left to the
// stateful handler, which answers them as 2025 clients expect.
func modernMessage(body []byte) bool {
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		return false
	}
	if msg.Method == "server/discover" {
		return true
	}
	_, ok := msg.Params.Meta["io.modelcontextprotocol/protocolVersion"]
	return ok
}
