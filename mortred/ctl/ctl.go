// Package ctl is mortredctl: a CLI client of the supervisor's management API
// and the gateway, plus the set-up commands that write tokens (init-trust)
// and the Nginx TLS edge (init-edge). Human tables by default, --json for
// scripts; exit 0 only on success, with errors that say what to do.
package ctl

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/keys"
)

// Environment the CLI reads.
const (
	EnvAddr    = "MORTREDCTL_ADDR"
	EnvGateway = "MORTREDCTL_GATEWAY_ADDR"
	EnvToken   = "MORTREDCTL_TOKEN"
	EnvAPITok  = "MORTRED_API_TOKEN"
)

// Globals are the options every command takes.
type Globals struct {
	Addr    string
	Gateway string
	Token   string
	JSON    bool
}

// CLI carries the streams and environment of one invocation.
type CLI struct {
	Out, Err io.Writer
	Env      envconf.Env
	G        Globals
}

// exitCode ends the command with this code, its messages already written
// (the keys subcommand's own).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// usageError is a mistake in the command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

const usage = `usage: mortredctl [--addr HOST:PORT] [--gateway HOST:PORT] [--token T] [--json] COMMAND

commands:
  status                          the gateway's and every model server's state
  catalog                         the models the supervisor knows
  start|stop|restart ID           lifecycle of one model server (or "gateway")
  logs ID [--offset N] [--limit N] [--follow]
  infer ID --image PATH           send one image through the gateway
  rollout ID [--model-file F | --config F] [--version V]
                                  start a new version beside the one serving, warm it,
                                  switch the gateway to it, drain the old one
  rollback ID                     the same, back to the version the last rollout replaced
  init-trust [--out FILE] [--force]
                                  write fresh, distinct tokens to an env file (mode 0600)
  init-edge --mode lan|acme|files [--server-name N] [--out DIR] [--listen PORT]
            [--cert FILE --key FILE] [--gateway-addr HOST:PORT |
             --gateways HOST:PORT,... [--offline] [--max-fails N] [--fail-timeout D]]
                                  write the Nginx TLS edge in front of the gateway(s)
  keys new --file F --id NAME [--models GLOB,...] [--rpm N] [--ipm N]
           [--max-concurrent N] [--priority P] [--weight W] [--expires T]
                                  make an API key: print it once, append its entry
  keys list --file F [--json]     the key file's entries, without hashes
  keys disable|enable --file F ID turn a key off or on (a running gateway reloads)

environment: MORTREDCTL_ADDR (default 127.0.0.1:8787), MORTREDCTL_GATEWAY_ADDR
(default 127.0.0.1:8080), MORTREDCTL_TOKEN, else MORTRED_API_TOKEN.
`

// Main runs mortredctl with args (without the program name) and returns
// the exit code.
func Main(args []string, out, errw io.Writer, env envconf.Env) int {
	c := &CLI{Out: out, Err: errw, Env: env}
	err := c.run(args)
	var ue usageError
	var ec exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return int(ec)
	case errors.As(err, &ue):
		fmt.Fprintln(errw, "mortredctl:", err)
		fmt.Fprint(errw, usage)
		return 2
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(out, usage)
		return 0
	default:
		fmt.Fprintln(errw, "mortredctl:", err)
		return 1
	}
}

func (c *CLI) run(args []string) error {
	fs := flag.NewFlagSet("mortredctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.G.Addr, "addr", c.Env.String(EnvAddr, "127.0.0.1:8787"), "supervisor address")
	fs.StringVar(&c.G.Gateway, "gateway", c.Env.String(EnvGateway, "127.0.0.1:8080"), "gateway address")
	fs.StringVar(&c.G.Token, "token", c.Env.String(EnvToken, c.Env.String(EnvAPITok, "")), "management token")
	fs.BoolVar(&c.G.JSON, "json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usageError{"no command"}
	}
	cmd, rest := rest[0], rest[1:]
	switch cmd {
	case "status":
		return c.status(rest)
	case "catalog":
		return c.catalog(rest)
	case "start", "stop", "restart":
		return c.lifecycle(cmd, rest)
	case "rollout", "rollback":
		return c.rollout(cmd, rest)
	case "logs":
		return c.logs(rest)
	case "infer":
		return c.infer(rest)
	case "init-trust":
		return c.initTrust(rest)
	case "init-edge":
		return c.initEdge(rest)
	case "keys":
		if code := keys.Command(keys.Gateway, rest, c.Out, c.Err); code != 0 {
			return exitCode(code)
		}
		return nil
	case "help", "-h", "--help":
		return flag.ErrHelp
	}
	return usageError{fmt.Sprintf("unknown command %q", cmd)}
}

// subFlags parses a command's own flags (and --json), allowing them after
// positionals ("logs ID --limit 5").
func (c *CLI) subFlags(name string, args []string, define func(*flag.FlagSet)) ([]string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// --json also after the command ("status --json"), as scripts write it.
	fs.BoolVar(&c.G.JSON, "json", c.G.JSON, "print JSON")
	define(fs)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{name + ": " + err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func (c *CLI) needToken() error {
	if c.G.Token == "" {
		return errors.New("no token: pass --token, or set MORTREDCTL_TOKEN or MORTRED_API_TOKEN (see the env file mortredctl init-trust wrote)")
	}
	return nil
}

func writeTable(w io.Writer, header []string, rows [][]string) {
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = len(h)
	}
	for _, r := range rows {
		for i, cell := range r {
			widths[i] = max(widths[i], len(cell))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, cell := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			if i == len(cells)-1 {
				b.WriteString(cell)
			} else {
				fmt.Fprintf(&b, "%-*s", widths[i], cell)
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
}
