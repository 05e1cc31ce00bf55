package edge

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"testing"
	"time"
)

// mutations is how many mutated inputs each frontend gets.
const mutations = 150

// mutationIdle is how long a mutated exchange may go quiet before the
// client stops reading: an input the server still waits on (a head
// never ended, a length never met) is left there. Only exchanges the
// server finished are compared, so a slow machine loses comparisons, it
// does not fail them.
const mutationIdle = 200 * time.Millisecond

// mutate returns raw with a few edits in its head: bytes a parser may
// treat specially inserted, bytes deleted, the case of a letter flipped,
// a line repeated.
func mutate(r *rand.Rand, raw []byte) []byte {
	end := bytes.Index(raw, []byte("\r\n\r\n"))
	if end < 0 {
		end = len(raw)
	}
	out := bytes.Clone(raw)
	for range 1 + r.IntN(3) {
		i := r.IntN(end)
		switch r.IntN(6) {
		case 0:
			ins := []string{" ", "\t", "\r", "\n", "\x00", ",", ":", "\r\n", "\x7f", "\xff"}[r.IntN(10)]
			out = append(out[:i], append([]byte(ins), out[i:]...)...)
			end += len(ins)
		case 1:
			out = append(out[:i], out[i+1:]...)
			end--
		case 2:
			if c := out[i]; c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
				out[i] ^= 0x20
			}
		default:
			// Repeat the line around i.
			s := bytes.LastIndex(out[:i], []byte("\n")) + 1
			e := bytes.Index(out[i:], []byte("\n"))
			if e < 0 || s == 0 {
				continue
			}
			line := bytes.Clone(out[s : i+e+1])
			out = append(out[:s], append(line, out[s:]...)...)
			end += len(line)
		}
		if end <= 0 {
			break
		}
	}
	return out
}

// quietExchange writes b on a fresh connection and reads answers until
// the server closes it (done true) or it is quiet for mutationIdle.
func quietExchange(addr string, b []byte) (codes []int, done bool) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, false
	}
	defer c.Close()
	go func() { _, _ = c.Write(b) }()
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(mutationIdle))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return codes, false
			}
			return codes, err == io.EOF || err == io.ErrUnexpectedEOF || len(codes) > 0
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 200 {
			codes = append(codes, resp.StatusCode)
		}
		if err != nil {
			return codes, false
		}
	}
}

// parseRefusal reports whether code is one net/http's server writes
// itself for bytes it could not take as a request.
func parseRefusal(code int) bool {
	switch code {
	case http.StatusBadRequest, http.StatusRequestHeaderFieldsTooLarge, http.StatusNotImplemented,
		http.StatusHTTPVersionNotSupported, http.StatusExpectationFailed:
		return true
	}
	return false
}

// runMutations sends mutated case inputs to f and to net/http (ref) and
// checks two things: a first request net/http refuses as unparsable is
// never answered 2xx by the frontend, and every request that reaches the
// upstream, whatever the client sent, is in the plain form a proxy must
// emit (checkUpstreamHead).
func runMutations(t *testing.T, f, ref *frontend, up *upstream, model string) {
	r := rand.New(rand.NewPCG(17, 17)) // the same inputs every run
	mark := up.mark()
	compared := 0
	for i := range mutations {
		c := smuggleCases[r.IntN(len(smuggleCases))]
		if c.afterContinue != "" || len(c.raw) > 1<<16 {
			continue
		}
		in := mutate(r, []byte(expand(c.raw, f, model)))
		refIn := bytes.ReplaceAll(in, []byte(f.addr), []byte(ref.addr))
		refCodes, refDone := quietExchange(ref.addr, refIn)
		codes, done := quietExchange(f.addr, in)
		if !refDone || !done || len(refCodes) == 0 || len(codes) == 0 {
			continue
		}
		compared++
		if parseRefusal(refCodes[0]) && codes[0] < 300 {
			t.Errorf("mutation %d of %q: net/http refuses it (%d), %s answered %v:\n%q", i, c.name, refCodes[0], f.name, codes, in)
		}
	}
	sentinel := "sentinel-mutations"
	if code, err := f.post(model, sentinel); err != nil || code != http.StatusOK {
		t.Fatalf("sentinel request: %d %v", code, err)
	}
	got, found := up.waitFor(mark, 20*time.Second, hasMarker(sentinel))
	if !found {
		t.Fatalf("the sentinel never reached the upstream")
	}
	n := 0
	for _, s := range got {
		if s.err != nil {
			continue // a body the frontend started streaming and then aborted
		}
		n++
		for _, p := range checkUpstreamHead(s, up.Addr(), nil) {
			t.Errorf("upstream request %s: %s", s, p)
		}
	}
	t.Logf("%d inputs compared with net/http, %d requests reached the upstream", compared, n)
	if compared < mutations/4 {
		t.Errorf("only %d of %d mutated inputs could be compared", compared, mutations)
	}
}

// TestRouterMutations runs mutated smuggling inputs against mentatd-serve.
func TestRouterMutations(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "edge-mutations")
	f := startRouter(t, map[string]*upstream{"edge-mutations": up})
	runMutations(t, f, startReference(t), up, "edge-mutations")
}

// TestGatewayMutations runs mutated smuggling inputs against
// mortred-gateway.
func TestGatewayMutations(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	f := startGateway(t, map[string]*upstream{"MUTATIONS": up}, nil)
	runMutations(t, f, startReference(t), up, "MUTATIONS")
}
