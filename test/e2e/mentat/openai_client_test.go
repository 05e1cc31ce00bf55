package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

// clientScript drives the official OpenAI Node client (both pinned majors,
// installed into .deps/node by make setup) against the router: list,
// models.retrieve of a routed id with a slash, and of an unknown id. It
// prints one JSON line per client.
const clientScript = `
const { createRequire } = require("node:module");
const req = createRequire(process.argv[2] + "/");
(async () => {
  for (const pkg of ["openai-v4", "openai-v7"]) {
    const OpenAI = req(pkg).default ?? req(pkg);
    const c = new OpenAI({ baseURL: process.argv[3], apiKey: "unused", maxRetries: 0 });
    const out = { pkg };
    const list = await c.models.list();
    out.listed = list.data.map((m) => m.id);
    const m = await c.models.retrieve(process.argv[4]);
    out.retrieved = { id: m.id, object: m.object, owned_by: m.owned_by };
    try {
      await c.models.retrieve("no-such/model");
      out.unknown = "no error";
    } catch (e) {
      out.unknown = { cls: e.constructor.name, status: e.status, type: e.type, code: e.code, param: e.param ?? null };
    }
    console.log(JSON.stringify(out));
  }
})().catch((e) => { console.error(e); process.exit(1); });
`

// The official OpenAI Node client's models.retrieve against the real
// router binary, for an id with a slash (the client escapes it) and an
// unknown one (404 NotFoundError with OpenAI's code).
func TestOpenAINodeClientModelsRetrieve(t *testing.T) {
	modules, err := filepath.Abs("../../../.deps/node/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(modules, ".bin", "node")
	for _, f := range []string{node, filepath.Join(modules, "openai-v4"), filepath.Join(modules, "openai-v7")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the OpenAI Node clients are not installed (%v): run make setup-npm", err)
		}
	}
	d := startDaemon(t, "daemon")
	e := &engine{group: "llama", model: "meta-llama/Llama-3-8B"}
	startAgent(t, d.addr, e)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+d.addr)
	r.waitModels(t, e.model)

	script := filepath.Join(t.TempDir(), "retrieve.cjs")
	if err := os.WriteFile(script, []byte(clientScript), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, modules, r.url+"/v1", e.model)
	cmd.Env = baseEnv()
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("node: %v\n%s", err, ee.Stderr)
	} else if err != nil {
		t.Fatalf("node: %v", err)
	}
	type result struct {
		Pkg       string            `json:"pkg"`
		Listed    []string          `json:"listed"`
		Retrieved map[string]string `json:"retrieved"`
		Unknown   map[string]any    `json:"unknown"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for _, pkg := range []string{"openai-v4", "openai-v7"} {
		var got result
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("%s: reading the client's output %q: %v", pkg, out, err)
		}
		want := result{Pkg: pkg, Listed: []string{e.model},
			Retrieved: map[string]string{"id": e.model, "object": "model", "owned_by": "llama"},
			Unknown: map[string]any{"cls": "NotFoundError", "status": float64(404), "type": "invalid_request_error",
				"code": "model_not_found", "param": nil}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", pkg, got, want)
		}
	}
}
