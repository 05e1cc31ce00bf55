package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// statusToolName is the router's own tool. It has no group separator, so no
// merged name can take it.
const statusToolName = "serve_status"

// nativeTools are names the merge never hands to an upstream tool.
var nativeTools = []string{statusToolName}

func isNative(name string) bool { return slices.Contains(nativeTools, name) }

func (e *Endpoint) addNativeTools() {
	e.server.AddTool(&sdk.Tool{
		Name:  statusToolName,
		Title: "Router status",
		Description: "The router's own view, as /status.json: the watched daemons, each group's health " +
			"(and why not), its OpenAI and MCP endpoints, and which group serves each model.",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{}},
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(bool)},
	}, e.serveStatus)
}

func (e *Endpoint) serveStatus(context.Context, *sdk.CallToolRequest) (res *sdk.CallToolResult, _ error) {
	defer func() {
		if p := recover(); p != nil {
			e.logger.Error("mcp_serve_status_panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res = errorResult("serve_status: building the status document failed: %v", p)
		}
	}()
	doc := e.status()
	if doc == nil {
		return errorResult("serve_status: the router has no status document yet; retry in a moment"), nil
	}
	js, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return errorResult("serve_status: cannot encode the status document: %v", err), nil
	}
	// The structured copy is the document as JSON decodes it, so clients
	// see exactly the fields /status.json has.
	var structured any
	_ = json.Unmarshal(js, &structured)
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: string(js)}},
		StructuredContent: structured,
	}, nil
}
