// Package nginx runs Nginx as the reference reverse proxy: one server
// block per upstream, proxy_pass with proxy_buffering off and HTTP/1.1
// keep-alive to the upstream, one worker, no access log.
package nginx

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/internal/nginxconf"
)

// Nginx is a running nginx. Port maps each upstream name to the port
// nginx listens on for it.
type Nginx struct {
	Proc   *harness.Proc
	Port   map[string]int
	Config string
}

// Start writes a configuration into dir and starts nginx in the
// foreground (master_process off: one process, so a CPU pin and its
// memory are those of the one worker). upstreams maps a name to the
// engine's loopback port.
func Start(ctx context.Context, dir, cpus string, upstreams map[string]int) (*Nginx, error) {
	return StartWith(ctx, dir, cpus, upstreams, nil)
}

// StartWith is Start with extra directives in the `location /` of some
// upstreams (extra maps the name to them, one directive a line, nested
// blocks indented as they should read), after the proxying ones: so a
// benchmark can make Nginx do a proxy's whole job (check a token with if
// and return, rewrite the path, proxy_set_header, add_header). Upstreams
// without extra get exactly Start's configuration. A proxy_set_header
// here does not lose Connection "": both sit in the same location, and
// nginx drops only an outer level's proxy_set_header.
func StartWith(ctx context.Context, dir, cpus string, upstreams map[string]int, extra map[string]string) (*Nginx, error) {
	n := &Nginx{Port: map[string]int{}}
	names := make([]string, 0, len(upstreams))
	for k := range upstreams {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		p, err := harness.FreePort()
		if err != nil {
			return nil, err
		}
		n.Port[name] = p
	}
	tmp := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	n.Config = render(tmp, names, upstreams, n.Port, extra)
	return n, n.run(ctx, tmp, "nginx", dir, cpus, n.Config)
}

// run writes conf into tmp and starts nginx on it, logs in dir, and
// waits for every port of n.
func (n *Nginx) run(ctx context.Context, tmp, name, dir, cpus, conf string) error {
	bin, err := harness.LookNginx()
	if err != nil {
		return err
	}
	path := filepath.Join(tmp, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return err
	}
	n.Proc, err = harness.Start(dir, harness.Spec{Name: name, Bin: bin, Args: []string{"-e", tmp + "/error.log", "-c", path}, CPUs: cpus})
	if err != nil {
		return err
	}
	for _, p := range n.Port {
		if err := harness.WaitListening(ctx, 10*time.Second, name, fmt.Sprintf("127.0.0.1:%d", p), n.Proc); err != nil {
			n.Proc.Stop()
			return err
		}
	}
	return nil
}

// render is the whole nginx.conf: temp paths under tmp, one upstream and
// one server per name, in names' order.
func render(tmp string, names []string, upstreams, ports map[string]int, extra map[string]string) string {
	var servers strings.Builder
	for _, name := range names {
		var more strings.Builder
		if e := strings.Trim(extra[name], "\n"); e != "" {
			for _, line := range strings.Split(e, "\n") {
				if strings.TrimSpace(line) != "" {
					more.WriteString("            " + line)
				}
				more.WriteString("\n")
			}
		}
		fmt.Fprintf(&servers, `
    upstream %[1]s {
        server 127.0.0.1:%[2]d;
        keepalive 256;
        # below enginesim's (uvicorn's) 5 s, so nginx never reuses a
        # connection the engine is closing
        keepalive_timeout 4s;
    }
    server {
        listen 127.0.0.1:%[3]d;
        location / {
            proxy_pass http://%[1]s;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 1800s;
%[4]s        }
    }
`, name, upstreams[name], ports[name], more.String())
	}
	return nginxconf.Main(tmp, `    # Bodies are read whole before forwarding (nginx's default, like the
    # router, which must read a body to find its model), but in memory: a
    # 1 MiB body would otherwise go through a temp file.
    client_max_body_size 128m;
    client_body_buffer_size 2m;
    keepalive_requests 1000000;
`+servers.String())
}

// StartSample runs one of the samples under conf/nginx (nginxconf.Read)
// with its upstream servers replaced by ports and its listen port by a
// free one, named name in Port.
func StartSample(ctx context.Context, dir, cpus, name, sample string, ports []int) (*Nginx, error) {
	listen, err := harness.FreePort()
	if err != nil {
		return nil, err
	}
	http, err := nginxconf.Upstreams(sample, listen, ports)
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, "nginx-"+name)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	n := &Nginx{Port: map[string]int{name: listen}, Config: http}
	return n, n.run(ctx, tmp, "nginx-"+name, dir, cpus, nginxconf.Main(tmp, http))
}

// URL is nginx's base URL for an upstream.
func (n *Nginx) URL(name string) string { return fmt.Sprintf("http://127.0.0.1:%d", n.Port[name]) }

// Stop stops nginx.
func (n *Nginx) Stop() { n.Proc.Stop() }
