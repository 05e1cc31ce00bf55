package soak

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testbin"
)

// The manual's fault table names every fault kind with its bound.
func TestManualListsEveryFault(t *testing.T) {
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(root, "docs", "chaos-soak.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|.*\\| (\\d+) s \\|$").FindAllStringSubmatch(string(md), -1)
	documented := map[string]string{}
	for _, r := range rows {
		documented[r[1]] = r[2] + "s"
	}
	for _, k := range kinds {
		b, ok := documented[k.name]
		if !ok {
			t.Errorf("fault %s is not in docs/chaos-soak.md's table", k.name)
			continue
		}
		if d, _ := time.ParseDuration(b); d != k.bound {
			t.Errorf("fault %s: the manual says %s, the code bounds it at %s", k.name, b, k.bound)
		}
		delete(documented, k.name)
	}
	for name := range documented {
		t.Errorf("docs/chaos-soak.md lists fault %s, which the soak does not inject", name)
	}
}
