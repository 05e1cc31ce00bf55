package ctl

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const nginxBin = "/usr/sbin/nginx"

// nginxTest runs the real Nginx's configuration test on what init-edge
// wrote into dir. A missing Nginx fails the test: it is part of the set-up.
func nginxTest(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(nginxBin); err != nil {
		t.Fatalf("%s is missing (Debian package nginx-light): run make setup", nginxBin)
	}
	out, err := exec.Command(nginxBin, "-t", "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "test is successful") {
		site, _ := os.ReadFile(filepath.Join(dir, "mortred-edge.conf"))
		t.Fatalf("nginx -t: %v\n%s\n%s", err, out, site)
	}
}

// initEdge runs init-edge in lan mode into a fresh directory with args
// added, and returns the directory, the site file, stdout, stderr and the
// exit code.
func initEdge(t *testing.T, args ...string) (dir, site, stdout, stderr string, code int) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "edge")
	stdout, stderr, code = run(t, nil, append([]string{"init-edge", "--mode", "lan", "--server-name", "ai.lan", "--listen", "18443", "--out", dir}, args...)...)
	b, _ := os.ReadFile(filepath.Join(dir, "mortred-edge.conf"))
	return dir, string(b), stdout, stderr, code
}

// block returns the text of the block that opens with head ("upstream x",
// "location /"), through its closing brace; "" when there is none.
func block(site, head string) string {
	i := strings.Index(site, "\n"+head+" {")
	if i < 0 {
		i = strings.Index(site, "    "+head+" {")
	}
	if i < 0 {
		return ""
	}
	rest := site[i:]
	depth := 0
	for j, c := range rest {
		switch c {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return rest[:j+1]
			}
		}
	}
	return ""
}

// countLines counts the lines that start with prefix after indentation
// (directives, not comments).
func countLines(text, prefix string) int {
	return len(regexp.MustCompile(`(?m)^\s*`+regexp.QuoteMeta(prefix)).FindAllString(text, -1))
}

func wantLines(t *testing.T, what, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(l) + `$`).MatchString(text) {
			t.Errorf("%s lacks the line %q:\n%s", what, l, text)
		}
	}
}

func TestInitEdgeOneGateway(t *testing.T) {
	// --gateway-addr (or the global --gateway): a list of one, no /readyz.
	dir, site, stdout, stderr, code := initEdge(t, "--gateway-addr", "127.0.0.1:18080")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	up := block(site, "upstream mortred_gateway")
	wantLines(t, "upstream", up, "least_conn;", "server 127.0.0.1:18080;", "keepalive 32;", "keepalive_timeout 60s;")
	if strings.Count(up, "server ") != 1 || strings.Contains(up, "max_fails") {
		t.Errorf("one gateway, one plain server line:\n%s", up)
	}
	loc := block(site, "location /")
	wantLines(t, "location /", loc, "proxy_pass http://mortred_gateway;", "proxy_next_upstream_tries 1;", "proxy_connect_timeout 2s;",
		"proxy_request_buffering off;", "proxy_buffering off;")
	if countLines(site, "location ") != 1 || strings.Contains(site, "non_idempotent;") {
		t.Errorf("site:\n%s", site)
	}
	if !strings.Contains(stdout, "gateway: 127.0.0.1:18080\n") {
		t.Errorf("stdout %q", stdout)
	}
	nginxTest(t, dir)
}

func TestInitEdgeGateways(t *testing.T) {
	t.Run("same models", func(t *testing.T) {
		a := fakeReadyz(t, 200, readyzBody("h1", false, "PPOCR_CLS", "BLAZEFACE"))
		b := fakeReadyz(t, 503, readyzBody("h2", true, "BLAZEFACE", "PPOCR_CLS"))
		dir, site, stdout, stderr, code := initEdge(t, "--gateways", a+","+b, "--max-fails", "3", "--fail-timeout", "30s", "--read-timeout", "45s")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		up := block(site, "upstream mortred_gateway")
		wantLines(t, "upstream", up, "least_conn;", "server "+a+" max_fails=3 fail_timeout=30s;", "server "+b+" max_fails=3 fail_timeout=30s;",
			"keepalive 32;", "keepalive_timeout 15s;")
		if strings.Index(up, "least_conn;") > strings.Index(up, "keepalive 32;") {
			t.Error("least_conn must come before keepalive")
		}
		wantLines(t, "location /", block(site, "location /"), "proxy_pass http://mortred_gateway;", "proxy_connect_timeout 2s;",
			"proxy_next_upstream error timeout;", "proxy_next_upstream_tries 2;", "proxy_next_upstream_timeout 15s;",
			"proxy_request_buffering off;", "proxy_buffering off;", "proxy_read_timeout 45s;", "proxy_send_timeout 45s;")
		if countLines(site, "upstream ") != 1 || countLines(site, "location ") != 1 || strings.Contains(site, "mortred_m_") {
			t.Errorf("one shared upstream only:\n%s", site)
		}
		for _, w := range []string{"gateways: " + a + ", " + b + " (least_conn; max_fails=3 fail_timeout=30s)", "host h1  2 models\n", "host h2  2 models, draining\n", "every gateway lists the same models"} {
			if !strings.Contains(stdout, w) {
				t.Errorf("stdout lacks %q:\n%s", w, stdout)
			}
		}
		nginxTest(t, dir)
	})

	t.Run("different models", func(t *testing.T) {
		a := fakeReadyz(t, 200, readyzBody("h1", false, "PPOCR_CLS", "BLAZEFACE", "SR.x2"))
		b := fakeReadyz(t, 200, readyzBody("h2", false, "PPOCR_CLS", "BLAZEFACE"))
		c := fakeReadyz(t, 200, readyzBody("h3", false, "PPOCR_CLS", "SR.x2", "U2NET"))
		dir, site, stdout, stderr, code := initEdge(t, "--gateways", a+","+b+","+c)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		wantLines(t, "shared upstream", block(site, "upstream mortred_gateway"),
			"server "+a+" max_fails=2 fail_timeout=10s;", "server "+b+" max_fails=2 fail_timeout=10s;", "server "+c+" max_fails=2 fail_timeout=10s;")
		wantLines(t, "BLAZEFACE's upstream", block(site, "upstream mortred_m_BLAZEFACE"), "least_conn;",
			"server "+a+" max_fails=2 fail_timeout=10s;", "server "+b+" max_fails=2 fail_timeout=10s;", "keepalive 32;", "keepalive_timeout 5s;")
		wantLines(t, "SR.x2's upstream", block(site, "upstream mortred_m_SR_x2"),
			"server "+a+" max_fails=2 fail_timeout=10s;", "server "+c+" max_fails=2 fail_timeout=10s;")
		// A model on one gateway: a lone server, whose max_fails Nginx ignores.
		wantLines(t, "U2NET's upstream", block(site, "upstream mortred_m_U2NET"), "server "+c+";")
		if block(site, "upstream mortred_m_PPOCR_CLS") != "" || strings.Contains(site, "location /v1/models/PPOCR_CLS/") {
			t.Error("PPOCR_CLS is on every gateway: the shared upstream serves it")
		}
		for id, want := range map[string][]string{
			"BLAZEFACE": {"proxy_pass http://mortred_m_BLAZEFACE;", "proxy_next_upstream_tries 2;"},
			"SR.x2":     {"proxy_pass http://mortred_m_SR_x2;", "proxy_next_upstream_tries 2;"},
			"U2NET":     {"proxy_pass http://mortred_m_U2NET;", "proxy_next_upstream_tries 1;"},
		} {
			loc := block(site, "location /v1/models/"+id+"/")
			wantLines(t, "location of "+id, loc, append(want, "proxy_connect_timeout 2s;", "proxy_next_upstream error timeout;",
				"proxy_next_upstream_timeout 15s;", "proxy_request_buffering off;", "proxy_buffering off;", `proxy_set_header Connection "";`)...)
		}
		wantLines(t, "location /", block(site, "location /"), "proxy_pass http://mortred_gateway;", "proxy_next_upstream_tries 3;")
		for _, w := range []string{"/v1/models/BLAZEFACE/  mortred_m_BLAZEFACE  " + a + ", " + b + "\n", "/v1/models/U2NET/  mortred_m_U2NET  " + c + "\n"} {
			if !strings.Contains(stdout, w) {
				t.Errorf("stdout lacks %q:\n%s", w, stdout)
			}
		}
		nginxTest(t, dir)

		// --json says the same.
		_, _, stdout, stderr, code = initEdge(t, "--json", "--gateways", a+","+b+","+c)
		var j struct {
			NginxConf      string   `json:"nginx_conf"`
			Gateways       []string `json:"gateways"`
			ReadyzAsked    bool     `json:"readyz_asked"`
			ModelUpstreams []struct {
				Model, Upstream, Location string
				Gateways                  []string
			} `json:"model_upstreams"`
			Readyz []struct {
				Addr, Host string
				Models     []string
			} `json:"readyz"`
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &j) != nil {
			t.Fatalf("--json: %d %s %s", code, stdout, stderr)
		}
		if !j.ReadyzAsked || !slices.Equal(j.Gateways, []string{a, b, c}) || len(j.ModelUpstreams) != 3 || len(j.Readyz) != 3 ||
			j.ModelUpstreams[1].Model != "SR.x2" || j.ModelUpstreams[1].Upstream != "mortred_m_SR_x2" || j.ModelUpstreams[1].Location != "/v1/models/SR.x2/" ||
			!slices.Equal(j.ModelUpstreams[1].Gateways, []string{a, c}) || !slices.Equal(j.Readyz[2].Models, []string{"PPOCR_CLS", "SR.x2", "U2NET"}) {
			t.Fatalf("--json: %s", stdout)
		}
	})

	t.Run("an unreachable gateway", func(t *testing.T) {
		a := fakeReadyz(t, 200, readyzBody("h1", false, "A"))
		dead := refusedAddr(t)
		junk := fakeReadyz(t, 200, "not json")
		dir, _, _, stderr, code := initEdge(t, "--gateways", a+","+dead+","+junk)
		if code != 1 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, w := range []string{"gateway " + dead + ": GET http://" + dead + "/readyz: connection refused", "gateway " + junk + ": GET http://" + junk + "/readyz: the answer is not the readiness JSON", "--offline"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		if strings.Contains(stderr, "gateway "+a+":") {
			t.Errorf("the good gateway is blamed:\n%s", stderr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("a failed init-edge left %s behind (%v)", dir, err)
		}
	})

	t.Run("offline", func(t *testing.T) {
		// Nothing listens: --offline asks no one.
		dead1, dead2 := refusedAddr(t), "[::1]:1"
		dir, site, stdout, stderr, code := initEdge(t, "--gateways", dead1+","+dead2, "--offline")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		wantLines(t, "upstream", block(site, "upstream mortred_gateway"), "server "+dead1+" max_fails=2 fail_timeout=10s;", "server [::1]:1 max_fails=2 fail_timeout=10s;")
		if countLines(site, "upstream ") != 1 || countLines(site, "location ") != 1 {
			t.Errorf("offline: one shared upstream:\n%s", site)
		}
		if !strings.Contains(stdout, "offline: /readyz not asked; every gateway is assumed to serve every model") {
			t.Errorf("stdout %q", stdout)
		}
		nginxTest(t, dir)
	})
}

// TestManualEdgeExamples: the upstreams docs/mortredctl.md shows under
// "Several gateways" are what init-edge writes for those gateways.
func TestManualEdgeExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "mortredctl.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	if i := strings.Index(section, "## Several gateways"); i >= 0 {
		section = section[i:]
	} else {
		t.Fatal("docs/mortredctl.md has no section \"Several gateways\"")
	}
	var examples []string
	for rest := section; ; {
		i := strings.Index(rest, "```nginx\n")
		if i < 0 {
			break
		}
		rest = rest[i+len("```nginx\n"):]
		j := strings.Index(rest, "```")
		if j < 0 {
			t.Fatal("an unclosed nginx block")
		}
		examples, rest = append(examples, rest[:j]), rest[j:]
	}
	if len(examples) != 2 {
		t.Fatalf("%d nginx examples under \"Several gateways\", want 2 (same models; a model on one host)", len(examples))
	}

	// Every gateway serves the same models: one upstream.
	_, site, _, stderr, code := initEdge(t, "--offline", "--gateways", "h1:8080,h2:8080")
	if code != 0 {
		t.Fatal(stderr)
	}
	if got := block(site, "upstream mortred_gateway"); strings.TrimSpace(got) != strings.TrimSpace(examples[0]) {
		t.Errorf("the manual's shared upstream:\n%s\ninit-edge writes:\n%s", examples[0], got)
	}

	// BLAZEFACE only on h1.
	a := fakeReadyz(t, 200, readyzBody("h1", false, "PPOCR_CLS", "BLAZEFACE"))
	b := fakeReadyz(t, 200, readyzBody("h2", false, "PPOCR_CLS"))
	_, site, _, stderr, code = initEdge(t, "--gateways", a+","+b)
	if code != 0 {
		t.Fatal(stderr)
	}
	site = strings.NewReplacer(a, "h1:8080", b, "h2:8080").Replace(site)
	if !strings.Contains(site, examples[1]) {
		t.Errorf("the manual's per-model upstream:\n%s\nis not in what init-edge writes:\n%s", examples[1], site)
	}
}
