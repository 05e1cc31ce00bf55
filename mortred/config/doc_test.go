package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// docDefaults reads the "| `key` | default | … |" rows of one ### section
// of docs/mortred.md.
func docDefaults(t *testing.T, heading string) map[string]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/mortred.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### "+heading)
	if !ok {
		t.Fatalf("docs/mortred.md has no section %q", heading)
	}
	section, _, _ = strings.Cut(section, "\n#")
	out := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue
		}
		key := strings.Trim(strings.TrimSpace(cells[0]), "`")
		out[key] = strings.Trim(strings.TrimSpace(cells[1]), "`")
	}
	return out
}

// fieldsByTag lists a struct's fields by TOML key, formatted as the
// manual writes a default: numbers and booleans bare, strings quoted,
// pointers followed.
func fieldsByTag(v any) map[string]string {
	out := map[string]string{}
	rv := reflect.ValueOf(v)
	for i := 0; i < rv.NumField(); i++ {
		tag := rv.Type().Field(i).Tag.Get("toml")
		if tag == "" || tag == "-" {
			continue
		}
		f := rv.Field(i)
		if f.Kind() == reflect.Pointer {
			f = f.Elem()
		}
		switch {
		case f.Kind() == reflect.String:
			out[tag] = fmt.Sprintf("%q", f.String())
		case f.Kind() == reflect.Map && f.Len() == 0:
			out[tag] = "{}" // an empty TOML inline table, as the manual writes it
		default:
			out[tag] = fmt.Sprint(f.Interface())
		}
	}
	return out
}

// checkDefaults compares the manual's rows with the code's defaults: every
// key documented, every documented default the code's (a relative path
// default is compared resolved against dir).
func checkDefaults(t *testing.T, heading string, code map[string]string, dir string, required ...string) {
	t.Helper()
	doc := docDefaults(t, heading)
	for key, got := range code {
		want, ok := doc[key]
		switch {
		case !ok:
			t.Errorf("%s: key %s is not documented", heading, key)
		case want == "(required)":
			if !contains(required, key) {
				t.Errorf("%s: %s documented as required, the code defaults it to %s", heading, key, got)
			}
		case want != got && fmt.Sprintf("%q", filepath.Join(dir, strings.Trim(want, `"`))) != got:
			t.Errorf("%s: %s documented default %s, the code's is %s", heading, key, want, got)
		}
	}
	for key := range doc {
		if _, ok := code[key]; !ok {
			t.Errorf("%s: documented key %s does not exist", heading, key)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestManualDefaults(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.toml")
	for name, body := range map[string]string{
		"m.toml":       "[M]\nserver_uri = \"/x\"\nmodel_config_file_path = \"m-model.toml\"\n",
		"m-model.toml": "type = \"testmodel\"\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := readServer(p)
	if err != nil {
		t.Fatal(err)
	}
	code := fieldsByTag(*s)
	delete(code, "server_uri")
	delete(code, "model_config_file_path")
	code["server_uri"], code["model_config_file_path"] = "", ""
	checkDefaults(t, "Model-server file", code, dir, "server_uri", "model_config_file_path")

	cp := DefaultControlPlane(dir)
	checkDefaults(t, "Control-plane file", fieldsByTag(cp.Supervisor), dir)
	checkDefaults(t, "`[gateway]`", fieldsByTag(cp.Gateway), dir)
}
