package ctl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseGateways(t *testing.T) {
	ok := []struct {
		in   string
		want []string
	}{
		{"h1:8080", []string{"h1:8080"}},
		{"h1:8080, h2.lan:8081 ,10.0.0.3:80", []string{"h1:8080", "h2.lan:8081", "10.0.0.3:80"}},
		{"[::1]:8080,[2001:db8::7]:9000", []string{"[::1]:8080", "[2001:db8::7]:9000"}},
		{"h1:8080,h1:8081", []string{"h1:8080", "h1:8081"}}, // two gateways on one host
	}
	for _, c := range ok {
		got, err := parseGateways("--gateways", c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q → %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, want string }{
		{"", "--gateways: an empty entry"},
		{"h1:8080,", "--gateways: an empty entry"},
		{"h1:8080,,h2:8080", "--gateways: an empty entry"},
		{"h1", `--gateways: "h1" is not HOST:PORT`},
		{"h1:8080,h2", `--gateways: "h2" is not HOST:PORT`},
		{"::1:8080", `"::1:8080" is not HOST:PORT (an IPv6 address goes in brackets`},
		{":8080", `":8080" is not HOST:PORT`},
		{"h1:0", `"h1:0": the port must be a number from 1 to 65535`},
		{"h1:65536", `"h1:65536": the port must be`},
		{"h1:http", `"h1:http": the port must be`},
		{"h1:+80", `"h1:+80": the port must be`},
		{"h;1:80", `"h;1:80": the host must be an IP address or a DNS name`},
		{"[fe80::1%eth0]:80", `"[fe80::1%eth0]:80": the host must be`},
		{"h1:8080,h2:8080,h1:8080", `"h1:8080" is listed twice (also as "h1:8080")`},
		{"H1:8080,h1:8080", `"h1:8080" is listed twice (also as "H1:8080")`},
		{"[::1]:80,[0:0::1]:80", `"[0:0::1]:80" is listed twice (also as "[::1]:80")`},
	}
	for _, c := range bad {
		_, err := parseGateways("--gateways", c.in)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q → %v; want a usage error with %q", c.in, err, c.want)
		}
	}
}

// fakeReadyz is a gateway whose GET /readyz answers status and body.
func fakeReadyz(t *testing.T, status int, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// readyzBody is a /readyz answer listing ids (every other one not ready).
func readyzBody(host string, draining bool, ids ...string) string {
	var ms []string
	for i, id := range ids {
		ms = append(ms, fmt.Sprintf(`{"id":%q,"ready":%t}`, id, i%2 == 0))
	}
	return fmt.Sprintf(`{"ready":%t,"host":%q,"draining":%t,"models":[%s]}`, !draining, host, draining, strings.Join(ms, ","))
}

// refusedAddr is a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	return addr
}

func TestAskGateways(t *testing.T) {
	ready := fakeReadyz(t, 200, readyzBody("h1", false, "B", "A", "B"))
	draining := fakeReadyz(t, 503, readyzBody("h2", true, "C"))
	empty := fakeReadyz(t, 200, `{"ready":true,"host":"h3","draining":false,"models":[]}`)
	got, err := askGateways(context.Background(), readyzClient, []string{ready, draining, empty}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []gatewayModels{
		{Addr: ready, Host: "h1", Models: []string{"A", "B"}},
		{Addr: draining, Host: "h2", Draining: true, Models: []string{"C"}},
		{Addr: empty, Host: "h3"},
	}
	for i := range want {
		if got[i].Addr != want[i].Addr || got[i].Host != want[i].Host || got[i].Draining != want[i].Draining || !slices.Equal(got[i].Models, want[i].Models) {
			t.Errorf("answer %d: %+v; want %+v", i, got[i], want[i])
		}
	}

	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hang.Close)
	bad := []struct{ name, addr, want string }{
		{"refused", refusedAddr(t), "connection refused"},
		{"silent", strings.TrimPrefix(hang.URL, "http://"), "no answer within 300ms"},
		{"not a gateway", fakeReadyz(t, 404, "nope"), "answered 404 Not Found, not 200 or 503"},
		{"unparsable", fakeReadyz(t, 200, "<html>"), "the answer is not the readiness JSON"},
		{"no models list", fakeReadyz(t, 200, `{"ready":true}`), `the answer has no "models" list`},
		{"model without id", fakeReadyz(t, 200, `{"models":[{"ready":true}]}`), `a model without an "id"`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := askGateways(context.Background(), readyzClient, []string{ready, c.addr}, 300*time.Millisecond)
			if err == nil || !strings.Contains(err.Error(), "gateway "+c.addr+": GET http://"+c.addr+"/readyz") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v; want gateway %s named with %q", err, c.addr, c.want)
			}
			if strings.Contains(err.Error(), "gateway "+ready) {
				t.Fatalf("the good gateway is blamed too: %v", err)
			}
		})
	}
	t.Run("every failing gateway is named", func(t *testing.T) {
		a, b := refusedAddr(t), fakeReadyz(t, 500, "")
		_, err := askGateways(context.Background(), readyzClient, []string{a, ready, b}, time.Second)
		if err == nil || !strings.Contains(err.Error(), "gateway "+a+":") || !strings.Contains(err.Error(), "gateway "+b+":") {
			t.Fatalf("%v", err)
		}
	})
}

func TestPlanUpstreams(t *testing.T) {
	addrs := []string{"h1:80", "h2:80", "h3:80"}
	t.Run("no answers: the shared upstream alone", func(t *testing.T) {
		ups, err := planUpstreams(addrs, nil, 2, 10)
		if err != nil || len(ups) != 1 || ups[0].Name != sharedUpstream || ups[0].Location() != "/" || !slices.Equal(ups[0].Servers, addrs) || ups[0].MaxFails != 2 || ups[0].FailTimeoutS != 10 {
			t.Fatalf("%+v %v", ups, err)
		}
	})
	t.Run("same models everywhere", func(t *testing.T) {
		ans := []gatewayModels{{Addr: "h1:80", Models: []string{"A", "B"}}, {Addr: "h2:80", Models: []string{"A", "B"}}, {Addr: "h3:80", Models: []string{"A", "B"}}}
		ups, err := planUpstreams(addrs, ans, 2, 10)
		if err != nil || len(ups) != 1 {
			t.Fatalf("%+v %v", ups, err)
		}
	})
	t.Run("different models", func(t *testing.T) {
		ans := []gatewayModels{
			{Addr: "h1:80", Models: []string{"A", "B", "c.d"}},
			{Addr: "h2:80", Models: []string{"A", "B"}},
			{Addr: "h3:80", Models: []string{"A", "c-d", "c.d"}},
		}
		ups, err := planUpstreams(addrs, ans, 3, 5)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, u := range ups {
			got = append(got, fmt.Sprintf("%s %s %s %d %d", u.Name, u.Location(), strings.Join(u.Servers, ","), u.MaxFails, u.FailTimeoutS))
		}
		want := []string{
			"mortred_gateway / h1:80,h2:80,h3:80 3 5",
			"mortred_m_B /v1/models/B/ h1:80,h2:80 3 5",
			"mortred_m_c_d /v1/models/c-d/ h3:80 3 5",
			"mortred_m_c_d_2 /v1/models/c.d/ h1:80,h3:80 3 5", // c-d took the sanitised name
		}
		if !slices.Equal(got, want) {
			t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("names differing in case only", func(t *testing.T) {
		ans := []gatewayModels{{Addr: "h1:80", Models: []string{"m", "M"}}, {Addr: "h2:80"}}
		ups, err := planUpstreams(addrs[:2], ans, 2, 10)
		if err != nil || len(ups) != 3 || ups[1].Name != "mortred_m_M" || ups[2].Name != "mortred_m_m_2" {
			t.Fatalf("%+v %v", ups, err)
		}
	})
	t.Run("an id that cannot be a location", func(t *testing.T) {
		ans := []gatewayModels{{Addr: "h1:80", Models: []string{"A", "x y"}}, {Addr: "h2:80", Models: []string{"A"}}}
		_, err := planUpstreams(addrs[:2], ans, 2, 10)
		if err == nil || !strings.Contains(err.Error(), `gateway h1:80 lists model "x y"`) || !strings.Contains(err.Error(), "letters, digits and -._~") {
			t.Fatalf("%v", err)
		}
		// Served everywhere, it needs no location of its own.
		ans[1].Models = []string{"A", "x y"}
		if _, err := planUpstreams(addrs[:2], ans, 2, 10); err != nil {
			t.Fatal(err)
		}
	})
}
