// Package nginxconf turns the sample Nginx configurations under conf/nginx
// into ones a test or benchmark runs: the sample's own text, with only its
// addresses replaced by loopback ports, inside a main context that keeps
// every file nginx writes in one scratch folder. The samples the manuals
// show are then the configurations that were tested.
package nginxconf

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
)

// RoutersSample is the sample for several routers, relative to the
// module root.
const RoutersSample = "conf/nginx/mentat-routers.conf"

// Read returns a sample's text; rel is relative to the module root,
// which is found from this source file, so it works from any package's
// test directory and from a benchmark run in the checkout.
func Read(rel string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("nginxconf: cannot locate the module root")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", rel))
	return string(b), err
}

var (
	serverLine = regexp.MustCompile(`(?m)^(\s*)server 127\.0\.0\.1:\d+( [^;\n]*)?;\n`)
	listenLine = regexp.MustCompile(`(?m)^(\s*)listen 127\.0\.0\.1:\d+;`)
)

// Upstreams rewrites sample for one listening port and the given upstream
// ports: its one run of `server 127.0.0.1:PORT …;` lines becomes one line
// per port, each with the parameters of the sample's first, and its one
// `listen 127.0.0.1:PORT;` listens on listen. Anything else in the sample
// is kept as it is; a sample without exactly those lines is an error, so
// a sample edited out of shape fails the tests that run it.
func Upstreams(sample string, listen int, ports []int) (string, error) {
	servers := serverLine.FindAllStringSubmatchIndex(sample, -1)
	if len(servers) == 0 || len(ports) == 0 {
		return "", fmt.Errorf("nginxconf: the sample has no `server 127.0.0.1:PORT` lines, or no ports were given")
	}
	for i := 1; i < len(servers); i++ {
		if servers[i][0] != servers[i-1][1] {
			return "", fmt.Errorf("nginxconf: the sample's server lines are not one run")
		}
	}
	if n := len(listenLine.FindAllString(sample, -1)); n != 1 {
		return "", fmt.Errorf("nginxconf: the sample has %d `listen 127.0.0.1:PORT;` lines, want 1", n)
	}
	first := servers[0]
	indent, params := sample[first[2]:first[3]], ""
	if first[4] >= 0 {
		params = sample[first[4]:first[5]]
	}
	var lines strings.Builder
	for _, p := range ports {
		fmt.Fprintf(&lines, "%sserver 127.0.0.1:%d%s;\n", indent, p, params)
	}
	out := sample[:first[0]] + lines.String() + sample[servers[len(servers)-1][1]:]
	return listenLine.ReplaceAllString(out, fmt.Sprintf("${1}listen 127.0.0.1:%d;", listen)), nil
}

// Main is a whole nginx.conf around http, the body of the http context:
// in the foreground as one process (so a CPU pin and its memory are those
// of the one worker), with its pid, error log and temp files under tmp and
// no access log.
func Main(tmp, http string) string {
	return fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 65536;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events {
    worker_connections 32768;
}
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[2]s}
`, tmp, http)
}
