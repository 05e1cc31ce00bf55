package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"sort"
	"strings"
)

// separator joins a group and one of its tools into the merged name.
const separator = "__"

// validName is what major MCP clients accept as a tool name.
var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// maxNameLen is the longest name validName accepts.
const maxNameLen = 64

// ref is one upstream tool: the group that serves it and its own name there.
type ref struct {
	Group string
	Tool  string
}

// naturalName is the merged name before any rewriting: <group>__<tool>.
func naturalName(r ref) string { return r.Group + separator + r.Tool }

// sanitise replaces every character validName refuses with '_'.
func sanitise(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// hashedName is the rewritten name for r: the sanitised group and tool,
// shortened to fit, then "_" and hexLen hex digits of a hash of the exact
// (group, tool) pair. The hash keeps it unique and makes it depend on
// nothing but r, so every router maps the same tool to the same name.
func hashedName(r ref, hexLen int) string {
	sum := sha256.Sum256([]byte(r.Group + "\x00" + r.Tool))
	suffix := "_" + hex.EncodeToString(sum[:])[:hexLen]
	room := maxNameLen - len(suffix) - len(separator)
	g, t := sanitise(r.Group), sanitise(r.Tool)
	// The group keeps up to half the room so a long group name cannot push
	// the tool out entirely; the tool takes what is left.
	if len(g) > room/2 && len(g)+len(t) > room {
		g = g[:max(room/2, room-len(t))]
	}
	if len(g)+len(t) > room {
		t = t[:room-len(g)]
	}
	return g + separator + t + suffix
}

// nameTable maps merged tool names to upstream tools and back. It is built
// whole from the current set of upstream tools and never modified, so the
// same inputs always give the same names.
type nameTable struct {
	byName map[string]ref
	byRef  map[ref]string
	// rewritten marks names that are not the natural <group>__<tool>.
	rewritten map[string]bool
}

// reserved names are never given to an upstream tool (the native tools).
func buildNames(refs []ref, reserved ...string) *nameTable {
	sorted := append([]ref(nil), refs...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Group != sorted[j].Group {
			return sorted[i].Group < sorted[j].Group
		}
		return sorted[i].Tool < sorted[j].Tool
	})
	// A natural name is kept only when it is valid and no other tool has
	// the same natural name (group "a__b" with tool "c" and group "a" with
	// tool "b__c" both make "a__b__c"); otherwise both are rewritten, so
	// the outcome does not depend on which one came first.
	count := map[string]int{}
	for _, r := range sorted {
		count[naturalName(r)]++
	}
	taken := map[string]bool{}
	for _, n := range reserved {
		taken[n] = true
	}
	t := &nameTable{byName: map[string]ref{}, byRef: map[ref]string{}, rewritten: map[string]bool{}}
	var rewrite []ref
	for _, r := range sorted {
		if _, dup := t.byRef[r]; dup {
			continue
		}
		n := naturalName(r)
		if validName.MatchString(n) && count[n] == 1 && !taken[n] {
			t.byName[n], t.byRef[r] = r, n
			taken[n] = true
			continue
		}
		rewrite = append(rewrite, r)
	}
	for _, r := range rewrite {
		var n string
		for hexLen := 8; ; hexLen += 4 {
			n = hashedName(r, hexLen)
			if !taken[n] || hexLen >= 32 {
				break
			}
		}
		t.byName[n], t.byRef[r] = r, n
		t.rewritten[n] = true
		taken[n] = true
	}
	return t
}

// lookup resolves a merged name to its upstream tool.
func (t *nameTable) lookup(name string) (ref, bool) {
	r, ok := t.byName[name]
	return r, ok
}

// splitName guesses the group of a name the table does not know, for the
// error message: everything before the first separator.
func splitName(name string) (group, tool string, ok bool) {
	return strings.Cut(name, separator)
}
