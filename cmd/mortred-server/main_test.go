package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildBinary compiles mortred-server once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mortred-server-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "mortred-server")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// served is a running mortred-server binary.
type served struct {
	base   string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

// serve runs the real binary on a shipped conf/server file (port 0 and a
// token from the environment) until it is ready.
func serve(t *testing.T, conf, token string) *served {
	t.Helper()
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	// Run from the checkout's root, as a user does after `make setup`: the
	// server finds ONNX Runtime and the models beside its working directory
	// even when MORTRED_ORT_LIB and MORTRED_MODEL_DIR are not set.
	cmd := exec.CommandContext(ctx, bin, "--config", filepath.Join("conf", "server", conf))
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "MORTRED_LISTEN_PORT=0", "MORTRED_AUTH_TOKEN="+token)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrCh := make(chan string, 1)
	var logMu sync.Mutex
	var logs strings.Builder // stdout, for the failure messages
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if a, ok := strings.CutPrefix(sc.Text(), "mortred-server listening on "); ok {
				addrCh <- a
			}
		}
		close(addrCh)
	}()
	var addr string
	select {
	case addr = <-addrCh:
	case <-time.After(60 * time.Second):
		t.Fatalf("no listening line; stderr:\n%s", stderr.String())
	}
	if addr == "" {
		t.Fatalf("binary exited early; stderr:\n%s", stderr.String())
	}
	base := "http://" + addr

	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			logMu.Lock()
			defer logMu.Unlock()
			t.Fatalf("never ready; stdout:\n%s\nstderr:\n%s", logs.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &served{base: base, cmd: cmd, stderr: &stderr}
}

// stop sends SIGTERM and wants a clean exit.
func (s *served) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\nstderr:\n%s", err, s.stderr.String())
	}
}

// TestBinaryServesShippedConfig runs the real binary on the repository's
// conf/server/testmodel.toml, infers once, and stops it with SIGTERM.
func TestBinaryServesShippedConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	srv := serve(t, "testmodel.toml", "bin-token")
	base := srv.base

	body := `{"req_id":"bin-1","images":["` + base64.StdEncoding.EncodeToString(testmodel.GrayPNG(4, 4, 230)) + `"]}`
	r, _ := http.NewRequest(http.MethodPost, base+"/mortred_ai_server_v1/classification/testmodel", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer bin-token")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var env envelope.Response
	if err := json.Unmarshal(b, &env); err != nil || resp.StatusCode != 200 || env.TaskID != "bin-1" || len(env.Results) != 1 || !strings.Contains(string(env.Results[0].Data), `"light"`) {
		t.Fatalf("→ %d %s", resp.StatusCode, b)
	}
	// Async is on in the shipped file.
	r, _ = http.NewRequest(http.MethodPost, base+"/jobs", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer bin-token")
	resp, err = http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /jobs → %d", resp.StatusCode)
	}

	srv.stop(t)
}

// TestBinaryRefusesUnsafeStart: fail-closed startup exits non-zero with
// the reason.
func TestBinaryRefusesUnsafeStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"MORTRED_LISTEN_HOST=0.0.0.0", "MORTRED_AUTH_TOKEN=x"}, []string{"--config", "../../conf/server/testmodel.toml"}, "wildcard"},
		{[]string{"MORTRED_LISTEN_HOST=192.0.2.1"}, []string{"--config", "../../conf/server/testmodel.toml"}, "without auth_token"},
		{[]string{"MORTRED_LISTEN_PORT=seventy"}, []string{"--config", "../../conf/server/testmodel.toml"}, "MORTRED_LISTEN_PORT"},
		{nil, nil, "--config is required"},
		{nil, []string{"--config", "nope.toml"}, "nope.toml"},
	} {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = append(os.Environ(), c.env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%v %v: err %v, output %s", c.env, c.args, err, out)
		}
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "mortred-server ") {
		t.Fatalf("--version: %v %s", err, out)
	}
}
