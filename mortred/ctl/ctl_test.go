package ctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUsageExitCodes(t *testing.T) {
	cases := []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, 2, "no command"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"--nope"}, 2, "flag provided but not defined"},
		{[]string{"stop"}, 2, "stop takes one server id"},
		{[]string{"restart", "a", "b"}, 2, "restart takes one server id"},
		{[]string{"logs"}, 2, "logs takes one server id"},
		{[]string{"logs", "A", "--limit", "1001"}, 2, "--limit must be from 1 to 1000"},
		{[]string{"logs", "A", "--offset", "x"}, 2, "invalid value"},
		{[]string{"infer", "A"}, 2, "infer takes one model id and --image PATH"},
		{[]string{"init-edge"}, 2, "--mode must be lan, acme or files"},
		{[]string{"init-edge", "--mode", "acme"}, 2, "--mode acme needs --server-name"},
		{[]string{"init-edge", "--mode", "files", "--server-name", "x"}, 2, "--mode files needs --cert and --key"},
		{[]string{"init-edge", "--mode", "lan", "--listen", "0"}, 2, "--listen must be a port number"},
		{[]string{"init-edge", "--mode", "lan", "--server-name", "a;b"}, 2, "characters Nginx would misread"},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "a:1", "--gateway-addr", "b:1"}, 2, "give --gateways (several) or --gateway-addr (one), not both"},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "a:1,a:2,a:1"}, 2, `--gateways: "a:1" is listed twice`},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "a:1,b"}, 2, `--gateways: "b" is not HOST:PORT`},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "a:1,,b:1"}, 2, "--gateways: an empty entry"},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "a:99999"}, 2, `"a:99999": the port must be a number from 1 to 65535`},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "[::1:8080"}, 2, `"[::1:8080" is not HOST:PORT`},
		{[]string{"init-edge", "--mode", "lan", "--gateway-addr", "a:1,b:1"}, 2, "--gateway-addr takes one HOST:PORT; list several with --gateways"},
		{[]string{"init-edge", "--mode", "lan", "--gateway-addr", "nope"}, 2, `--gateway-addr: "nope" is not HOST:PORT`},
		{[]string{"init-edge", "--mode", "lan", "--offline"}, 2, "--offline goes with --gateways"},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "a:1,b:1", "--max-fails", "-1"}, 2, "--max-fails must be 0"},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "a:1,b:1", "--fail-timeout", "1500ms"}, 2, "--fail-timeout must be whole seconds"},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "a:1,b:1", "--fail-timeout", "0s"}, 2, "--fail-timeout must be whole seconds, at least 1s"},
		{[]string{"init-edge", "--mode", "lan", "--gateways", "a:1", "--fail-timeout", "ten"}, 2, "invalid value"},
		{[]string{"init-edge", "--mode", "lan", "--read-timeout", "2500ms"}, 2, "--read-timeout must be whole seconds"},
		// No token: a failure that says what to do, not a usage error.
		{[]string{"status"}, 1, "no token: pass --token"},
		{[]string{"status", "--json"}, 1, "no token"},
		{[]string{"help"}, 0, ""},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Chdir(t.TempDir()) // init-edge writes ./edge
			_, stderr, code := run(t, nil, c.args...)
			if code != c.code || !strings.Contains(stderr, c.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, c.code, c.stderr)
			}
			if code == 2 && !strings.Contains(stderr, "usage: mortredctl") {
				t.Fatal("usage error without the usage text")
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	// Port 1 on loopback refuses at once.
	_, stderr, code := run(t, map[string]string{"MORTRED_API_TOKEN": "t"}, "--addr", "127.0.0.1:1", "status")
	if code != 1 || !strings.Contains(stderr, "cannot reach the supervisor at 127.0.0.1:1 (connection refused): is it running?") {
		t.Fatalf("exit %d %q", code, stderr)
	}
}

func TestHTTPErrorMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"ok":false,"error":"boom"}`: "boom",
		`{"status":66,"status_str":"invalid request parameter","errors":[{"pointer":"/x","message":"fix x"}]}`: "fix x",
		`{"status":3,"status_str":"empty input image","results":[{"status":3,"message":"undecodable"}]}`:       "empty input image: undecodable",
		`{"status":65,"status_str":"service not ready","results":[]}`:                                          "service not ready",
		`plain text`: "plain text",
	} {
		got := (&httpError{Status: 400, Body: []byte(body), Who: "the gateway"}).Error()
		if got != "the gateway answered 400 Bad Request: "+want {
			t.Errorf("%s → %q", body, got)
		}
	}
}

func TestInitEdgeFiles(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	for _, f := range []string{cert, key} {
		if err := os.WriteFile(f, []byte("pem"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "edge")
	stdout, stderr, code := run(t, map[string]string{"MORTREDCTL_GATEWAY_ADDR": "127.0.0.1:18080"},
		"init-edge", "--mode", "files", "--cert", cert, "--key", key, "--out", out, "--listen", "8443", "--server-name", "ai.example")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	site, err := os.ReadFile(filepath.Join(out, "mortred-edge.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"server 127.0.0.1:18080;", "listen 8443 ssl;", "server_name ai.example;", "ssl_certificate     " + cert + ";",
		"ssl_certificate_key " + key + ";", "client_max_body_size 64m;", "proxy_request_buffering off;"} {
		if !strings.Contains(string(site), want) {
			t.Errorf("site lacks %q", want)
		}
	}
	if strings.Contains(string(site), "listen 80;") {
		t.Error("files mode has the ACME port-80 server")
	}
	if !strings.Contains(stdout, "curl --cacert "+cert+" https://ai.example:8443/healthz") {
		t.Errorf("stdout %q", stdout)
	}
	// A missing certificate is a failure naming the file.
	_, stderr, code = run(t, nil, "init-edge", "--mode", "files", "--cert", filepath.Join(dir, "missing.pem"), "--key", key, "--out", out, "--server-name", "x")
	if code != 1 || !strings.Contains(stderr, "missing.pem") {
		t.Fatalf("missing cert: %d %q", code, stderr)
	}
	// acme points at Let's Encrypt's paths and serves the challenge on 80.
	_, _, code = run(t, nil, "init-edge", "--mode", "acme", "--server-name", "ai.example", "--out", out)
	site, _ = os.ReadFile(filepath.Join(out, "mortred-edge.conf"))
	if code != 0 || !strings.Contains(string(site), "/etc/letsencrypt/live/ai.example/fullchain.pem") || !strings.Contains(string(site), "/.well-known/acme-challenge/") {
		t.Fatalf("acme: %d\n%s", code, site)
	}
}
