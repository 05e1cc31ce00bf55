package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

// TestRoutesFileOnHangUp: the binary without a key file, given
// MORTRED_ROUTES_FILE, serves the catalog address until the file appears,
// switches on SIGHUP (and does not exit on it), and keeps its routes when
// a reload fails.
func TestRoutesFileOnHangUp(t *testing.T) {
	instance := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+modelTok {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"served_by":%q}`, name)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	oldM, newM := instance("v1"), instance("v2")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "server"), 0o755); err != nil {
		t.Fatal(err)
	}
	gwPort := testproc.FreePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", gwPort)
	writeFile(t, filepath.Join(dir, "mortred.toml"), fmt.Sprintf("[supervisor]\napi_port = %d\nserver_conf_dir = \"server\"\n[gateway]\nhost = \"127.0.0.1\"\nport = %d\n",
		testproc.FreePort(t), gwPort))
	writeFile(t, filepath.Join(dir, "server", "M.toml"), fmt.Sprintf("[M]\nhost = \"127.0.0.1\"\nport = %d\nserver_uri = \"/m\"\nmodel_config_file_path = %q\n",
		oldM.Listener.Addr().(*net.TCPAddr).Port, filepath.Join(orttest.RepoRoot(), "conf", "models", "ppocr_cls.toml")))
	routes := filepath.Join(dir, "routes.json")
	gw := testproc.Start(t, testproc.Options{Name: "mortred-gateway", Env: append(gatewayEnv(), "MORTRED_ROUTES_FILE="+routes), MustStop: true},
		testproc.Bin(t, "mortred-gateway"), "--config", filepath.Join(dir, "mortred.toml"))

	infer := func() (by, version string, err error) {
		req, _ := http.NewRequest("POST", url+"/v1/models/M/infer", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+operatorTok)
		resp, err := client.Do(req)
		if err != nil {
			return "", "", err
		}
		defer resp.Body.Close()
		var ans struct {
			ServedBy string `json:"served_by"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode != 200 {
			return "", "", fmt.Errorf("%d %v", resp.StatusCode, err)
		}
		return ans.ServedBy, resp.Header.Get("X-Mortred-Version"), nil
	}
	served := func(what, wantBy, wantVersion string) {
		t.Helper()
		testproc.Eventually(t, 20*time.Second, what, func() error {
			if gw.Exited() {
				t.Fatalf("the gateway exited:\n%s", gw.Output())
			}
			by, v, err := infer()
			if err != nil || by != wantBy || v != wantVersion {
				return fmt.Errorf("served by %q, version %q, err %v; want %q, %q", by, v, err, wantBy, wantVersion)
			}
			return nil
		})
	}
	served("the catalog address before any routes file", "v1", "")

	replace(t, routes, fmt.Sprintf(`{"generation":1,"models":{"M":{"addr":%q,"version":"v2","instance":2,"draining":[{"addr":%q,"version":"v1","instance":0}]}}}`,
		strings.TrimPrefix(newM.URL, "http://"), strings.TrimPrefix(oldM.URL, "http://")))
	if err := gw.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	served("the new instance after SIGHUP", "v2", "v2")

	replace(t, routes, `{"generation":2,"models":{"M":{"addr":"127.0.0.1"}}}`)
	if err := gw.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testproc.Until(t, 20*time.Second, "gateway_routes_reload_failed in the log", func() bool {
		return strings.Contains(gw.Output(), "gateway_routes_reload_failed")
	})
	if by, v, err := infer(); err != nil || by != "v2" || v != "v2" {
		t.Fatalf("after a failed reload: served by %q, version %q, %v; want the routes in force", by, v, err)
	}
	if gw.Exited() {
		t.Fatalf("the gateway exited:\n%s", gw.Output())
	}
}
