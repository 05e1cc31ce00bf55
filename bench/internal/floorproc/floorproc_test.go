package floorproc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/bench/router/floor"
)

// TestMain lets this test binary be the floor proxy's parent and the
// proxy itself, as the benchmark binary is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == floor.ChildArg {
		os.Exit(floor.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// Start runs the floor as a child process with one listener per
// upstream, each forwarding to its own upstream, and records the
// command it ran.
func TestStartForwardsEachUpstream(t *testing.T) {
	ports := map[string]int{}
	for _, name := range []string{"a", "b"} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s saw %s %s", name, r.Method, r.URL.Path)
		}))
		defer up.Close()
		u, err := url.Parse(up.URL)
		if err != nil {
			t.Fatal(err)
		}
		var port int
		if _, err := fmt.Sscanf(u.Port(), "%d", &port); err != nil {
			t.Fatal(err)
		}
		ports[name] = port
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := Start(ctx, os.Args[0], t.TempDir(), "floor-proxy", "", ports)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Proc.Stop()

	c := &http.Client{Timeout: 10 * time.Second}
	for name := range ports {
		resp, err := c.Post(f.URL(name)+"/v1/x", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := name + " saw POST /v1/x"; resp.StatusCode != http.StatusOK || string(b) != want {
			t.Fatalf("through %s: HTTP %d %q, want 200 %q", name, resp.StatusCode, b, want)
		}
		route := fmt.Sprintf("127.0.0.1:%d=http://127.0.0.1:%d", f.Port[name], ports[name])
		if !strings.Contains(f.Command, route) {
			t.Fatalf("command %q does not name the route %s", f.Command, route)
		}
	}
	if !strings.HasPrefix(f.Command, "bench-report "+floor.ChildArg+" ") {
		t.Fatalf("command %q, want it to start with the unpinned child call", f.Command)
	}
}
