package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinary builds the real binary, checks --version, serves a request on
// a real port, and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "enginesim")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "enginesim ") {
		t.Fatalf("--version: %q %v", out, err)
	}
	if err := exec.Command(bin, "--fail-rate", "3").Run(); err == nil {
		t.Fatal("an invalid flag must fail the start")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--host", "127.0.0.1", "--port", "0", "--served-model-name", "demo", "--ttft", "1ms", "--itl", "1ms")
	cmd.Env = append(os.Environ(), "LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	addrRE := regexp.MustCompile(`event=enginesim_listening addr=(\S+)`)
	var addr string
	for sc.Scan() {
		if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
			break
		}
	}
	if addr == "" {
		t.Fatal("no enginesim_listening line")
	}
	var rest strings.Builder
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(&rest, stderr)
	}()

	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	res, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `"completion_tokens":4`) {
		t.Fatalf("chat: %d %s", res.StatusCode, body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-drained
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, rest.String())
	}
	if !strings.Contains(rest.String(), "event=enginesim_stopped") {
		t.Errorf("no enginesim_stopped line:\n%s", rest.String())
	}
}
