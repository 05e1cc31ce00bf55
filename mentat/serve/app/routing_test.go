package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
	"github.com/fe64bb06/frontdoor/mentat/serve/stats"
)

// TestEngineLoadTotals: a replica's load is its engine's totals over
// every model it serves, read through the stats scraper; an engine
// without request counts, or one that cannot be read, is not OK.
func TestEngineLoadTotals(t *testing.T) {
	expo, err := os.ReadFile("../stats/testdata/vllm-current.txt")
	if err != nil {
		t.Fatal(err)
	}
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			w.Write(expo)
		case "/empty/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			w.Write([]byte("# nothing\nprocess_cpu_seconds_total 1\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer engine.Close()
	var h routes.Holder
	st := stats.New(&h, nil, engine.Client(), nil)
	read := engineLoad(st, time.Second)
	rt, _ := routes.NewRoute("glm53", "g", engine.URL+"/v1", "")
	l := read(context.Background(), rt)
	if !l.OK || l.Running != 10 || l.Waiting != 11 || !l.HasKV || l.At.IsZero() {
		t.Errorf("load %+v, want running 2+1+7, waiting 2+0+9, KV present", l)
	}
	empty, _ := routes.NewRoute("x", "g", engine.URL+"/empty/v1", "")
	if l := read(context.Background(), empty); l.OK || l.At.IsZero() {
		t.Errorf("no request counts: %+v, want not OK", l)
	}
	gone, _ := routes.NewRoute("x", "g", engine.URL+"/gone/v1", "")
	if l := read(context.Background(), gone); l.OK {
		t.Errorf("404 metrics: %+v, want not OK", l)
	}
}
