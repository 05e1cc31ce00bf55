package mcp

import (
	"context"
	"net/http"
	"sync"

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
//   - a 2025-era session belongs to the key that opened it: a request with
//     its id and another key, or no key, is answered 404 like an unknown
//     session, so no client can read or drive another client's session.
//
// Without keys (no key in any context) nothing of this applies.

// sessionIDHeader is the 2025 transport's session header.
const sessionIDHeader = "Mcp-Session-Id"

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

// sessionKeys binds each session id the stateful handler hands out to the
// key of the request that opened it.
type sessionKeys struct {
	mu sync.Mutex
	// byID holds the key of each session's latest request (nil: keys off).
	byID map[string]*keys.Key
	// pruneAt is the size at which ids of closed sessions are dropped.
	pruneAt int
}

// minPrune is the smallest table size that triggers pruning.
const minPrune = 64

// key is the key bound to session id.
func (s *sessionKeys) key(id string) (*keys.Key, bool) {
	if id == "" {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.byID[id]
	return k, ok
}

// claim reports whether a request with key k may use session id, and
// then records k as the session's current key. An id never handed out
// here is refused when keys are on (the SDK's own table is not trusted
// to be bound); with keys off it is left to the SDK (404 unknown).
func (s *sessionKeys) claim(id string, k *keys.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	bound, ok := s.byID[id]
	if !ok {
		return k == nil
	}
	if keyID(bound) != keyID(k) {
		return false
	}
	s.byID[id] = k
	return true
}

// bind records a new session's key. live lists the ids of the sessions
// still open, for dropping those of closed ones now and then.
func (s *sessionKeys) bind(id string, k *keys.Key, live func() map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]*keys.Key{}
	}
	s.byID[id] = k
	if len(s.byID) < max(s.pruneAt, minPrune) {
		return
	}
	// Under the lock: a session is open (the SDK connected it) before its
	// id is bound, so no id bound meanwhile can be dropped by mistake.
	open := live()
	for sid := range s.byID {
		if !open[sid] {
			delete(s.byID, sid)
		}
	}
	s.pruneAt = 2 * len(s.byID)
}

// liveSessions is the set of open sessions' ids.
func (e *Endpoint) liveSessions() map[string]bool {
	open := map[string]bool{}
	for ss := range e.server.Sessions() {
		if id := ss.ID(); id != "" {
			open[id] = true
		}
	}
	return open
}

// bindSessions enforces that a session is used only with the key that
// opened it, and binds every session it sees opened.
func (e *Endpoint) bindSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := keys.FromContext(r.Context())
		if id := r.Header.Get(sessionIDHeader); id != "" {
			if !e.sessions.claim(id, k) {
				// The SDK's own answer to an unknown session, word for word.
				http.Error(w, "session not found", http.StatusNotFound)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&sessionRecorder{ResponseWriter: w, e: e, key: k}, r)
	})
}

// sessionRecorder binds the session id an answer carries (the answer to an
// initialize) before any byte of it leaves, so before the client can use it.
type sessionRecorder struct {
	http.ResponseWriter
	e       *Endpoint
	key     *keys.Key
	checked bool
}

func (s *sessionRecorder) record() {
	if s.checked {
		return
	}
	s.checked = true
	if id := s.Header().Get(sessionIDHeader); id != "" {
		s.e.sessions.bind(id, s.key, s.e.liveSessions)
	}
}

func (s *sessionRecorder) WriteHeader(code int) {
	s.record()
	s.ResponseWriter.WriteHeader(code)
}

func (s *sessionRecorder) Write(b []byte) (int, error) {
	s.record()
	return s.ResponseWriter.Write(b)
}

// Flush is here (not only through Unwrap) because http.ResponseController
// asks the outermost writer first: a flush that sends the header must
// record it.
func (s *sessionRecorder) Flush() {
	s.record()
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *sessionRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
