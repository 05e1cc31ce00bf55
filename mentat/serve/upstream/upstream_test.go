package upstream

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse("f", []byte("# engine keys\n[groups]\n\"llama-a\" = \"tok-1\"\nqwen = \"tok-2\"\n"))
	if err != nil || len(got) != 2 || got["llama-a"] != "tok-1" || got["qwen"] != "tok-2" {
		t.Fatalf("Parse = %v, %v", got, err)
	}
	if got, err := Parse("f", nil); err != nil || len(got) != 0 {
		t.Fatalf("empty file: %v %v", got, err)
	}
	for _, c := range []struct{ in, want string }{
		{"[groups]\na = \"\"\n", `f: group "a" has an empty key`},
		{"[groups]\na = \"tok en\"\n", `f: the key of group "a" has a space or control character`},
		{"[groups]\na = \"x\"\n[other]\nb = 1\n", `f: unknown field "other`},
		{"a = \"x\"\n", `f: unknown field "a"`},
		{"[groups]\na = 5\n", `f: `},
		{"[groups]\n\"\" = \"x\"\n", `f: a group name is empty`},
		{"[groups]\na = \"x\"\na = \"y\"\n", `f:3: `},
		{"[groups]\na = \"sekrit\n", `f:2: `},
	} {
		_, err := Parse("f", []byte(c.in))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error starting %q", c.in, err, c.want)
			continue
		}
		// No key's text is ever in an error.
		for _, secret := range []string{"tok en", "sekrit"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Parse(%q): the error %q quotes the key", c.in, err)
			}
		}
	}
}

func TestOpenReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "upstream.toml")
	write := func(s string, mode os.FileMode) {
		if err := os.WriteFile(path, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, mode)
	}
	write("[groups]\ng = \"k1\"\n", 0o644)
	var logs bytes.Buffer
	k, err := Open(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Authorization("g"); !slices.Equal(got, []string{"Bearer k1"}) || k.Authorization("other") != nil || k.Groups() != 1 {
		t.Fatalf("Authorization(g) = %v", got)
	}
	if !strings.Contains(logs.String(), "upstream_keys_file_permissions") || strings.Contains(logs.String(), "k1") {
		t.Fatalf("log: %s", logs.String())
	}
	write("[groups]\ng = \"k2\"\nh = \"k3\"\n", 0o600)
	if err := k.Reload(); err != nil || k.Authorization("g")[0] != "Bearer k2" || k.Authorization("h")[0] != "Bearer k3" {
		t.Fatalf("reload: %v %v", err, k.Authorization("g"))
	}
	// A broken file keeps the keys in force.
	write("[groups\n", 0o600)
	if err := k.Reload(); err == nil || !strings.Contains(err.Error(), path+":") {
		t.Fatalf("broken reload: %v", err)
	}
	if k.Authorization("g")[0] != "Bearer k2" {
		t.Fatal("a broken file dropped the keys in force")
	}
	os.Remove(path)
	if err := k.Reload(); err == nil || k.Authorization("h")[0] != "Bearer k3" {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := Open(path, nil); err == nil || !strings.Contains(err.Error(), "SERVE_UPSTREAM_KEYS_FILE") {
		t.Fatalf("Open of a missing file: %v", err)
	}
	var none *Keys
	if none.Authorization("g") != nil || none.Reload() != nil || none.Groups() != 0 {
		t.Fatal("a nil Keys holds keys")
	}
}
