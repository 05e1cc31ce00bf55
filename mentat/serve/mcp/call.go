package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/internal/keys"
)

// unknownTool explains a tools/call for a name the merged set lacks, or
// that key k may not call: a group outside k's scope is answered as a
// group the router does not know, and serve_status as any unknown name.
func (e *Endpoint) unknownTool(k *keys.Key, name string) *sdk.CallToolResult {
	group, _, ok := splitName(name)
	if !ok {
		return errorResult("unknown tool %q: merged tools are named <group>__<tool>; call tools/list for the current names", name)
	}
	if g := e.src.Load().Groups[group]; g == nil || !groupInScope(k, g) {
		return errorResult("group %q: unknown to the router (tool %q); call tools/list for the current groups and tools", group, name)
	} else if mcpURL(g) == "" {
		return errorResult("group %q: announces no MCP endpoint (MENTAT_MCP_API), so tool %q cannot be called", group, name)
	}
	return errorResult("group %q: no tool %q in its current list (it may have changed or not answered yet); call tools/list for the current tools", group, name)
}

// complete marks a result the middleware builds itself (bypassing the
// SDK's tools/call, which would) as final for a 2026-07-28 client, whose
// protocol requires resultType. The field is unexported in the SDK, so it
// is set the one way the SDK allows: decoding.
func complete(req *sdk.CallToolRequest, res *sdk.CallToolResult) *sdk.CallToolResult {
	version := statelessVersion
	if req.Session != nil {
		if ip := req.Session.InitializeParams(); ip != nil {
			version = ip.ProtocolVersion
		}
	}
	if version < statelessVersion {
		return res
	}
	js, err := json.Marshal(res)
	if err != nil {
		return res
	}
	var m map[string]any
	if json.Unmarshal(js, &m) != nil {
		return res
	}
	m["resultType"] = "complete"
	js, _ = json.Marshal(m)
	var out sdk.CallToolResult
	if json.Unmarshal(js, &out) != nil {
		return res
	}
	return &out
}

// forward sends one call to the group's upstream with the group prefix
// stripped, under CallTimeout. Progress from the upstream goes back to the
// caller's session; the caller's cancellation cancels the upstream call.
// Every failure comes back as a tool result naming the group.
func (e *Endpoint) forward(ctx context.Context, req *sdk.CallToolRequest, rf ref) *sdk.CallToolResult {
	url := mcpURL(e.src.Load().Groups[rf.Group])
	if url == "" {
		return errorResult("group %q: no longer known to the router or announces no MCP endpoint; tool %q was not called", rf.Group, rf.Tool)
	}
	u, err := e.pool.get(url)
	if err != nil {
		return errorResult("group %q: tool %q was not called: %v", rf.Group, rf.Tool, err)
	}
	params := &sdk.CallToolParams{Name: rf.Tool, Meta: forwardMeta(req.Params.Meta)}
	if len(req.Params.Arguments) > 0 && string(req.Params.Arguments) != "null" {
		params.Arguments = json.RawMessage(req.Params.Arguments)
	}
	if tok := req.Params.GetProgressToken(); tok != nil {
		upTok, finish := e.pool.trackProgress(ctx, req.Session, tok)
		defer finish()
		if params.Meta == nil {
			params.Meta = sdk.Meta{}
		}
		params.Meta["progressToken"] = upTok
	}

	callCtx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
	defer cancel()
	var res *sdk.CallToolResult
	err = u.do(callCtx, sessionMissing, func(cs *sdk.ClientSession) error {
		var err error
		res, err = cs.CallTool(callCtx, params)
		return err
	})
	switch {
	case err == nil && res == nil:
		return errorResult("group %q: upstream %s answered tool %q with no result", rf.Group, url, rf.Tool)
	case err == nil:
		return res
	case ctx.Err() != nil:
		// The caller went away; the upstream was told to cancel. The
		// result reaches no one but must still not read as a success.
		return errorResult("group %q: tool %q cancelled by the caller", rf.Group, rf.Tool)
	case errors.Is(err, context.DeadlineExceeded) || callCtx.Err() != nil:
		e.logger.Warn("mcp_call_timeout", "group", rf.Group, "tool", rf.Tool, "url", url, "timeout", e.cfg.CallTimeout)
		return errorResult("group %q: tool %q timed out after %s (MCP_TIMEOUT_S) waiting for %s; the upstream was told to cancel", rf.Group, rf.Tool, e.cfg.CallTimeout, url)
	}
	var ce *connectError
	if errors.As(err, &ce) {
		e.logger.Warn("mcp_call_unreachable", "group", rf.Group, "tool", rf.Tool, "url", url, "err", err)
		return errorResult("group %q: tool %q was not called: %v", rf.Group, rf.Tool, err)
	}
	e.logger.Warn("mcp_call_failed", "group", rf.Group, "tool", rf.Tool, "url", url, "err", err)
	return errorResult("group %q: tool %q failed at upstream %s: %v", rf.Group, rf.Tool, url, err)
}

// protocolMetaPrefix marks _meta keys of the protocol itself (version,
// client info): they describe the caller's hop, not the call, and the
// upstream session has its own.
const protocolMetaPrefix = "io.modelcontextprotocol/"

// forwardMeta is the caller's _meta minus the protocol's own keys.
func forwardMeta(m sdk.Meta) sdk.Meta {
	out := maps.Clone(m)
	for k := range out {
		if strings.HasPrefix(k, protocolMetaPrefix) {
			delete(out, k)
		}
	}
	return out
}
