// Command mortredctl is the CLI of mortred's supervisor and gateway.
package main

import (
	"os"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/fe64bb06/frontdoor/mortred/ctl"
)

func main() {
	if version.Handle("mortredctl", os.Args[1:], os.Stdout) {
		return
	}
	os.Exit(ctl.Main(os.Args[1:], os.Stdout, os.Stderr, envconf.OS()))
}
