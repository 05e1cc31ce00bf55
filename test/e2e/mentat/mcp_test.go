package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The router's /mcp merges both groups' management MCPs (the engines'
// own servers, announced in port and URL form) and forwards calls.
func TestMergedMCPThroughTheRouter(t *testing.T) {
	d, _, _ := twoModels(t)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+d.addr)
	r.waitModels(t, "alpha-7b", "beta-1b")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url + "/mcp", HTTPClient: client, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connecting to the router's /mcp: %v", err)
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		names = append(names, tool.Name)
	}
	for _, want := range []string{"alpha__engine_status", "beta__engine_status", "serve_status"} {
		if !slices.Contains(names, want) {
			t.Fatalf("tools/list through the router = %v, missing %s", names, want)
		}
	}
	for _, name := range []string{"alpha__engine_status", "beta__engine_status", "serve_status"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name})
		if err != nil || res.IsError || len(res.Content) == 0 {
			t.Fatalf("call %s through the router: %v %+v", name, err, res)
		}
	}
}
