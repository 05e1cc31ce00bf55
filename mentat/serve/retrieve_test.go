package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"

	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// GET /v1/models/{id}, what the official clients' models.retrieve sends:
// the entry /v1/models lists (owned_by the group), an id with a slash
// sent raw or escaped, 503 with the reason for a model whose group is not
// admitted, 404 in OpenAI's error shape listing what routes.
func TestModelRetrieve(t *testing.T) {
	e := startEngine(t, "127.0.0.1:0", "meta-llama/Llama-3-8B", "m1")
	d := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.1"}, map[string]wire.Group{
		"alpha":   group("127.0.0.1", openai(e.port(), ""), "running"),
		"loading": group("127.0.0.1", openai(e.port(), ""), "spawning"),
	}))
	r := startServer(t, testConfig(d.addr()))
	r.waitGroup(t, "alpha", "healthy", func(g GroupStatus) bool { return g.Healthy })
	// loading is probed too (its engine answers, though the daemon says
	// no actor runs): once it has been, its models are known and the 404
	// below lists no group whose models are pending.
	r.waitGroup(t, "loading", "probed", func(g GroupStatus) bool { return len(g.Models) > 0 })

	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	r.get(t, "/v1/models", &list)
	listed := map[string]map[string]any{}
	for _, raw := range list.Data {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		listed[m["id"].(string)] = m
	}

	for _, c := range []struct{ path, id string }{
		{"/v1/models/m1", "m1"},
		{"/v1/models/meta-llama/Llama-3-8B", "meta-llama/Llama-3-8B"},
		{"/v1/models/meta-llama%2FLlama-3-8B", "meta-llama/Llama-3-8B"},
	} {
		status, body := rawGet(t, r.base+c.path)
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil || status != 200 {
			t.Fatalf("GET %s: %d %s (%v)", c.path, status, body, err)
		}
		if !reflect.DeepEqual(got, listed[c.id]) || got["owned_by"] != "alpha" || got["object"] != "model" {
			t.Fatalf("GET %s = %v\nwant the /v1/models entry %v", c.path, got, listed[c.id])
		}
	}

	status, body := rawGet(t, r.base+"/v1/models/nope/x")
	want := `{"error":{"message":"model \"nope/x\" is not served by this cluster; available models: m1, meta-llama/Llama-3-8B","type":"invalid_request_error","param":null,"code":"model_not_found"}}` + "\n"
	if status != http.StatusNotFound || string(body) != want {
		t.Fatalf("unknown id: %d %s\nwant 404 %s", status, body, want)
	}
	// A group is known to serve its own name; not admitted, it answers
	// 503 with its why_not.
	status, body = rawGet(t, r.base+"/v1/models/loading")
	want = `{"error":{"message":"model \"loading\" is served by group \"loading\", which is not routable now: no running actors (the daemon reports no running actor for the group; start or restart its model container; see /status.json)","type":"server_error","param":null,"code":"model_unavailable"}}` + "\n"
	if status != http.StatusServiceUnavailable || string(body) != want {
		t.Fatalf("not admitted: %d %s\nwant 503 %s", status, body, want)
	}
}

func rawGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q", url, ct)
	}
	return resp.StatusCode, b
}
