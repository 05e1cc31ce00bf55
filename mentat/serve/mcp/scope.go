package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// With API keys (SERVE_KEYS_FILE) the router's auth middleware puts each
// request's key into its context (keys.NewContext) before /mcp sees it.
// A key's scope is model globs; the endpoint turns that into groups:
//
//   - a group is in scope when the key allows its name (a group serves the
//     model of its own name, as routes.Snapshot.Lookup has it) or any model
//     its last probe listed;
//   - tools/list lists only tools of groups in scope, and a tools/call of
//     any other group's tool gets exactly the answer a tool of an unknown
//     group gets, so that a key learns nothing of groups outside its scope;
//   - serve_status reports the whole cluster (every group, model, daemon
//     and why not), so only a key of every model (Models empty) may list
//     or call it;
//   - a 2025-era session belongs to the key that opened it: its sealed id
//     opens only for requests with that key's id (seal.go), so a request
//     with the id and another key, or no key, is answered 404 like an
//     unknown session, and no client can read or drive another client's
//     session.
//
// Without keys (no key in any context) nothing of this applies.

// keyID names a key for comparison; "" is no key.
func keyID(k *keys.Key) string {
	if k == nil {
		return ""
	}
	return k.ID
}

// scoped reports whether k limits what the endpoint shows: a key with
// models listed. No key and a key of every model see everything.
func scoped(k *keys.Key) bool { return k != nil && len(k.Models) > 0 }

// groupInScope reports whether g's tools are k's to list and call.
func groupInScope(k *keys.Key, g *routes.Group) bool {
	if !scoped(k) {
		return true
	}
	if g == nil {
		return false
	}
	if k.Allows(g.Name) {
		return true
	}
	for _, m := range g.Models {
		if k.Allows(m) {
			return true
		}
	}
	return false
}

// toolInScope reports whether the merged or native tool name is k's.
func (e *Endpoint) toolInScope(k *keys.Key, snap *routes.Snapshot, name string) bool {
	if !scoped(k) {
		return true
	}
	if isNative(name) {
		return false // serve_status shows every group: keys of every model only
	}
	rf, ok := e.table.Load().lookup(name)
	return ok && groupInScope(k, snap.Groups[rf.Group])
}

// filterTools drops the tools outside k's scope from a tools/list page.
func (e *Endpoint) filterTools(k *keys.Key, res *sdk.ListToolsResult) {
	if !scoped(k) || res == nil {
		return
	}
	snap := e.src.Load()
	kept := res.Tools[:0:0]
	for _, t := range res.Tools {
		if t != nil && e.toolInScope(k, snap, t.Name) {
			kept = append(kept, t)
		}
	}
	res.Tools = kept
}

// requestKey is the key a method call was made with: for a session, the
// key of its latest HTTP request (so that a scope changed by a key-file
// reload applies at once); else the key of the context, which for a
// stateless request is its HTTP request's.
func (e *Endpoint) requestKey(ctx context.Context, req sdk.Request) *keys.Key {
	if req != nil {
		if ss, ok := req.GetSession().(*sdk.ServerSession); ok && ss != nil {
			if k, ok := e.sessions.key(ss.ID()); ok {
				return k
			}
		}
	}
	return keys.FromContext(ctx)
}
