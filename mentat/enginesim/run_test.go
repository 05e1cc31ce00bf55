package enginesim

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
)

// On shutdown a stream that outlives ShutdownTimeout is cut, and Serve
// returns only after its handler did.
func TestShutdownCutsLongStreams(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ServedModelNames = []string{"sim"}
	cfg.ITL = 20 * time.Millisecond
	cfg.ShutdownTimeout = 200 * time.Millisecond
	e, err := New(cfg, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln, nil) }()

	te := &testEngine{Engine: e, url: "http://" + ln.Addr().String(), client: &http.Client{Transport: &http.Transport{}}}
	defer te.client.CloseIdleConnections()
	res, err := te.openStream(t, context.Background(), 3000)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after the shutdown timeout")
	}
	// The stream ends without [DONE]; the request counts as aborted.
	_, _ = br.WriteTo(discard{})
	if a := e.stats.finishedAbort.Load(); a != 1 {
		t.Errorf("aborted %d, want 1", a)
	}
	if st := e.sched.state(); st.Running != 0 {
		t.Errorf("still running after shutdown: %+v", st)
	}
}
