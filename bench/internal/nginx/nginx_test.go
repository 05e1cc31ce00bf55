package nginx

import (
	"strings"
	"testing"
)

// Extra directives land in their own upstream's location, indented as
// nginx.conf reads, and leave the other upstreams' blocks as Start's.
func TestRenderExtra(t *testing.T) {
	names := []string{"a", "b"}
	up := map[string]int{"a": 1001, "b": 1002}
	ports := map[string]int{"a": 2001, "b": 2002}
	plain := render("/t", names, up, ports, nil)
	got := render("/t", names, up, ports, map[string]string{"a": "if ($x) {\n    return 401;\n}\nadd_header X y always;\n"})

	want := "            proxy_read_timeout 1800s;\n" +
		"            if ($x) {\n                return 401;\n            }\n            add_header X y always;\n        }\n"
	if !strings.Contains(got, want) {
		t.Fatalf("extra directives not in a's location as expected:\n%s", got)
	}
	if strings.Count(got, "add_header") != 1 {
		t.Fatalf("extra directives should appear once, in a's location:\n%s", got)
	}
	_, bPlain, _ := strings.Cut(plain, "upstream b {")
	_, bGot, _ := strings.Cut(got, "upstream b {")
	if bPlain != bGot {
		t.Fatalf("b's block changed:\n%s\nwant:\n%s", bGot, bPlain)
	}
}
