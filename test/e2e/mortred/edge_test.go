package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

const nginxBin = "/usr/sbin/nginx"

func needTool(t *testing.T, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing (Debian package %s): run make setup", path, pkg)
	}
}

// testTLSEdge: a certificate from openssl, the Nginx configuration from
// mortredctl init-edge --mode files, real Nginx on a loopback port, and an
// inference over HTTPS through Nginx → gateway → model server.
func testTLSEdge(t *testing.T, sup *stack.Supervisor) {
	needTool(t, nginxBin, "nginx-light")
	dir := t.TempDir()
	cert, key := opensslCert(t, dir)
	edge := filepath.Join(dir, "edge")
	port := testproc.FreePort(t)
	r := ctl(t, sup, nil, "init-edge", "--mode", "files", "--cert", cert, "--key", key,
		"--out", edge, "--listen", fmt.Sprint(port), "--server-name", "localhost")
	if r.code != 0 || !strings.Contains(r.stdout, "nginx -t -p "+edge) {
		t.Fatalf("init-edge: %s", r)
	}
	site, err := os.ReadFile(filepath.Join(edge, "mortred-edge.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// The gateway address came from MORTREDCTL_GATEWAY_ADDR.
	for _, want := range []string{"server " + strings.TrimPrefix(sup.Conf.GatewayURL(), "http://") + ";", "ssl_certificate     " + cert + ";", fmt.Sprintf("listen %d ssl;", port)} {
		if !bytes.Contains(site, []byte(want)) {
			t.Fatalf("site config lacks %q:\n%s", want, site)
		}
	}
	ngx := startNginx(t, edge)
	client := trustingClient(t, cert, time.Minute)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	send := func(method, path, token string, body []byte) (int, http.Header, []byte, error) {
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, nil, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, data, err
	}
	testproc.Eventually(t, 30*time.Second, "nginx answers over TLS", func() error {
		select {
		case <-ngx.Done():
			t.Fatalf("nginx exited: %s", ngx.Output())
		default:
		}
		code, _, body, err := send("GET", "/healthz", "", nil)
		if err != nil || code != 200 {
			return fmt.Errorf("%d %s %v", code, body, err)
		}
		return nil
	})
	sup.WaitReady(t, "TM", 60*time.Second)
	code, hdr, body, err := send("POST", "/v1/models/TM/infer", sup.Tokens.API, stack.Envelope("tls", "", stack.LightPNG))
	if err != nil || code != 200 || hdr.Get("X-Mortred-Model") != "TM" || !bytes.Contains(body, []byte(`"light"`)) || !bytes.Contains(body, []byte(`"task_id":"tls"`)) {
		t.Fatalf("HTTPS inference: %d %v %s %v", code, hdr, body, err)
	}
	code, hdr, _, err = send("POST", "/v1/models/TM/infer", "wrong", stack.Envelope("tls", "", stack.LightPNG))
	if err != nil || code != 401 || hdr.Get("WWW-Authenticate") == "" {
		t.Fatalf("HTTPS with a wrong token: %d %v", code, err)
	}
	// An async job through the edge: the rewritten URLs work from outside.
	code, _, body, err = send("POST", "/v1/models/TM/jobs", sup.Tokens.API, stack.Envelope("tls-job", "", stack.DarkPNG))
	if err != nil || code != 202 || !bytes.Contains(body, []byte(`"result_url":"/v1/models/TM/jobs/`)) {
		t.Fatalf("job over HTTPS: %d %s %v", code, body, err)
	}
	// A client that does not trust the certificate is refused.
	plain := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	if resp, err := plain.Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("an untrusting client accepted the self-signed certificate")
	}
	plain.CloseIdleConnections()

	t.Run("lan mode passes nginx -t", func(t *testing.T) {
		lan := filepath.Join(t.TempDir(), "lan")
		r := ctl(t, sup, nil, "--json", "init-edge", "--mode", "lan", "--out", lan, "--listen", fmt.Sprint(testproc.FreePort(t)), "--server-name", "mortred.lan")
		if r.code != 0 || !strings.Contains(r.stdout, `"nginx_conf":"`+lan+`/nginx.conf"`) {
			t.Fatalf("init-edge lan: %s", r)
		}
		if st, err := os.Stat(filepath.Join(lan, "key.pem")); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("key.pem: %v %v", st, err)
		}
		out, err := exec.Command(nginxBin, "-t", "-p", lan, "-c", filepath.Join(lan, "nginx.conf"), "-e", filepath.Join(lan, "error.log")).CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("test is successful")) {
			t.Fatalf("nginx -t: %v\n%s", err, out)
		}
	})
}

// opensslCert makes a self-signed certificate for localhost and 127.0.0.1
// with openssl, in dir.
func opensslCert(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	opensslBin, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("openssl is missing (Debian package openssl): run make setup")
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	out, err := exec.Command(opensslBin, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
		"-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
		"-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1").CombinedOutput()
	if err != nil {
		t.Fatalf("openssl: %v\n%s", err, out)
	}
	return cert, key
}

// startNginx checks and runs the standalone configuration init-edge wrote
// in edge; its error log is shown when the test fails.
func startNginx(t *testing.T, edge string) *testproc.Proc {
	t.Helper()
	conf := filepath.Join(edge, "nginx.conf")
	if out, err := exec.Command(nginxBin, "-t", "-p", edge, "-c", conf, "-e", filepath.Join(edge, "error.log")).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	ngx := stack.Start(t, nginxBin, []string{"-p", edge, "-c", conf, "-e", filepath.Join(edge, "error.log"), "-g", "daemon off;"}, stack.BaseEnv())
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := os.ReadFile(filepath.Join(edge, "error.log"))
			t.Logf("nginx error.log:\n%s", testproc.Tail(string(logs), 6000))
		}
	})
	return ngx
}

// trustingClient is an HTTPS client that trusts cert (and only it).
func trustingClient(t *testing.T, cert string, timeout time.Duration) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("cannot parse the openssl certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}
