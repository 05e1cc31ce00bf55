package ctl

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"
)

type edgeParams struct {
	Mode        string
	ServerName  string
	Listen      int
	Cert, Key   string
	Dir         string
	MaxBodyMB   int
	ACMEWebroot string
	// Gateways are the gateways' HOST:PORT, in the order given; one
	// (--gateway-addr, default the global --gateway) unless --gateways.
	Gateways []string
	// Upstreams[0] is the shared upstream of location /; the rest are
	// per-model upstreams (planUpstreams).
	Upstreams []edgeUpstream
}

// PerModel reports whether some models have their own upstream.
func (p edgeParams) PerModel() bool { return len(p.Upstreams) > 1 }

// stringFlag is a string flag that records whether the command line set it.
type stringFlag struct {
	value string
	set   bool
}

func (f *stringFlag) String() string     { return f.value }
func (f *stringFlag) Set(s string) error { f.value, f.set = s, true; return nil }

func (c *CLI) initEdge(args []string) error {
	p := edgeParams{Listen: 443, Dir: "edge", MaxBodyMB: 64, ACMEWebroot: "/var/www/letsencrypt"}
	gatewayAddr, gateways := stringFlag{value: c.G.Gateway}, stringFlag{}
	maxFails, failTimeout, offline, readTimeout := 2, 10*time.Second, false, 330*time.Second
	pos, err := c.subFlags("init-edge", args, func(fs *flag.FlagSet) {
		fs.StringVar(&p.Mode, "mode", "", "lan (self-signed certificate made here), acme (Let's Encrypt paths) or files (--cert/--key)")
		fs.StringVar(&p.ServerName, "server-name", "", "the name clients use (default: this host's name)")
		fs.IntVar(&p.Listen, "listen", p.Listen, "TLS port")
		fs.Var(&gatewayAddr, "gateway-addr", "the one gateway Nginx forwards to (default: the global --gateway)")
		fs.Var(&gateways, "gateways", "several gateways, HOST:PORT,HOST:PORT,... (one per host); instead of --gateway-addr")
		fs.IntVar(&maxFails, "max-fails", maxFails, "with several gateways: failed tries within --fail-timeout that take a gateway out (0: never)")
		fs.DurationVar(&failTimeout, "fail-timeout", failTimeout, "with several gateways: the window of --max-fails and how long a failed gateway stays out (whole seconds)")
		fs.DurationVar(&readTimeout, "read-timeout", readTimeout, "proxy_read_timeout and proxy_send_timeout, whole seconds: above the longest inference and job wait (300 s); a request sent to a host whose link is cut fails after it")
		fs.BoolVar(&offline, "offline", false, "with --gateways: do not ask their /readyz; every gateway is assumed to serve every model")
		fs.StringVar(&p.Cert, "cert", "", "certificate chain (PEM), with --mode files")
		fs.StringVar(&p.Key, "key", "", "private key (PEM), with --mode files")
		fs.StringVar(&p.Dir, "out", p.Dir, "directory to write the configuration into")
		fs.IntVar(&p.MaxBodyMB, "max-body-mb", p.MaxBodyMB, "client_max_body_size in MB (match the gateway's request_size_limit_mb)")
	})
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError{"init-edge takes no positional arguments"}
	}
	if p.Listen < 1 || p.Listen > 65535 {
		return usageError{"--listen must be a port number"}
	}
	askReadyz := false
	switch {
	case gateways.set && gatewayAddr.set:
		return usageError{"give --gateways (several) or --gateway-addr (one), not both"}
	case gateways.set:
		if p.Gateways, err = parseGateways("--gateways", gateways.value); err != nil {
			return err
		}
		askReadyz = !offline
	case offline:
		return usageError{"--offline goes with --gateways (one gateway from --gateway-addr is never asked)"}
	default:
		if p.Gateways, err = parseGateways("--gateway-addr", gatewayAddr.value); err != nil {
			return err
		}
		if len(p.Gateways) != 1 {
			return usageError{"--gateway-addr takes one HOST:PORT; list several with --gateways"}
		}
	}
	if maxFails < 0 {
		return usageError{"--max-fails must be 0 (never take a gateway out) or more"}
	}
	if readTimeout < time.Second || readTimeout%time.Second != 0 {
		return usageError{"--read-timeout must be whole seconds, at least 1s"}
	}
	if failTimeout < time.Second || failTimeout%time.Second != 0 {
		return usageError{"--fail-timeout must be whole seconds, at least 1s (Nginx's fail_timeout)"}
	}
	switch p.Mode {
	case "lan", "acme", "files":
	default:
		return usageError{"--mode must be lan, acme or files"}
	}
	if p.ServerName == "" {
		if p.Mode == "acme" {
			return usageError{"--mode acme needs --server-name (the public DNS name the certificate is for)"}
		}
		p.ServerName, _ = os.Hostname()
	}
	if strings.ContainsAny(p.ServerName, " ;{}'\"\n\t$") {
		return usageError{"--server-name has characters Nginx would misread"}
	}
	if p.Mode == "files" && (p.Cert == "" || p.Key == "") {
		return usageError{"--mode files needs --cert and --key"}
	}
	// Ask before writing anything: a gateway that cannot answer leaves no
	// half-made edge behind.
	var answers []gatewayModels
	if askReadyz {
		if answers, err = askGateways(context.Background(), readyzClient, p.Gateways, readyzTimeout); err != nil {
			return fmt.Errorf("asking the gateways which models they serve (GET /readyz):\n%v\nstart them or fix --gateways; --offline writes the edge without asking (every gateway then gets every model)", err)
		}
	}
	if p.Upstreams, err = planUpstreams(p.Gateways, answers, maxFails, int(failTimeout/time.Second)); err != nil {
		return err
	}
	for i := range p.Upstreams {
		p.Upstreams[i].ReadTimeoutS = int(readTimeout / time.Second)
	}
	if p.Dir, err = filepath.Abs(p.Dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(p.Dir, "tmp"), 0o755); err != nil {
		return err
	}
	switch p.Mode {
	case "files":
		for _, f := range []*string{&p.Cert, &p.Key} {
			if *f, err = filepath.Abs(*f); err != nil {
				return err
			}
			if _, err := os.ReadFile(*f); err != nil {
				return fmt.Errorf("cannot read %s: %v", *f, err)
			}
		}
	case "lan":
		p.Cert, p.Key = filepath.Join(p.Dir, "cert.pem"), filepath.Join(p.Dir, "key.pem")
		if err := selfSigned(p.ServerName, p.Cert, p.Key); err != nil {
			return fmt.Errorf("making the self-signed certificate: %v", err)
		}
	case "acme":
		p.Cert = "/etc/letsencrypt/live/" + p.ServerName + "/fullchain.pem"
		p.Key = "/etc/letsencrypt/live/" + p.ServerName + "/privkey.pem"
	}
	var site, main strings.Builder
	if err := siteTmpl.Execute(&site, p); err != nil {
		return err
	}
	if err := mainTmpl.Execute(&main, p); err != nil {
		return err
	}
	sitePath, mainPath := filepath.Join(p.Dir, "mortred-edge.conf"), filepath.Join(p.Dir, "nginx.conf")
	if err := os.WriteFile(sitePath, []byte(site.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(mainPath, []byte(main.String()), 0o644); err != nil {
		return err
	}
	if c.G.JSON {
		return writeEdgeJSON(c.Out, p, sitePath, mainPath, askReadyz, answers)
	}
	writeEdgeGateways(c.Out, p, gateways.set && offline, answers)
	fmt.Fprintf(c.Out, `wrote %s (server blocks: include it in your nginx http {} section)
wrote %s (a standalone configuration)
check:  nginx -t -p %s -c %s
run:    nginx -p %s -c %s
then:   curl --cacert %s https://%s:%d/healthz
`, sitePath, mainPath, p.Dir, mainPath, p.Dir, mainPath, p.Cert, p.ServerName, p.Listen)
	if p.Mode == "acme" {
		fmt.Fprintf(c.Out, "acme:   certbot certonly --webroot -w %s -d %s  (port 80 must reach this host)\n", p.ACMEWebroot, p.ServerName)
	}
	return nil
}

// writeEdgeGateways prints which gateways the edge forwards to and how
// the models are split among them.
func writeEdgeGateways(w io.Writer, p edgeParams, offline bool, answers []gatewayModels) {
	if len(p.Gateways) == 1 && answers == nil && !offline {
		fmt.Fprintf(w, "gateway: %s\n", p.Gateways[0])
		return
	}
	shared := p.Upstreams[0]
	fmt.Fprintf(w, "gateways: %s (least_conn", strings.Join(p.Gateways, ", "))
	if len(p.Gateways) > 1 {
		fmt.Fprintf(w, "; max_fails=%d fail_timeout=%ds", shared.MaxFails, shared.FailTimeoutS)
	}
	fmt.Fprintln(w, ")")
	if offline {
		fmt.Fprintln(w, "offline: /readyz not asked; every gateway is assumed to serve every model (one shared upstream)")
		return
	}
	for _, g := range answers {
		state := ""
		if g.Draining {
			state = ", draining"
		}
		host := g.Host
		if host == "" {
			host = "-"
		}
		models := "models"
		if len(g.Models) == 1 {
			models = "model"
		}
		fmt.Fprintf(w, "  %s  host %s  %d %s%s\n", g.Addr, host, len(g.Models), models, state)
	}
	if !p.PerModel() {
		fmt.Fprintln(w, "every gateway lists the same models: one shared upstream ("+sharedUpstream+")")
		return
	}
	fmt.Fprintln(w, "the gateways list different models; per-model upstreams (the rest go to "+sharedUpstream+"):")
	for _, u := range p.Upstreams[1:] {
		fmt.Fprintf(w, "  %s  %s  %s\n", u.Location(), u.Name, strings.Join(u.Servers, ", "))
	}
}

// writeEdgeJSON prints the paths written, the gateways, whether their
// /readyz was asked, and the per-model upstreams ([] when none).
func writeEdgeJSON(w io.Writer, p edgeParams, sitePath, mainPath string, asked bool, answers []gatewayModels) error {
	type modelUpstream struct {
		Model    string   `json:"model"`
		Upstream string   `json:"upstream"`
		Location string   `json:"location"`
		Gateways []string `json:"gateways"`
	}
	type gateway struct {
		Addr     string   `json:"addr"`
		Host     string   `json:"host,omitempty"`
		Draining bool     `json:"draining"`
		Models   []string `json:"models"`
	}
	out := struct {
		Site           string          `json:"site"`
		NginxConf      string          `json:"nginx_conf"`
		Cert           string          `json:"cert"`
		Key            string          `json:"key"`
		Gateways       []string        `json:"gateways"`
		ReadyzAsked    bool            `json:"readyz_asked"`
		Answers        []gateway       `json:"readyz,omitempty"`
		ModelUpstreams []modelUpstream `json:"model_upstreams"`
	}{Site: sitePath, NginxConf: mainPath, Cert: p.Cert, Key: p.Key, Gateways: p.Gateways, ReadyzAsked: asked, ModelUpstreams: []modelUpstream{}}
	for _, g := range answers {
		out.Answers = append(out.Answers, gateway{Addr: g.Addr, Host: g.Host, Draining: g.Draining, Models: append([]string{}, g.Models...)})
	}
	for _, u := range p.Upstreams[1:] {
		out.ModelUpstreams = append(out.ModelUpstreams, modelUpstream{Model: u.Model, Upstream: u.Name, Location: u.Location(), Gateways: u.Servers})
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// selfSigned writes a P-256 certificate for name (and loopback) valid for
// 825 days, the longest clients accept.
func selfSigned(name, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"mortred edge (self-signed)"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(825 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name, "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

var funcs = template.FuncMap{"itoa": strconv.Itoa, "join": strings.Join}

// siteTmpl is the server blocks. One upstream block ("upstream") and one
// set of proxy settings ("proxy") serve the shared upstream and every
// per-model one alike; a single gateway is a list of one.
var siteTmpl = template.Must(template.New("site").Funcs(funcs).Parse(`{{define "upstream"}}
upstream {{.Name}} {
    least_conn;
{{- range .Servers}}
    server {{.}}{{if gt (len $.Servers) 1}} max_fails={{$.MaxFails}} fail_timeout={{$.FailTimeoutS}}s{{end}};
{{- end}}
    keepalive 32;
    keepalive_timeout {{.KeepaliveS}}s;
}
{{- end}}
{{- define "proxy"}}
        proxy_pass http://{{.Name}};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto https;
        # Stream bodies both ways: large images and long job waits.
        proxy_request_buffering off;
        proxy_buffering off;
        proxy_read_timeout {{.ReadTimeoutS}}s;
        proxy_send_timeout {{.ReadTimeoutS}}s;
        # A host that is down is noticed in 2 s; what may then go to the
        # next gateway is explained above the first location.
        proxy_connect_timeout 2s;
        proxy_next_upstream error timeout;
        proxy_next_upstream_tries {{len .Servers}};
        proxy_next_upstream_timeout 15s;
{{- end -}}
# mortred TLS edge ({{.Mode}}), written by mortredctl init-edge.
# Nginx terminates TLS and forwards plain HTTP to the mortred gateway{{if gt (len .Gateways) 1}}s{{end}}
# {{join .Gateways ", "}}.
#
# In each upstream, least_conn sends a request to the gateway with the
# fewest active connections from this Nginx worker (a job waiting for its
# result holds one). With more than one server, a gateway that fails
# max_fails times within fail_timeout (an error or timeout while
# connecting, sending the request or reading the answer's head) is left
# out for fail_timeout, then tried again; Nginx ignores both for a lone
# server, which is never left out.
# Nginx keeps up to 32 idle connections per worker and closes one after
# keepalive_timeout: at most 60 s, below the gateway's idle timeout
# (default 90 s, [gateway] idle_timeout_ms: keep it above 60 s), so Nginx
# never sends a request on a connection the gateway is closing. With
# several gateways it is also at most half of fail_timeout: the idle
# connections to a host whose link was cut look alive, and a request sent
# on one would wait proxy_read_timeout and fail (it was sent, so it cannot
# move); they expire while the host is left out, and Nginx's next try
# opens a new connection, which fails within proxy_connect_timeout and
# moves on.
{{- if .PerModel}}
#
# The gateways' GET /readyz showed that they do not all serve the same
# models. A model only some of them serve has its own upstream of just
# those and a location /v1/models/ID/ (its inferences and its jobs);
# everything else, the legacy server_uri paths included, goes to
# {{(index .Upstreams 0).Name}}. Run init-edge again when a host's models change.
{{- end}}
{{- range .Upstreams}}
{{if .Model}}
# {{.Model}}: only on {{join .Servers ", "}}.
{{- end}}
{{- template "upstream" .}}
{{- end}}
{{if eq .Mode "acme"}}
server {
    listen 80;
    server_name {{.ServerName}};
    location /.well-known/acme-challenge/ { root {{.ACMEWebroot}}; }
    location / { return 301 https://$host$request_uri; }
}
{{end}}
server {
    listen {{.Listen}} ssl;
    server_name {{.ServerName}};

    ssl_certificate     {{.Cert}};
    ssl_certificate_key {{.Key}};
    ssl_protocols       TLSv1.2 TLSv1.3;
    ssl_session_cache   shared:mortred_edge:10m;
    ssl_session_timeout 1h;

    client_max_body_size {{.MaxBodyMB}}m;

    # When a request goes to the next gateway (proxy_next_upstream error
    # timeout; at most as many tries as there are gateways, and no new one
    # once 15 s have passed since the first began):
    # - A request that never reached a gateway (connection refused, or not
    #   made within proxy_connect_timeout) goes to the next one, a POST too.
    # - Once a request has been sent, Nginx passes a POST (or LOCK, PATCH)
    #   on only if proxy_next_upstream lists non_idempotent. This file never
    #   lists it, so an inference or a job submission is never sent twice.
    # - With proxy_request_buffering off Nginx streams a body to the gateway
    #   as it arrives, and cannot pass a request on once it started sending
    #   the body.
    # - Nothing is passed on once part of the answer has gone to the client.
    # So after it was sent, only an idempotent request without a body (a GET:
    # a job poll, /healthz) may go to the next gateway.
    location / {
{{- template "proxy" (index .Upstreams 0)}}
    }
{{- range (slice .Upstreams 1)}}

    location {{.Location}} {
{{- template "proxy" .}}
    }
{{- end}}
}
`))

var mainTmpl = template.Must(template.New("main").Parse(`# Standalone Nginx for the mortred edge, written by mortredctl init-edge.
# Run: nginx -p {{.Dir}} -c {{.Dir}}/nginx.conf
worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;

events { worker_connections 1024; }

http {
    access_log {{.Dir}}/access.log;
    client_body_temp_path {{.Dir}}/tmp/client_body;
    proxy_temp_path       {{.Dir}}/tmp/proxy;
    fastcgi_temp_path     {{.Dir}}/tmp/fastcgi;
    uwsgi_temp_path       {{.Dir}}/tmp/uwsgi;
    scgi_temp_path        {{.Dir}}/tmp/scgi;
    include {{.Dir}}/mortred-edge.conf;
}
`))
