package sse

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// ChildArg is the first argument that makes the benchmark binary run as
// this package's client: `self ChildArg streams|idle <json opts>`. The
// binary's main must hand such a call to Main.
const ChildArg = "sse-client"

// Main runs the client side and returns the exit status. The result is
// one line on stdout: "RESULT <json>" (streams) or "READY <json>" (idle,
// after which the streams stay open until stdin closes or Hold passes).
func Main(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sse-client streams|idle <json options>")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "streams":
		var o StreamOpts
		if err := json.Unmarshal([]byte(args[1]), &o); err != nil {
			fmt.Fprintln(os.Stderr, "sse-client: options:", err)
			return 2
		}
		emit("RESULT", runStreams(ctx, o))
	case "idle":
		var o IdleOpts
		if err := json.Unmarshal([]byte(args[1]), &o); err != nil {
			fmt.Fprintln(os.Stderr, "sse-client: options:", err)
			return 2
		}
		o = o.withDefaults()
		conns, res := openIdle(ctx, o)
		emit("READY", res)
		gone := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(gone) }()
		select {
		case <-gone:
		case <-ctx.Done():
		case <-time.After(o.Hold):
		}
		for _, c := range conns {
			c.Close()
		}
	default:
		fmt.Fprintf(os.Stderr, "sse-client: unknown mode %q (streams, idle)\n", args[0])
		return 2
	}
	return 0
}

func emit(tag string, v any) {
	b, _ := json.Marshal(v)
	fmt.Printf("%s %s\n", tag, b)
}

// command builds the child's command line, pinned with taskset when cpus
// is set.
func command(ctx context.Context, self, cpus, mode string, opts any) (*exec.Cmd, error) {
	b, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	args := []string{ChildArg, mode, string(b)}
	bin := self
	if cpus != "" {
		bin, args = "taskset", append([]string{"-c", cpus, self}, args...)
	}
	return exec.CommandContext(ctx, bin, args...), nil
}

// RunStreams runs the streaming load in a child process (self is the
// benchmark binary) and returns its summary.
func RunStreams(ctx context.Context, self, cpus string, o StreamOpts) (StreamResult, error) {
	o = o.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, o.Duration+o.Timeout+30*time.Second)
	defer cancel()
	cmd, err := command(ctx, self, cpus, "streams", o)
	if err != nil {
		return StreamResult{}, err
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return StreamResult{}, fmt.Errorf("stream client: %v: %s", err, errb.String())
	}
	var r StreamResult
	return r, parse(string(out), "RESULT", &r)
}

func parse(out, tag string, v any) error {
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, tag+" "); ok {
			return json.Unmarshal([]byte(rest), v)
		}
	}
	return fmt.Errorf("no %s line from the client: %q", tag, out)
}

// Idle is a child process holding streams open.
type Idle struct {
	Result IdleResult
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	cancel context.CancelFunc
}

// OpenIdle starts the child, waits until it has opened its streams and
// returns with them held open. Close releases them.
func OpenIdle(ctx context.Context, self, cpus string, o IdleOpts) (*Idle, error) {
	o = o.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, o.OpenTimeout+o.Hold+30*time.Second)
	cmd, err := command(ctx, self, cpus, "idle", o)
	if err != nil {
		cancel()
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	id := &Idle{cmd: cmd, stdin: stdin, cancel: cancel}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		id.Close()
		return nil, fmt.Errorf("idle client: %v: %s", err, errb.String())
	}
	if err := parse(line, "READY", &id.Result); err != nil {
		id.Close()
		return nil, err
	}
	return id, nil
}

// Close tells the child to close its streams and waits for it to exit.
func (id *Idle) Close() error {
	defer id.cancel()
	id.stdin.Close()
	err := id.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("idle client: %v", err)
	}
	return err
}
