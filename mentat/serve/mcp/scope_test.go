package mcp

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// keyFile is a real key store on a temporary file: one key per id, with
// the model globs given ("" = every model).
type keyFile struct {
	path    string
	store   *keys.Store
	secrets map[string]string
	hashes  map[string]string
}

func newKeyFile(t *testing.T, scopes map[string][]string, order ...string) *keyFile {
	t.Helper()
	kf := &keyFile{path: filepath.Join(t.TempDir(), "keys.toml"), secrets: map[string]string{}, hashes: map[string]string{}}
	for _, id := range order {
		secret, hash, err := keys.NewSecret(keys.Router)
		if err != nil {
			t.Fatal(err)
		}
		kf.secrets[id], kf.hashes[id] = secret, hash
	}
	kf.write(t, scopes, order...)
	st, err := keys.Open(kf.path, keys.Options{Product: keys.Router})
	if err != nil {
		t.Fatal(err)
	}
	kf.store = st
	return kf
}

// write (re)writes the file with the scopes given, keeping each id's secret.
func (kf *keyFile) write(t *testing.T, scopes map[string][]string, order ...string) {
	t.Helper()
	var b strings.Builder
	for _, id := range order {
		fmt.Fprintf(&b, "[[key]]\nid = %q\nhash = %q\n", id, kf.hashes[id])
		if m := scopes[id]; len(m) > 0 {
			fmt.Fprintf(&b, "models = [%s]\n", quoteAll(m))
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(kf.path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// auth is the router's auth middleware in small: a request with a key is
// authenticated against the store and carries its key; a request without
// one passes with none, so that the endpoint's own refusals show (the
// router itself answers such a request 401 before /mcp).
func (kf *keyFile) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			next.ServeHTTP(w, r)
			return
		}
		k, rej := kf.store.Authenticate(r.Header, "127.0.0.1")
		if rej != nil {
			http.Error(w, rej.Message, rej.Status)
			return
		}
		next.ServeHTTP(w, r.WithContext(keys.NewContext(r.Context(), k)))
	})
}

// modelGroup is a group serving models, with its MCP at url.
func modelGroup(name, url string, models ...string) *routes.Group {
	g := group(name, url, true)
	g.Models = models
	return g
}

// keyedRouter: groups alpha (alpha-7b) and beta (beta-1b); key team-a may
// use alpha-* only, key ops every model.
func keyedRouter(t *testing.T) (*router, *keyFile, *testUpstream, *testUpstream) {
	t.Helper()
	a, b := newUpstream(t, "alpha"), newUpstream(t, "beta")
	kf := newKeyFile(t, map[string][]string{"team-a": {"alpha-*"}}, "team-a", "ops")
	r := newRouterWrapped(t, Config{}, kf.auth, modelGroup("alpha", a.URL, "alpha-7b"), modelGroup("beta", b.URL, "beta-1b"))
	return r, kf, a, b
}

func TestScopedKeyListsAndCallsOnlyItsGroups(t *testing.T) {
	r, kf, _, b := keyedRouter(t)
	for _, version := range []string{legacy, ""} {
		t.Run("version="+version, func(t *testing.T) {
			cs := connect(t, r.URL, clientOpts{version: version, key: kf.secrets["team-a"]})
			want := []string{"alpha__engine_status", "alpha__latency_percentiles", "alpha__set_latency"}
			if got := toolNames(t, cs); !reflect.DeepEqual(got, want) {
				t.Fatalf("tools/list with team-a = %v, want %v", got, want)
			}
			res, err := cs.ListTools(ctxT(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if version == "" && res.CacheScope != "private" {
				t.Errorf("a key's tools/list has cacheScope %q, want private (the list is the key's own)", res.CacheScope)
			}

			res2, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "alpha__engine_status"})
			if err != nil || res2.IsError || resultText(res2) != "engine alpha running" {
				t.Fatalf("call alpha__engine_status with team-a: %v %+v", err, res2)
			}

			// A group out of scope answers as a group the router does not
			// know; serve_status as a name that does not exist.
			for _, c := range []struct{ hidden, unknown, from, to string }{
				{"beta__engine_status", "zeta__engine_status", "beta", "zeta"},
				{"serve_status", "serve_statuz", "serve_status", "serve_statuz"},
			} {
				hidden, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: c.hidden})
				if err != nil {
					t.Fatalf("call %s: %v", c.hidden, err)
				}
				unknown, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: c.unknown})
				if err != nil {
					t.Fatalf("call %s: %v", c.unknown, err)
				}
				if !hidden.IsError || !unknown.IsError {
					t.Fatalf("%s with team-a: isError %v, %s: isError %v; want both refused", c.hidden, hidden.IsError, c.unknown, unknown.IsError)
				}
				if got, want := strings.ReplaceAll(resultText(hidden), c.from, c.to), resultText(unknown); got != want {
					t.Errorf("%s out of scope answers %q, unlike an unknown tool's %q", c.hidden, resultText(hidden), want)
				}
			}
		})
	}
	if n := b.callHits.Load(); n != 0 {
		t.Errorf("beta's upstream got %d calls from a key without beta in scope", n)
	}
}

func TestAllModelsKeySeesEverything(t *testing.T) {
	r, kf, _, _ := keyedRouter(t)
	cs := connect(t, r.URL, clientOpts{version: legacy, key: kf.secrets["ops"]})
	want := []string{
		"alpha__engine_status", "alpha__latency_percentiles", "alpha__set_latency",
		"beta__engine_status", "beta__latency_percentiles", "beta__set_latency",
		"serve_status",
	}
	if got := toolNames(t, cs); !reflect.DeepEqual(got, want) {
		t.Fatalf("tools/list with ops = %v, want %v", got, want)
	}
	res, err := cs.CallTool(ctxT(t), &sdk.CallToolParams{Name: "serve_status"})
	if err != nil || res.IsError || !strings.Contains(resultText(res), `"alpha"`) {
		t.Fatalf("serve_status with ops: %v %+v", err, res)
	}
}

// mcpRequest sends one raw request on session id with key ("" none): a
// POST is a tools/list.
func mcpRequest(t *testing.T, method, url, session, key string) (int, string) {
	t.Helper()
	body := ""
	if method == http.MethodPost {
		body = `{"jsonrpc":"2.0","id":99,"method":"tools/list","params":{}}`
	}
	code, _, got := rawRequest(t, method, url, session, key, body)
	return code, got
}

func TestSessionBelongsToItsKey(t *testing.T) {
	r, kf, _, _ := keyedRouter(t)
	cs := connect(t, r.URL, clientOpts{version: legacy, key: kf.secrets["team-a"]})
	id := cs.ID()
	if id == "" {
		t.Fatal("no session id")
	}
	_, unknown := mcpRequest(t, http.MethodPost, r.URL, "no-such-session", kf.secrets["ops"])
	for _, c := range []struct{ name, key string }{{"another key", kf.secrets["ops"]}, {"no key", ""}} {
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			code, body := mcpRequest(t, method, r.URL, id, c.key)
			if code != http.StatusNotFound || body != unknown {
				t.Errorf("%s %s on team-a's session: %d %q, want 404 %q as for an unknown session", c.name, method, code, body, unknown)
			}
		}
	}
	// Neither the refused DELETEs nor anything else touched it: its owner
	// still uses it, and a raw request of the owner is served.
	if got := toolNames(t, cs); len(got) != 3 {
		t.Fatalf("team-a's own session after the refusals lists %v", got)
	}
	if code, body := mcpRequest(t, http.MethodPost, r.URL, id, kf.secrets["team-a"]); code != http.StatusOK || !strings.Contains(body, "alpha__engine_status") || strings.Contains(body, "beta__") {
		t.Fatalf("team-a's raw tools/list on its session: %d %s", code, body)
	}
}

// A key file reload that changes a key's scope applies to its open
// session at the next request.
func TestReloadedScopeAppliesToOpenSession(t *testing.T) {
	r, kf, _, _ := keyedRouter(t)
	cs := connect(t, r.URL, clientOpts{version: legacy, key: kf.secrets["team-a"]})
	if got := toolNames(t, cs); len(got) != 3 || !strings.HasPrefix(got[0], "alpha__") {
		t.Fatalf("before the reload: %v", got)
	}
	kf.write(t, map[string][]string{"team-a": {"beta-1b"}}, "team-a", "ops")
	if err := kf.store.Reload(); err != nil {
		t.Fatal(err)
	}
	want := []string{"beta__engine_status", "beta__latency_percentiles", "beta__set_latency"}
	if got := toolNames(t, cs); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the reload team-a's session lists %v, want %v", got, want)
	}
}
