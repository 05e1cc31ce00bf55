package mcp

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestNamesNatural(t *testing.T) {
	tab := buildNames([]ref{{"beta", "engine_status"}, {"alpha", "engine_status"}}, nativeTools...)
	for name, want := range map[string]ref{
		"alpha__engine_status": {"alpha", "engine_status"},
		"beta__engine_status":  {"beta", "engine_status"},
	} {
		if got, ok := tab.lookup(name); !ok || got != want {
			t.Errorf("lookup(%s) = %v %v", name, got, ok)
		}
		if tab.rewritten[name] {
			t.Errorf("%s marked rewritten", name)
		}
	}
	if _, ok := tab.lookup("serve_status"); ok {
		t.Error("native name resolves to an upstream")
	}
}

func TestNamesRewritten(t *testing.T) {
	refs := []ref{
		{"glm-5.1", "engine_status"},                  // '.' not allowed
		{"g", "tool with spaces/and:colons"},          // several bad characters
		{strings.Repeat("long", 20), "engine_status"}, // over 64
		{"a__b", "c"}, {"a", "b__c"}, // same natural name
		{"x", strings.Repeat("t", 100)},                    // long tool
		{"ünïcode", "wörk"},                                // non-ASCII
		{strings.Repeat("g", 70), strings.Repeat("t", 70)}, // both long
	}
	tab := buildNames(refs, nativeTools...)
	seen := map[string]bool{}
	for _, r := range refs {
		name := tab.byRef[r]
		if !validName.MatchString(name) {
			t.Errorf("%v → %q is not a valid tool name", r, name)
		}
		if !tab.rewritten[name] {
			t.Errorf("%v → %q not marked rewritten", r, name)
		}
		if !strings.Contains(name, separator) {
			t.Errorf("%v → %q lost the group separator", r, name)
		}
		if seen[name] {
			t.Errorf("%q given twice", name)
		}
		seen[name] = true
		if got, ok := tab.lookup(name); !ok || got != r {
			t.Errorf("lookup(%q) = %v, want %v", name, got, r)
		}
	}
	if got := tab.byRef[ref{"glm-5.1", "engine_status"}]; !strings.HasPrefix(got, "glm-5_1__engine_status_") {
		t.Errorf("glm-5.1 → %q, want the sanitised name plus a hash", got)
	}
}

// TestNamesDeterministic: the same tools give the same names whatever their
// order, and a tool's name does not change when unrelated tools come and go.
func TestNamesDeterministic(t *testing.T) {
	refs := []ref{{"glm-5.1", "a"}, {"b", "c"}, {"a__b", "c"}, {"a", "b__c"}, {"d", "e.f"}}
	want := buildNames(refs)
	for i := range 20 {
		shuffled := append([]ref(nil), refs...)
		rand.New(rand.NewPCG(uint64(i), 1)).Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		got := buildNames(shuffled)
		for _, r := range refs {
			if got.byRef[r] != want.byRef[r] {
				t.Fatalf("order %d: %v → %q, was %q", i, r, got.byRef[r], want.byRef[r])
			}
		}
	}
	fewer := buildNames(refs[:2])
	for _, r := range refs[:2] {
		if fewer.byRef[r] != want.byRef[r] {
			t.Errorf("%v renamed when others left: %q vs %q", r, fewer.byRef[r], want.byRef[r])
		}
	}
}

func TestNamesReserved(t *testing.T) {
	// No upstream can take a native name: every merged name has a separator.
	tab := buildNames([]ref{{"serve", "status"}}, nativeTools...)
	if tab.byRef[ref{"serve", "status"}] != "serve__status" {
		t.Fatal(tab.byRef)
	}
}

func FuzzNames(f *testing.F) {
	f.Add("alpha", "engine_status", "beta", "engine_status")
	f.Add("a__b", "c", "a", "b__c")
	f.Add("glm-5.1", "x", "glm-5_1", "x")
	f.Add(strings.Repeat("g", 80), "t", "", "")
	f.Fuzz(func(t *testing.T, g1, t1, g2, t2 string) {
		refs := []ref{{g1, t1}, {g2, t2}}
		tab := buildNames(refs, nativeTools...)
		names := map[string]bool{}
		for _, r := range refs {
			name, ok := tab.byRef[r]
			if !ok {
				t.Fatalf("%v has no name", r)
			}
			if !validName.MatchString(name) {
				t.Fatalf("%v → %q invalid", r, name)
			}
			if got, ok := tab.lookup(name); !ok || got != r {
				t.Fatalf("%q resolves to %v, want %v", name, got, r)
			}
			if isNative(name) {
				t.Fatalf("%v took native name %q", r, name)
			}
			names[name] = true
		}
		if refs[0] != refs[1] && len(names) != 2 {
			t.Fatalf("two tools share a name: %v", tab.byRef)
		}
	})
}
