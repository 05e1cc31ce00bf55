package ctl

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// NewToken returns a fresh 256-bit token, URL-safe.
func NewToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux; a broken kernel is not recoverable
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func (c *CLI) initTrust(args []string) error {
	out := "mortred.env"
	force := false
	pos, err := c.subFlags("init-trust", args, func(fs *flag.FlagSet) {
		fs.StringVar(&out, "out", out, "env file to write")
		fs.BoolVar(&force, "force", false, "replace an existing file")
	})
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError{"init-trust takes no arguments"}
	}
	api, metrics, model := NewToken(), NewToken(), NewToken()
	content := fmt.Sprintf(`# Written by mortredctl init-trust on %s. Keep it secret: mode 0600.
# Load it into a shell with: set -a; . %s; set +a
# Management API, web UI, and inference through the gateway:
MORTRED_API_TOKEN=%s
# GET /metrics on the gateway (the scrape secret; distinct by design):
MORTRED_METRICS_TOKEN=%s
# The model servers' own token (supervisor to children, gateway to models):
MORTRED_AUTH_TOKEN=%s
`, time.Now().UTC().Format(time.RFC3339), sourceArg(out), api, metrics, model)
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(out, flags, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists; pass --force to replace its tokens (clients using them will need the new ones)", out)
	}
	if err != nil {
		return err
	}
	// An existing file keeps its old mode under O_TRUNC; tokens must not be
	// readable by others whatever it was.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if c.G.JSON {
		fmt.Fprintf(c.Out, "{\"file\":%q}\n", out)
		return nil
	}
	fmt.Fprintf(c.Out, "wrote fresh tokens to %s (mode 0600)\nload them with: set -a; . %s; set +a\n", out, sourceArg(out))
	return nil
}

// sourceArg is path as the argument of the shell's "." command, which
// searches $PATH for a name without a slash: an absolute path stays as it
// is, a relative one gets "./" unless it already starts with "./" or "../"
// (relative paths hold from the directory mortredctl ran in), and a path
// with characters the shell would read is single-quoted.
func sourceArg(path string) string {
	if !filepath.IsAbs(path) && !strings.HasPrefix(path, "./") && !strings.HasPrefix(path, "../") {
		path = "./" + path
	}
	if strings.Trim(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@%") == "" {
		return path
	}
	return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
}
