package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// metaKey is the _meta entry naming the upstream behind a merged tool.
const metaKey = "io.mentat/upstream"

// publish turns the loop's state into the merged tool set: it builds the
// name table, adds and removes tools on the server (the SDK tells every
// connected client with one notifications/tools/list_changed per burst),
// and publishes which groups have answered.
func (e *Endpoint) publish(r *refresher) {
	var refs []ref
	byRef := map[ref]*sdk.Tool{}
	settled := map[string]string{}
	for name, st := range r.groups {
		if st.attempted {
			settled[name] = st.url
		}
		for _, t := range st.tools {
			rf := ref{Group: name, Tool: t.Name}
			if _, dup := byRef[rf]; dup {
				continue // an upstream listing a name twice: keep the first
			}
			refs = append(refs, rf)
			byRef[rf] = t
		}
	}
	table := buildNames(refs, nativeTools...)

	want := map[string]*sdk.Tool{}
	for _, rf := range refs {
		name := table.byRef[rf]
		want[name] = mergedTool(name, rf, byRef[rf], table.rewritten[name])
	}
	// The table first, so that a scoped tools/list answering the SDK's
	// list_changed keeps the tools being added (calls wait for callable).
	e.table.Store(table)
	var gone []string
	for name := range r.applied {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
			delete(r.applied, name)
		}
	}
	if len(gone) > 0 {
		// Out of the callable set before off the server.
		e.storeCallable(r.applied)
		sort.Strings(gone)
		e.server.RemoveTools(gone...)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := want[name]
		js, err := json.Marshal(t)
		if err != nil {
			e.logger.Warn("mcp_tool_skipped", "tool", name, "err", err)
			continue
		}
		if r.applied[name] == string(js) {
			continue
		}
		if err := e.addTool(t, table.byName[name]); err != nil {
			e.logger.Warn("mcp_tool_skipped", "tool", name, "err", err)
			delete(r.applied, name)
			continue
		}
		r.applied[name] = string(js)
	}
	// On the server before in the callable set.
	e.storeCallable(r.applied)

	old := e.view.Load()
	e.view.Store(&settledView{settled: settled, next: make(chan struct{})})
	close(old.next)
}

// storeCallable publishes the names in applied as the callable set.
func (e *Endpoint) storeCallable(applied map[string]string) {
	set := make(map[string]bool, len(applied))
	for name := range applied {
		set[name] = true
	}
	e.callable.Store(&set)
}

// addTool registers one merged tool; the SDK panics on a schema it refuses,
// which here means one bad upstream tool, not a broken router.
func (e *Endpoint) addTool(t *sdk.Tool, rf ref) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("refused by the MCP SDK: %v", p)
		}
	}()
	e.server.AddTool(t, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return e.forward(ctx, req, rf), nil
	})
	return nil
}

// mergedTool is the upstream tool t under its merged name, every field kept.
func mergedTool(name string, rf ref, t *sdk.Tool, rewritten bool) *sdk.Tool {
	m := *t
	m.Name = name
	if rewritten {
		m.Description = fmt.Sprintf("%s\n\n(Tool %q of group %q; the name is rewritten to %s because clients accept only ^[a-zA-Z0-9_-]{1,64}$.)",
			t.Description, rf.Tool, rf.Group, name)
		if t.Description == "" {
			m.Description = m.Description[2:]
		}
	}
	m.InputSchema = objectSchema(t.InputSchema)
	meta := maps.Clone(t.Meta)
	if meta == nil {
		meta = sdk.Meta{}
	}
	meta[metaKey] = map[string]string{"group": rf.Group, "tool": rf.Tool}
	m.Meta = meta
	return &m
}

// objectSchema returns s with "type": "object", which MCP requires of an
// input schema and which some servers leave out.
func objectSchema(s any) any {
	m, ok := s.(map[string]any)
	if !ok || m == nil {
		return map[string]any{"type": "object"}
	}
	switch m["type"] {
	case "object":
		return m
	case nil:
		c := maps.Clone(m)
		c["type"] = "object"
		return c
	default:
		// Not an object schema: nothing a tool call could satisfy, so the
		// call is passed through with any arguments.
		return map[string]any{"type": "object", "description": fmt.Sprintf("upstream input schema had type %v", m["type"])}
	}
}
