package mcp

import (
	"bytes"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/internal/keys"
)

// 2025-era sessions that any router can continue.
//
// The SDK's stateful handler keeps its sessions in memory under random
// ids of its own. The session layer in front of it (sessionLayer) never
// shows those ids to a client: the answer to an initialize carries a
// sealed id instead (seal.go), which holds the API key's id, the
// session's lifetime and the client's initialize params. On a request
// with a sealed id the layer opens it, finds the local session it stands
// for, and, when this router has none (the session was opened on another
// router, this router restarted, or its local copy was reaped or evicted),
// rebuilds one by running the client's initialize and
// notifications/initialized through the same SDK handler in process. The
// request then goes to the SDK under the local id, and any session id in
// the answer is turned back into the sealed one.
//
// What does not move between routers: a GET stream (and so the
// notifications it carries) lives on the router that holds it; a DELETE
// ends the session on the router that received it, which refuses the id
// from then on until it expires, while another router would rebuild it.
// Upstream sessions are not part of a client session at all: the pool
// (pool.go) keeps one per upstream URL for every client.

// sessionIDHeader is the 2025 transport's session header.
const sessionIDHeader = "Mcp-Session-Id"

// rebuildTimeout bounds rebuilding one session in process.
const rebuildTimeout = 10 * time.Second

var (
	errTooManySessions = errors.New("every MCP session this router holds is in use; retry later")
	errSessionEnded    = errors.New("session ended")
	errSessionLost     = errors.New("the session closed while it was being resumed")
)

// localSession is this router's copy of one client session.
type localSession struct {
	id     string // the SDK's; never shown to a client
	ss     *sdk.ServerSession
	params json.RawMessage // its initialize params, as sealed (sealedParams)
	key    *keys.Key       // the key of its latest request (nil: keys off)

	linked bool          // a sealed id stands for it (its session nonce is nonce)
	nonce  [16]byte      //
	busy   int           // requests on it in flight, a GET stream included
	elem   *list.Element // in sessionTable.lru
	expiry *time.Timer   // closes it when the sealed id expires
}

// sessionTable maps sealed ids (by session nonce) to local sessions.
type sessionTable struct {
	max int // local sessions held at most (Config.MaxSessions)

	mu       sync.Mutex
	byLocal  map[string]*localSession
	byNonce  map[[16]byte]*localSession
	lru      *list.List               // of *localSession; front: used last
	ended    map[[16]byte]time.Time   // ended here by DELETE → the id's expiry
	resuming map[[16]byte]*resumeCall // rebuilds in flight
}

// resumeCall is one rebuild that concurrent requests for the same id wait on.
type resumeCall struct {
	done chan struct{}
	err  error
}

func newSessionTable(max int) *sessionTable {
	return &sessionTable{
		max:      max,
		byLocal:  map[string]*localSession{},
		byNonce:  map[[16]byte]*localSession{},
		lru:      list.New(),
		ended:    map[[16]byte]time.Time{},
		resuming: map[[16]byte]*resumeCall{},
	}
}

// admit records a session the SDK is initializing, making room by
// evicting the least recently used idle linked session when the table is
// full: the evicted session is returned for the caller to close (its id
// rebuilds on its next request). A full table of sessions in use refuses.
// A session admitted before is left as it is.
func (t *sessionTable) admit(ss *sdk.ServerSession, params json.RawMessage) (ls, victim *localSession, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byLocal[ss.ID()]; ok {
		return nil, nil, nil
	}
	if len(t.byLocal) >= t.max {
		for el := t.lru.Back(); el != nil; el = el.Prev() {
			if v := el.Value.(*localSession); v.linked && v.busy == 0 {
				victim = v
				break
			}
		}
		if victim == nil {
			return nil, nil, errTooManySessions
		}
		t.removeLocked(victim)
	}
	ls = &localSession{id: ss.ID(), ss: ss, params: params}
	ls.elem = t.lru.PushFront(ls)
	t.byLocal[ls.id] = ls
	return ls, victim, nil
}

// removeLocked forgets ls; t.mu is held.
func (t *sessionTable) removeLocked(ls *localSession) {
	if t.byLocal[ls.id] != ls {
		return
	}
	delete(t.byLocal, ls.id)
	if ls.linked && t.byNonce[ls.nonce] == ls {
		delete(t.byNonce, ls.nonce)
	}
	t.lru.Remove(ls.elem)
	if ls.expiry != nil {
		ls.expiry.Stop()
	}
}

// drop forgets ls once its SDK session has closed.
func (t *sessionTable) drop(ls *localSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(ls)
}

// key is the key of the latest request on local session id.
func (t *sessionTable) key(id string) (*keys.Key, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls, ok := t.byLocal[id]
	if !ok {
		return nil, false
	}
	return ls.key, true
}

// linkLocked makes ls the local session of the sealed id with claims c,
// used by a request with key k; t.mu is held.
func (t *sessionTable) linkLocked(ls *localSession, nonce [16]byte, expires time.Time, k *keys.Key) {
	ls.linked, ls.nonce, ls.key = true, nonce, k
	t.byNonce[nonce] = ls
	ss := ls.ss
	ls.expiry = time.AfterFunc(time.Until(expires), func() { _ = ss.Close() })
}

// linkNew seals an id for the session the SDK just initialized under local
// id, for a request with key k. It is false for an id not admitted (an
// initialize that failed) or already linked.
func (t *sessionTable) linkNew(id string, k *keys.Key, s *sealer, maxAge time.Duration) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := t.byLocal[id]
	if ls == nil || ls.linked {
		return "", false
	}
	now := time.Now()
	c := &sessionClaims{issued: now, expires: now.Add(maxAge), params: ls.params}
	_, _ = rand.Read(c.nonce[:])
	ext := s.seal(c, keyID(k))
	t.linkLocked(ls, c.nonce, c.expires, k)
	return ext, true
}

// acquire returns the local session of nonce, marked busy and used by key
// k, or else the rebuild to wait for, or else starts one (owner).
func (t *sessionTable) acquire(nonce [16]byte, k *keys.Key) (ls *localSession, call *resumeCall, owner bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ls = t.byNonce[nonce]; ls != nil {
		t.useLocked(ls, k)
		return ls, nil, false
	}
	if call = t.resuming[nonce]; call != nil {
		return nil, call, false
	}
	call = &resumeCall{done: make(chan struct{})}
	t.resuming[nonce] = call
	return nil, call, true
}

func (t *sessionTable) useLocked(ls *localSession, k *keys.Key) {
	ls.busy++
	ls.key = k
	t.lru.MoveToFront(ls.elem)
}

// finishResume ends the rebuild of c's session as local session id (err:
// it failed), links it and marks it busy for key k. A session ended
// meanwhile is returned as stale, for the caller to close.
func (t *sessionTable) finishResume(c *sessionClaims, id string, k *keys.Key, err error, now time.Time) (ls, stale *localSession, _ error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	call := t.resuming[c.nonce]
	delete(t.resuming, c.nonce)
	defer func() { call.err = err; close(call.done) }()
	ls = t.byLocal[id]
	if err != nil || ls == nil {
		if err == nil {
			err = errSessionLost
		}
		return nil, ls, err
	}
	if t.endedLocked(c.nonce, now) {
		t.removeLocked(ls)
		err = errSessionEnded
		return nil, ls, err
	}
	t.linkLocked(ls, c.nonce, c.expires, k)
	t.useLocked(ls, k)
	return ls, nil, nil
}

// release ends a request on ls.
func (t *sessionTable) release(ls *localSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls.busy--
}

// end records the sealed id with claims c as ended on this router and
// returns its local session, if any, for the caller to close.
func (t *sessionTable) end(c *sessionClaims, now time.Time) *localSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ended) >= t.max {
		// Bounded: drop what expired, else the entry expiring first (its
		// id could then be rebuilt here until it expires).
		first, at := [16]byte{}, time.Time{}
		for n, exp := range t.ended {
			if !now.Before(exp) {
				delete(t.ended, n)
			} else if at.IsZero() || exp.Before(at) {
				first, at = n, exp
			}
		}
		if len(t.ended) >= t.max {
			delete(t.ended, first)
		}
	}
	t.ended[c.nonce] = c.expires
	ls := t.byNonce[c.nonce]
	if ls != nil {
		t.removeLocked(ls)
	}
	return ls
}

// isEnded reports whether a DELETE here ended the id of nonce.
func (t *sessionTable) isEnded(nonce [16]byte, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endedLocked(nonce, now)
}

func (t *sessionTable) endedLocked(nonce [16]byte, now time.Time) bool {
	exp, ok := t.ended[nonce]
	if ok && !now.Before(exp) {
		delete(t.ended, nonce)
		return false
	}
	return ok
}

// trackSession is the receiving middleware's part for an initialize: it
// admits the session into the table before the SDK initializes it, and
// drops it from the table once it closes.
func (e *Endpoint) trackSession(req *sdk.ServerRequest[*sdk.InitializeParams]) error {
	ss := req.Session
	if ss == nil || ss.ID() == "" {
		return nil // a stateless request's temporary session
	}
	ls, victim, err := e.sessions.admit(ss, sealedParams(req.Params))
	if err != nil {
		e.logger.Warn("mcp_sessions_full", "max", e.cfg.MaxSessions)
		return err
	}
	if victim != nil {
		_ = victim.ss.Close() // idle: returns at once
	}
	if ls != nil {
		go func() {
			_ = ss.Wait()
			e.sessions.drop(ls)
		}()
	}
	return nil
}

// sessionNotFound is the SDK's own answer to an unknown session, word for
// word, so that a refused id looks like any other unknown one.
func sessionNotFound(w http.ResponseWriter) {
	http.Error(w, "session not found", http.StatusNotFound)
}

// sessionLayer translates between the sealed ids clients hold and the
// SDK's local ones, for the stateful handler next.
func (e *Endpoint) sessionLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := keys.FromContext(r.Context())
		ext := r.Header.Get(sessionIDHeader)
		if ext == "" {
			// An initialize makes a session: its answer gets a sealed id
			// before any byte of it leaves.
			next.ServeHTTP(&idWriter{ResponseWriter: w, rewrite: func(h http.Header) {
				id := h.Get(sessionIDHeader)
				if id == "" {
					return
				}
				h.Del(sessionIDHeader)
				if sealed, ok := e.sessions.linkNew(id, k, e.sealer, e.cfg.SessionMaxAge); ok {
					h.Set(sessionIDHeader, sealed)
				}
			}}, r)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodPost, http.MethodDelete:
		default:
			next.ServeHTTP(w, r) // the SDK answers 405 before it looks at sessions
			return
		}
		now := time.Now()
		c, ok := e.sealer.open(ext, keyID(k), now, e.cfg.SessionMaxAge)
		if !ok || e.sessions.isEnded(c.nonce, now) {
			sessionNotFound(w)
			return
		}
		if r.Method == http.MethodDelete {
			// As the SDK's DELETE does: close, then 204. Without a local
			// copy there is nothing to close here.
			if ls := e.sessions.end(c, now); ls != nil {
				_ = ls.ss.Close()
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		ls, err := e.resume(c, k, now)
		switch {
		case errors.Is(err, errSessionEnded):
			sessionNotFound(w)
			return
		case errors.Is(err, errTooManySessions):
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		case err != nil:
			e.logger.Warn("mcp_session_resume_failed", "err", err)
			http.Error(w, "cannot resume the MCP session on this router: "+err.Error(), http.StatusInternalServerError)
			return
		}
		// Busy, the local copy is not evicted; the SDK's idle timer may
		// still close it in the instant before the SDK looks it up, and
		// the SDK then answers 404 (the client starts a new session).
		defer e.sessions.release(ls)
		r = r.Clone(r.Context())
		r.Header.Set(sessionIDHeader, ls.id)
		next.ServeHTTP(&idWriter{ResponseWriter: w, rewrite: func(h http.Header) {
			if h.Get(sessionIDHeader) != "" { // an initialize sent again
				h.Set(sessionIDHeader, ext)
			}
		}}, r)
	})
}

// resume returns the local session of the sealed id with claims c, busy,
// rebuilding it if this router has none. Concurrent requests for one id
// rebuild it once.
func (e *Endpoint) resume(c *sessionClaims, k *keys.Key, now time.Time) (*localSession, error) {
	for range 2 {
		ls, call, owner := e.sessions.acquire(c.nonce, k)
		if ls != nil {
			return ls, nil
		}
		if !owner {
			<-call.done
			if call.err != nil {
				return nil, call.err
			}
			continue // linked by the owner: acquire it
		}
		id, err := e.rebuild(c)
		ls, stale, err := e.sessions.finishResume(c, id, k, err, now)
		if stale != nil {
			_ = stale.ss.Close()
		}
		if err == nil {
			e.logger.Debug("mcp_session_resumed")
		}
		return ls, err
	}
	return nil, errSessionLost
}

// rebuild opens a local session for the sealed id with claims c: the
// client's initialize and notifications/initialized, run through the
// SDK's stateful handler in process. It returns the local id (also when
// the second step failed, so the caller can drop the session).
func (e *Endpoint) rebuild(c *sessionClaims) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rebuildTimeout)
	defer cancel()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + string(c.params) + `}`
	rec := inProcess(ctx, e.stateful, init, "")
	id := rec.header.Get(sessionIDHeader)
	if rec.code != http.StatusOK || id == "" {
		return "", fmt.Errorf("initialize answered %d %s", rec.code, strings.TrimSpace(rec.body.String()))
	}
	if msg := rpcError(rec.body.Bytes()); msg != "" {
		return id, fmt.Errorf("initialize failed: %s", msg)
	}
	rec = inProcess(ctx, e.stateful, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, id)
	if rec.code != http.StatusAccepted {
		return id, fmt.Errorf("notifications/initialized answered %d %s", rec.code, strings.TrimSpace(rec.body.String()))
	}
	return id, nil
}

// inProcess POSTs body to h as a client would, on session id ("" none).
func inProcess(ctx context.Context, h http.Handler, body, id string) *recorder {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if id != "" {
		req.Header.Set(sessionIDHeader, id)
	}
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, req)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return rec
}

// rpcError is the message of the JSON-RPC error in an answer (plain JSON
// or one SSE event), "" if it has none.
func rpcError(body []byte) string {
	if i := bytes.Index(body, []byte("data: ")); i >= 0 {
		body = body[i+len("data: "):]
		if j := bytes.IndexByte(body, '\n'); j >= 0 {
			body = body[:j]
		}
	}
	var msg struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		return "unreadable answer: " + err.Error()
	}
	if msg.Error != nil {
		return msg.Error.Message
	}
	if msg.Result == nil {
		return "no result"
	}
	return ""
}

// recorder is the ResponseWriter of an in-process request.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}
func (r *recorder) Flush() {}

// idWriter rewrites the session header of an answer once, before any byte
// of it leaves.
type idWriter struct {
	http.ResponseWriter
	rewrite func(http.Header)
	done    bool
}

func (w *idWriter) check() {
	if !w.done {
		w.done = true
		w.rewrite(w.Header())
	}
}

func (w *idWriter) WriteHeader(code int) {
	w.check()
	w.ResponseWriter.WriteHeader(code)
}

func (w *idWriter) Write(b []byte) (int, error) {
	w.check()
	return w.ResponseWriter.Write(b)
}

// Flush is here (not only through Unwrap) because http.ResponseController
// asks the outermost writer first: a flush that sends the header must
// rewrite it.
func (w *idWriter) Flush() {
	w.check()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *idWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
