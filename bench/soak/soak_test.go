package soak

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

// TestSoakTwoMinutes is the soak itself, two minutes of it, so that the
// tool cannot rot: the same topology, load and fault kinds as `make
// soak`. It holds the targets a short run can judge: no defect, every
// failure explained by a fault, every fault recovered from, no orphan.
// (Recovery bounds and process health are judged by the long run, whose
// report is docs/soak.md; two minutes are mostly warm-up for them.)
func TestSoakTwoMinutes(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak runs for two minutes")
	}
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	var binDir string
	for _, b := range []string{"mentatd", "mentatd-serve", "enginesim", "mortred-supervisor", "mortred-gateway", "mortred-server"} {
		p, err := testbin.Path(b)
		if err != nil {
			t.Fatal(err)
		}
		binDir = filepath.Dir(p)
	}
	t.Cleanup(testbin.Cleanup)
	t.Setenv("MORTRED_ORT_LIB", orttest.Lib(t))
	t.Setenv("MORTRED_MODEL_DIR", orttest.ModelDir(t))
	out := filepath.Join(t.TempDir(), "soak.md")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	sum, err := Run(ctx, Config{BinDir: binDir, Root: root, WorkDir: t.TempDir(), Duration: 2 * time.Minute, Seed: 5,
		Out: out, Command: "go test ./bench/soak/", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(md)
	if sum.Results < 300 {
		t.Errorf("only %d requests judged in two minutes", sum.Results)
	}
	if sum.Faults < 3 {
		t.Errorf("only %d faults in two minutes (one every 10–30 s after the first minute's half)", sum.Faults)
	}
	if n := sum.Outcomes[record.Defect]; n > 0 {
		t.Errorf("%d defects; report:\n%s", n, section(report, "### Defects"))
	}
	if n := sum.Outcomes[record.Unattributed]; n > 0 {
		t.Errorf("%d failures no fault explains; report:\n%s", n, section(report, "### Unattributed"))
	}
	if len(sum.Orphans) > 0 {
		t.Errorf("orphan processes: %v", sum.Orphans)
	}
	for _, f := range sum.NotRecovered {
		t.Errorf("not recovered: %s", f)
	}
	for _, png := range []string{"success.png", "latency-p99.png", "rss.png", "fds.png"} {
		if _, err := os.Stat(filepath.Join(strings.TrimSuffix(out, ".md")+"-charts", png)); err != nil {
			t.Errorf("chart: %v", err)
		}
	}
}

// section is the part of a markdown report from heading to the next one.
func section(md, heading string) string {
	i := strings.Index(md, heading)
	if i < 0 {
		return "(no " + heading + " section)"
	}
	rest := md[i+len(heading):]
	if j := strings.Index(rest, "\n#"); j >= 0 {
		rest = rest[:j]
	}
	return heading + rest
}
