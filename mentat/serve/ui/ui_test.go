package ui

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/charts"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWantsHTML(t *testing.T) {
	for accept, want := range map[string]bool{
		"text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8": true,
		"application/xhtml+xml":                 true,
		"TEXT/HTML":                             true,
		"application/json, text/html;q=0.5":     true,
		"*/*":                                   false,
		"":                                      false,
		"application/json":                      false,
		"text/html;q=0":                         false,
		"text/*":                                false,
		"text/html;q=bogus":                     false,
		"text/htmlx":                            false,
		"text/plain, text/html ; q=0.1 , */*":   true,
		"garbage;;;, text/html":                 true,
		"application/json;q=1, text/html;q=0.0": false,
	} {
		if got := WantsHTML([]string{accept}); got != want {
			t.Errorf("WantsHTML(%q) = %v, want %v", accept, got, want)
		}
	}
}

func TestHandlerNegotiates(t *testing.T) {
	doc := map[string]any{"uptime_s": 7, "groups": map[string]any{}}
	srv := httptest.NewServer(Handler(func() any { return doc }))
	defer srv.Close()

	get := func(path, accept string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	resp, body := get("/", "text/html,*/*;q=0.8")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, "stats.json") || resp.Header.Get("Content-Security-Policy") == "" ||
		resp.Header.Get("Vary") != "Accept" {
		t.Errorf("browser GET /: %d %v", resp.StatusCode, resp.Header)
	}
	for _, accept := range []string{"", "*/*", "application/json"} {
		resp, body := get("/", accept)
		var got map[string]any
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal([]byte(body), &got) != nil || got["uptime_s"] != float64(7) {
			t.Errorf("GET / with Accept %q: %d %s %q", accept, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	if resp, _ := get("/other", "text/html"); resp.StatusCode != 404 {
		t.Errorf("GET /other: %d", resp.StatusCode)
	}
	resp, err := http.Post(srv.URL+"/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST /: %d", resp.StatusCode)
	}
}

// The page must work with no network but the router: no URL of another
// origin and nothing fetched but stats.json, stats/series.json and
// stats/keys/series.json.
func TestPageSelfContained(t *testing.T) {
	p := string(Page())
	for _, re := range []string{`https?://`, `\bsrc\s*=`, `<link\b`, `@import`, `url\(`, `//[a-z0-9.-]+\.[a-z]{2,}/`} {
		if loc := regexp.MustCompile(re).FindStringIndex(p); loc != nil {
			t.Errorf("page references an external asset (%s): %q", re, p[max(0, loc[0]-40):min(len(p), loc[1]+40)])
		}
	}
	if n := strings.Count(p, "fetch("); n != 3 || !strings.Contains(p, `fetch("stats.json"`) || !strings.Contains(p, `fetch("stats/series.json?since="`) ||
		!strings.Contains(p, `fetch("stats/keys/series.json?since="`) {
		t.Errorf("page fetches something other than stats.json, stats/series.json and stats/keys/series.json (%d fetch calls)", n)
	}
	if strings.Contains(p, charts.ScriptMarker) || !strings.Contains(p, "const Charts =") {
		t.Error("the chart script is not inlined")
	}
}
