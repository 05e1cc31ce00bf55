package ctl

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
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
	Gateway     string
	Cert, Key   string
	Dir         string
	MaxBodyMB   int
	ACMEWebroot string
}

func (c *CLI) initEdge(args []string) error {
	p := edgeParams{Listen: 443, Gateway: c.G.Gateway, Dir: "edge", MaxBodyMB: 64, ACMEWebroot: "/var/www/letsencrypt"}
	pos, err := c.subFlags("init-edge", args, func(fs *flag.FlagSet) {
		fs.StringVar(&p.Mode, "mode", "", "lan (self-signed certificate made here), acme (Let's Encrypt paths) or files (--cert/--key)")
		fs.StringVar(&p.ServerName, "server-name", "", "the name clients use (default: this host's name)")
		fs.IntVar(&p.Listen, "listen", p.Listen, "TLS port")
		fs.StringVar(&p.Gateway, "gateway-addr", p.Gateway, "the gateway Nginx forwards to")
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
	if _, _, err := net.SplitHostPort(p.Gateway); err != nil {
		return usageError{"--gateway-addr must be HOST:PORT"}
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
	if p.Dir, err = filepath.Abs(p.Dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(p.Dir, "tmp"), 0o755); err != nil {
		return err
	}
	switch p.Mode {
	case "files":
		if p.Cert == "" || p.Key == "" {
			return usageError{"--mode files needs --cert and --key"}
		}
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
	default:
		return usageError{"--mode must be lan, acme or files"}
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
		fmt.Fprintf(c.Out, "{\"site\":%q,\"nginx_conf\":%q,\"cert\":%q,\"key\":%q}\n", sitePath, mainPath, p.Cert, p.Key)
		return nil
	}
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

var funcs = template.FuncMap{"itoa": strconv.Itoa}

var siteTmpl = template.Must(template.New("site").Funcs(funcs).Parse(`# mortred TLS edge ({{.Mode}}), written by mortredctl init-edge.
# Nginx terminates TLS; the gateway at {{.Gateway}} speaks plain HTTP on loopback.
upstream mortred_gateway {
    server {{.Gateway}};
    keepalive 32;
}
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

    location / {
        proxy_pass http://mortred_gateway;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto https;
        # Stream bodies both ways: large images and long job waits.
        proxy_request_buffering off;
        proxy_buffering off;
        proxy_read_timeout 330s;
        proxy_send_timeout 330s;
    }
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
