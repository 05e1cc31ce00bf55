// gen-openapi writes docs/openapi.json (and the copy mortred/server embeds)
// from the envelope types and the status table:
//
//	go run ./cmd/gen-openapi            # from the repository root
//	go generate ./mortred/server
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

func main() {
	if version.Handle("gen-openapi", os.Args[1:], os.Stdout) {
		return
	}
	out := flag.String("out", "docs/openapi.json", "where to write the document")
	embed := flag.String("embed", "mortred/server/openapi.json", "the server's embedded copy (empty: skip)")
	flag.Parse()
	doc, err := envelope.OpenAPI()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-openapi:", err)
		os.Exit(1)
	}
	for _, p := range []string{*out, *embed} {
		if p == "" {
			continue
		}
		if err := os.WriteFile(p, doc, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen-openapi:", err)
			os.Exit(1)
		}
	}
}
