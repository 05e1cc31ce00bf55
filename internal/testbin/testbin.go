// Package testbin builds the module's real binaries for process-level tests,
// once per test process, into a temporary directory. Tests then run them as
// an operator would, over real sockets.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string]error{}
)

// Root returns the module's root directory.
func Root() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(mod), nil
}

// Path builds cmd/<name> (once per process) and returns the binary's path.
func Path(name string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		d, err := os.MkdirTemp("", "frontdoor-bin-")
		if err != nil {
			return "", err
		}
		dir = d
	}
	bin := filepath.Join(dir, name)
	if err, ok := built[name]; ok {
		return bin, err
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	built[name] = err
	return bin, err
}

// Cleanup removes the binaries; call it from TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		built = map[string]error{}
	}
}
