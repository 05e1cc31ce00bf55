package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkForwardInfer is one small inference request through an
// in-process gateway to an httptest model that answers a fixed JSON: the
// gateway's own CPU per request is most of what it measures, beside the
// two net/http servers and the client.
func BenchmarkForwardInfer(b *testing.B) {
	answer := []byte(`{"status":0,"data":[{"label":"x","score":0.5}]}`)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	defer model.Close()
	g, err := New(Config{Token: tok, MetricsToken: mtok, Upstreams: []Upstream{
		{ID: "m", URI: "/m", Addr: strings.TrimPrefix(model.URL, "http://"), Token: modelTok}}}, logx.Discard(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	gw := httptest.NewServer(g)
	defer gw.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	body := []byte(`{"images":["` + strings.Repeat("A", 120) + `"]}`)
	url := gw.URL + "/v1/models/m/infer"
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4<<10)
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := io.ReadFull(resp.Body, buf)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !bytes.Equal(buf[:n], answer) {
				b.Errorf("status %d body %q", resp.StatusCode, buf[:n])
				return
			}
		}
	})
}
