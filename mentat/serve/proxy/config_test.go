package proxy

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	for _, c := range []Config{{}, {MaxBody: -1, Timeout: -time.Second}} {
		d := c.withDefaults()
		if d.MaxBody != 128<<20 || d.Timeout != 30*time.Minute {
			t.Fatalf("%+v → %+v, want 128 MiB and 30 min", c, d)
		}
	}
	if d := (Config{MaxBody: 10, Timeout: time.Second}).withDefaults(); d.MaxBody != 10 || d.Timeout != time.Second {
		t.Fatalf("explicit values overridden: %+v", d)
	}
}

// TestTransportSettings pins what the pitfalls depend on: idle upstream
// connections go before uvicorn's 5 s keep-alive, no hidden timeout can
// cut a generation, no environment proxy, no transparent gzip.
func TestTransportSettings(t *testing.T) {
	tr := NewTransport()
	if tr.IdleConnTimeout <= 0 || tr.IdleConnTimeout >= 5*time.Second {
		t.Errorf("IdleConnTimeout %v, want below the engines' 5 s keep-alive", tr.IdleConnTimeout)
	}
	if tr.MaxIdleConnsPerHost < 64 {
		t.Errorf("MaxIdleConnsPerHost %d: concurrent streams would re-dial", tr.MaxIdleConnsPerHost)
	}
	if tr.ResponseHeaderTimeout != 0 || tr.ExpectContinueTimeout != 0 {
		t.Errorf("hidden timeouts: header %v, continue %v", tr.ResponseHeaderTimeout, tr.ExpectContinueTimeout)
	}
	if tr.Proxy != nil || !tr.DisableCompression || tr.ForceAttemptHTTP2 {
		t.Errorf("proxy %v, compression disabled %v, h2 %v", tr.Proxy != nil, tr.DisableCompression, tr.ForceAttemptHTTP2)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestUpstreamRequestIsRewindable: the request handed to the transport
// carries its exact length and a GetBody returning the same bytes, which
// is what lets net/http resend a request it never wrote.
func TestUpstreamRequestIsRewindable(t *testing.T) {
	eng, _ := recordingEngine(t)
	inner := NewTransport()
	defer inner.CloseIdleConnections()
	var mu sync.Mutex
	var checked bool
	var problem string
	tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		checked = true
		switch {
		case r.GetBody == nil:
			problem = "no GetBody"
		case r.ContentLength != int64(len(`{"model":"m"}`)):
			problem = "length not declared"
		default:
			b, err := r.GetBody()
			if err != nil {
				problem = err.Error()
				break
			}
			again, _ := io.ReadAll(b)
			if string(again) != `{"model":"m"}` {
				problem = "GetBody returned " + string(again)
			}
		}
		return inner.RoundTrip(r)
	})
	rt := newRouter(t, Config{Transport: tr})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
	readAllString(t, resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if !checked || problem != "" || resp.StatusCode != 200 {
		t.Fatalf("custom transport used: %v; problem: %q; status %d", checked, problem, resp.StatusCode)
	}
}
