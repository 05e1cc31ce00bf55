// Command mentatd-serve is the OpenAI-compatible router and merged MCP
// endpoint of a mentat cluster. Configuration is by environment only; see
// docs/mentatd-serve.md. `mentatd-serve keys …` manages a key file.
package main

import (
	"fmt"
	"os"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mentat/serve/app"
)

func main() {
	if version.Handle("mentatd-serve", os.Args[1:], os.Stdout) {
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "keys" {
		os.Exit(keys.Command(keys.Router, os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "mentatd-serve takes no arguments other than --version and the keys subcommand; configure it by environment (docs/mentatd-serve.md)")
		os.Exit(2)
	}
	os.Exit(app.Main(envconf.OS(), logx.Default()))
}
