package mortred

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// slowClient trickles a request at a server one small write at a time and
// records when the server cut it off.
type slowClient struct {
	what   string
	conn   net.Conn
	cut    chan struct{}
	answer string // first line the server sent, if any
	at     time.Time
}

// startSlow connects to addr, writes head at once, then one byte of drip
// every interval until the server closes the connection or limit passes.
func startSlow(t *testing.T, what, addr, head string, drip byte, interval, limit time.Duration) *slowClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &slowClient{what: what, conn: conn, cut: make(chan struct{})}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		// The reader sees the cut: an answer, EOF or a reset.
		line, _ := bufio.NewReader(conn).ReadString('\n')
		c.answer, c.at = strings.TrimSpace(line), time.Now()
		close(c.cut)
	}()
	go func() {
		defer close(done)
		stop := time.After(limit)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-c.cut:
				return
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte{drip}); err != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
		<-c.cut
	})
	return c
}

// TestSlowClients: 50 clients hold connections open, half sending their
// headers a byte at a time and half their bodies, to the gateway and to a
// model server with one worker. A normal request still succeeds while they
// hang on; the headers are cut by the 10 s header timeout and the bodies by
// the request deadline (model_run_timeout), and no worker was ever held.
func TestSlowClients(t *testing.T) {
	t.Parallel()
	const (
		runTimeout = 3 * time.Second
		header     = 10 * time.Second // ReadHeaderTimeout of both servers
		drip       = 300 * time.Millisecond
		limit      = 60 * time.Second // bound on each slow client
	)
	d := deploy(t, []stack.Model{{ID: "SLOWPOKE", Keys: map[string]any{"worker_nums": 1, "model_run_timeout": runTimeout.Milliseconds()}}}, nil)
	m := d.Conf.Models["SLOWPOKE"]
	modelAddr := fmt.Sprintf("127.0.0.1:%d", m.Port)
	gatewayAddr := strings.TrimPrefix(d.Conf.GatewayURL(), "http://")

	type target struct {
		name, addr, path, token string
	}
	targets := []target{
		{"gateway", gatewayAddr, "/v1/models/SLOWPOKE/infer", d.Tokens.API},
		{"model server", modelAddr, m.URI(), d.Tokens.Model},
	}
	started := time.Now()
	var slowHeaders, slowBodies []*slowClient
	for i := range 50 {
		tg := targets[i%2]
		if i%4 < 2 {
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nX-Slow: ", tg.path, tg.addr, tg.token)
			slowHeaders = append(slowHeaders, startSlow(t, "slow header to the "+tg.name, tg.addr, head, 'a', drip, limit))
			continue
		}
		head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"images\":[\"",
			tg.path, tg.addr, tg.token)
		slowBodies = append(slowBodies, startSlow(t, "slow body to the "+tg.name, tg.addr, head, 'A', drip, limit))
	}

	// All 50 hang on; normal requests go through, on the gateway and on
	// the model server directly.
	time.Sleep(2 * drip)
	d.mustInfer(t, "SLOWPOKE")
	r, err := d.direct("SLOWPOKE", stack.Envelope("direct", "", stack.LightPNG))
	if err != nil || r.Code != http.StatusOK {
		t.Fatalf("direct request while slow clients hang on: %v %v", r, err)
	}
	if busy, err := d.modelMetric("SLOWPOKE", "mortred_workers_busy"); err != nil || busy != 0 {
		t.Fatalf("workers busy while only slow clients are connected: %v %v", busy, err)
	}
	for _, c := range slowHeaders {
		select {
		case <-c.cut:
		default:
			continue
		}
		if c.at.Sub(started) < header/2 {
			t.Fatalf("%s was cut after %s, before any timeout could apply (answer %q)", c.what, c.at.Sub(started), c.answer)
		}
	}

	wait := func(cs []*slowClient, bound time.Duration) {
		t.Helper()
		var mu sync.Mutex
		var late []string
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Go(func() {
				select {
				case <-c.cut:
				case <-time.After(time.Until(started.Add(bound))):
					mu.Lock()
					late = append(late, c.what)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(late) > 0 {
			t.Errorf("%d clients still connected %s after they started: %v", len(late), bound, late)
		}
		answers := map[string]int{}
		for _, c := range cs {
			select {
			case <-c.cut:
				answers[fmt.Sprintf("%s → %q after %s", c.what, c.answer, c.at.Sub(started).Truncate(time.Second))]++
			default:
			}
		}
		t.Logf("cuts: %v", answers)
	}
	// Generous bounds on a loaded machine; the servers' own are 3 s and 10 s.
	wait(slowBodies, runTimeout+15*time.Second)
	wait(slowHeaders, header+15*time.Second)
	d.mustInfer(t, "SLOWPOKE")
}
