// Package docs runs what the documents tell a reader to type, as written,
// with the real binaries: README.md's "A short tour" (the mentat cluster
// and the mortred stack) and the examples of the mortred manuals. The way
// scripts/demo.sh proves each line it prints, this proves each command of
// the documents.
//
// Nothing is substituted: each document runs in a network namespace of its
// own (only its loopback up), so the fixed ports the documents name are
// free, inside a directory laid out like a checkout after `make setup` and
// `make build` (see checkout). The commands are the ```sh blocks, split by
// internal/doccmd, fed one by one to one bash. Two conventions of the
// documents are checked: a trailing comment "→ TEXT" is (a part of) what
// the command prints, and ":PORT" in the comment of a background command
// ("… &") is a port it must open. A reader waits for a server that is still
// starting and tries again; so does the test, up to a bound.
package docs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/doccmd"
	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/internal/testproc"
)

func TestMain(m *testing.M) {
	removeStaleNamespaces()
	testproc.Main(m, testproc.Suite{Build: binaries})
}

// patience bounds how long one command may keep failing while servers
// start: the PP-OCR models load in seconds, `go run` may compile first.
const patience = 4 * time.Minute

// tour runs every sh block of a document (under one heading when heading
// is not "") in a fresh namespace and checkout.
func tour(t *testing.T, doc, heading string) {
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []doccmd.Command
	for _, b := range doccmd.Blocks(data, "sh") {
		if heading == "" || b.Heading == heading {
			cmds = append(cmds, b.Commands()...)
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("%s has no sh commands under %q", doc, heading)
	}
	dir := checkout(t)
	sh := newShell(t, netns(t), dir)
	sh.run(doc, cmds, patience)
}

func TestREADMETour(t *testing.T) {
	t.Parallel()
	tour(t, "README.md", "A short tour")
}
func TestManualExamples(t *testing.T) {
	for _, doc := range []string{"docs/mortred-server.md", "docs/mortred-gateway.md", "docs/mortred-supervisor.md", "docs/mortredctl.md", "docs/mortred.md"} {
		t.Run(doc, func(t *testing.T) {
			t.Parallel()
			tour(t, doc, "")
		})
	}
}
