package edge

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// jobIDs are job ids that decode into something other than one path
// segment, with the route each is sent to.
var jobIDs = []struct{ raw, suffix string }{
	{"..%2F..%2Fmetrics", ""},
	{"..%2fmortred_ai_server_v1%2fclassification%2fjobsedge", ""},
	{"%2e%2e", "/result"},
	{"%2E", "/wait"},
	{"a%3Fb=c", ""},
	{"a%23b", "/wait"},
	{"x%00y", ""},
}

// checkJobIDs sends each job id through the gateway's job routes. Either
// the gateway refuses it (400 or 404) and nothing reaches the model
// server, or the model server gets exactly /jobs/<the id, still one
// escaped segment><the same route>.
func checkJobIDs(t *testing.T, f *frontend, up *upstream, model string) {
	for _, j := range jobIDs {
		t.Run(j.raw+j.suffix, func(t *testing.T) {
			mark := up.mark()
			res := rawExchange(f.addr, []byte("GET /v1/models/"+model+"/jobs/"+j.raw+j.suffix+" HTTP/1.1\r\nHost: "+f.addr+"\r\n"+f.auth+"\r\n"), nil, 1)
			codes := res.codes()
			// The sentinel marks the end of what this request sent.
			if code, err := f.post(model, "sentinel-job"); err != nil || code != 200 {
				t.Fatalf("sentinel: %d %v", code, err)
			}
			got, found := up.waitFor(mark, 20*time.Second, hasMarker("sentinel-job"))
			if !found {
				t.Fatal("the sentinel never reached the model server")
			}
			got = got[:len(got)-1]
			t.Logf("client %v; model server %v", codes, got)
			if len(codes) == 1 && (codes[0] == 400 || codes[0] == 404) && len(got) == 0 {
				return // refused
			}
			id, err := url.PathUnescape(j.raw)
			if err != nil {
				t.Fatal(err)
			}
			want := "GET /jobs/" + url.PathEscape(id) + j.suffix + " HTTP/1.1"
			if len(got) != 1 || got[0].err != nil {
				t.Fatalf("client %v, model server got %v; want a refusal (400/404) or exactly %q", codes, got, want)
			}
			line, _, _ := strings.Cut(string(got[0].head), "\r\n")
			if !strings.EqualFold(line, want) {
				t.Errorf("model server got %q; want %q or a refusal (client: %v)", line, want, codes)
			}
		})
	}
}

// TestGatewayJobIDs sends job ids that do not survive as one path
// segment through mortred-gateway's job routes.
func TestGatewayJobIDs(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	checkJobIDs(t, startGateway(t, map[string]*upstream{"JOBS": up}, nil), up, "JOBS")
}
