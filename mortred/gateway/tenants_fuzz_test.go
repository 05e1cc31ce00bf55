package gateway

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// FuzzAnswerItems feeds a hostile model server's X-Mortred-Items (and
// X-Mortred-Tenant) values to the gateway's accounting: it never panics,
// never charges a negative count or more than a model server can accept,
// charges exactly a single well-formed decimal value and nothing for
// anything else, and leaves neither header in the client's answer.
func FuzzAnswerItems(f *testing.F) {
	for _, s := range []string{"1", "32", "0", "4096", "4097", "-1", "+3", " 2", "2 ", "0x10", "1e3", "", "99999999999999999999", "3\x00", "٣", "2,3"} {
		f.Add(s, "", false)
		f.Add(s, "other-tenant", true)
	}
	f.Fuzz(func(t *testing.T, items, tenant string, twice bool) {
		h := http.Header{"Content-Type": {"application/json"}}
		h[envelope.HeaderItems] = []string{items}
		if twice {
			h[envelope.HeaderItems] = append(h[envelope.HeaderItems], items)
		}
		if tenant != "" {
			h[envelope.HeaderTenant] = []string{tenant}
		}
		n := answerItems(h)
		if n < 0 || n > config.MaxRequestItemsCap {
			t.Fatalf("charged %d for %q", n, items)
		}
		want := int64(0)
		if v, err := strconv.ParseUint(items, 10, 64); err == nil && !twice && v <= config.MaxRequestItemsCap {
			want = int64(v)
		}
		if n != want {
			t.Fatalf("charged %d for %q (twice %v), want %d", n, items, twice, want)
		}
		if _, ok := h[envelope.HeaderItems]; ok {
			t.Fatal("X-Mortred-Items left in the client's answer")
		}
		if _, ok := h[envelope.HeaderTenant]; ok {
			t.Fatal("X-Mortred-Tenant left in the client's answer")
		}
		if h.Get("Content-Type") != "application/json" {
			t.Fatal("another header was touched")
		}
	})
}

// FuzzUpstreamTenant: whatever tenant header (and Connection header) a
// client sends, the model server sees exactly the gateway's tenant: the
// key's id, or none (operator, keys off).
func FuzzUpstreamTenant(f *testing.F) {
	for _, s := range []string{"team-a", "", "operator", "a, b", "X-Mortred-Tenant"} {
		f.Add(s, "", "team-b")
		f.Add(s, "X-Mortred-Tenant", "")
		f.Add(s, "close", "team-a")
	}
	f.Fuzz(func(t *testing.T, claimed, connection, tenant string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/models/M/jobs/j1", nil)
		r.RemoteAddr = "203.0.113.9:4000"
		r.Header[envelope.HeaderTenant] = []string{claimed}
		r.Header["X-Mortred-tenant"] = []string{claimed} // not canonical: still a client's claim
		if connection != "" {
			r.Header["Connection"] = []string{connection}
		}
		h := http.Header{}
		upstreamHeader(h, r, forwardedFor(r, netip.Addr.IsLoopback), &upstreamState{}, tenant)
		got := h[envelope.HeaderTenant]
		for k := range h {
			if strings.EqualFold(k, envelope.HeaderTenant) && k != envelope.HeaderTenant {
				t.Fatalf("client's %s reached the model server", k)
			}
		}
		switch {
		case tenant == "" && got != nil:
			t.Fatalf("no tenant, the model server got %q", got)
		case tenant != "" && (len(got) != 1 || got[0] != tenant):
			t.Fatalf("tenant %q, the model server got %q", tenant, got)
		}
	})
}

func TestClientAddr(t *testing.T) {
	for _, c := range []struct{ remote, prior, want string }{
		{"203.0.113.7:5000", "", "203.0.113.7"},
		{"203.0.113.7:5000", "10.0.0.1", "203.0.113.7"}, // a client's own claim is not believed
		{"127.0.0.1:5000", "198.51.100.2", "198.51.100.2"},
		{"127.0.0.1:5000", "10.0.0.1, 198.51.100.2", "198.51.100.2"},
		{"127.0.0.1:5000", "not-an-address", "127.0.0.1"},
		{"127.0.0.1:5000", "", "127.0.0.1"},
		{"[::ffff:203.0.113.8]:5000", "", "203.0.113.8"},
		{"[2001:db8::1]:5000", "", "2001:db8::1"},
	} {
		r := httptest.NewRequest("POST", "/x", nil)
		r.RemoteAddr = c.remote
		if c.prior != "" {
			r.Header.Set("X-Forwarded-For", c.prior)
		}
		if got := clientAddr(r, netip.Addr.IsLoopback); got != c.want {
			t.Errorf("remote %s prior %q: %q, want %q", c.remote, c.prior, got, c.want)
		}
	}
}

func TestDoneStatus(t *testing.T) {
	for _, c := range []struct {
		code           int
		finished, gone bool
		want           int
	}{
		{200, true, false, 200},
		{0, true, false, 200},
		{429, true, false, 429},
		{200, true, true, 499},
		{0, false, true, 499},
		{200, false, false, 502},
	} {
		if got := doneStatus(c.code, c.finished, c.gone); got != c.want {
			t.Errorf("doneStatus(%d, finished %v, gone %v) = %d, want %d", c.code, c.finished, c.gone, got, c.want)
		}
	}
}
