// Package version carries the version and commit a binary was built from.
// The Makefile sets both with -ldflags; a plain `go build` falls back to the
// VCS stamp Go records in the binary.
package version

import (
	"fmt"
	"io"
	"runtime/debug"
)

// Set at build time:
//
//	-ldflags "-X github.com/fe64bb06/frontdoor/internal/version.Version=v0.1.0
//	          -X github.com/fe64bb06/frontdoor/internal/version.Commit=<sha>"
var (
	Version = "dev"
	Commit  = ""
)

// CommitHash returns the build's commit, or "unknown".
func CommitHash() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// String is the one-line version text, e.g. "enginesim dev (commit 1a2b3c)".
func String(binary string) string {
	return fmt.Sprintf("%s %s (commit %s)", binary, Version, CommitHash())
}

// Handle prints the version and returns true when args (os.Args[1:]) is
// exactly --version or -version; the caller then exits 0.
func Handle(binary string, args []string, w io.Writer) bool {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(w, String(binary))
		return true
	}
	return false
}
