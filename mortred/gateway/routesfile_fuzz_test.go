package gateway

import (
	"net"
	"net/url"
	"strconv"
	"testing"
)

// FuzzRoutesFile: the routes file parser never panics, and a file it
// accepts holds only addresses a URL reads back as exactly that host and
// port (1 to 65535), distinct within a model, and versions fit for a
// header value.
func FuzzRoutesFile(f *testing.F) {
	for _, s := range []string{
		`{"generation":7,"models":{"PPOCR_CLS":{"addr":"127.0.0.1:41234","version":"v2","instance":2,"draining":[{"addr":"127.0.0.1:9002","version":"v1","instance":1}]}}}`,
		`{"models":{"A":{"addr":"[::1]:8080"},"B":{"addr":"localhost:1"}}}`,
		`{"models":{"A":{"addr":"a/b:80"}}}`,
		`{"models":{"A":{"addr":"127.0.0.1:1","draining":[{"addr":"127.0.0.1:1"}]}}}`,
		`{"models":{"A":{"addr":"h:80","version":"v\u0000"}}}`,
		`{"models":{}} x`,
		`null`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rf, err := parseRoutes(data)
		if err != nil {
			return
		}
		for id, e := range rf.Models {
			if len(e.Draining) > maxDraining {
				t.Fatalf("model %q: %d draining instances accepted", id, len(e.Draining))
			}
			seen := map[string]bool{}
			for _, in := range append([]instanceEntry{e.instanceEntry}, e.Draining...) {
				checkAccepted(t, in)
				if seen[in.Addr] {
					t.Fatalf("model %q: address %q accepted twice", id, in.Addr)
				}
				seen[in.Addr] = true
			}
		}
	})
}

func checkAccepted(t *testing.T, in instanceEntry) {
	t.Helper()
	host, port, err := net.SplitHostPort(in.Addr)
	if err != nil || host == "" {
		t.Fatalf("accepted address %q is not host:port: %v", in.Addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		t.Fatalf("accepted address %q: port %q", in.Addr, port)
	}
	u, err := url.Parse("http://" + in.Addr + "/ready")
	if err != nil || u.Host != in.Addr || u.Path != "/ready" || u.Port() != port {
		t.Fatalf("accepted address %q does not read back from a URL: %v %+v", in.Addr, err, u)
	}
	for i := 0; i < len(in.Version); i++ {
		if c := in.Version[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			t.Fatalf("accepted version %q holds byte %#x", in.Version, c)
		}
	}
	if in.Instance < 0 {
		t.Fatalf("accepted instance %d", in.Instance)
	}
}
