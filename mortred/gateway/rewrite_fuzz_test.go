package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// FuzzRewriteJobURLs feeds arbitrary upstream job answers to the rewrite,
// with and without a host id: it never panics, leaves anything it does not
// rewrite byte for byte, and when it rewrites, the result is JSON with the
// same keys, both URLs under the prefix (and host), job_id on the host, and
// every other value unchanged.
func FuzzRewriteJobURLs(f *testing.F) {
	for _, s := range []string{
		`{"job_id":"j1","state":"pending","poll_url":"/jobs/j1","result_url":"/jobs/j1/result"}` + "\n",
		`{"job_id":"j1","state":"done","elapsed_ms":12}`,
		`{"poll_url":"/elsewhere","result_url":7}`,
		`{"poll_url":"/jobs/\u00e9","extra":{"poll_url":"/jobs/x"}}`,
		`[{"poll_url":"/jobs/x"}]`,
		`{"poll_url":"/jobs/a","poll_url":"/jobs/b"}`,
		`{"status":429}`,
		`not json`,
		``,
		`null`,
	} {
		f.Add([]byte(s))
	}
	const prefix = "/v1/models/M"
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, host := range []string{"", "h1"} {
			checkRewrite(t, jobRewrite{prefix: prefix, host: host}, data)
		}
	})
}

// checkRewrite: rw leaves data alone, and changes only poll_url and
// result_url under /jobs/ (onto prefix/jobs/HOST.ID) and, with a host, a
// non-empty job_id (onto HOST.ID).
func checkRewrite(t *testing.T, rw jobRewrite, data []byte) {
	in := append([]byte(nil), data...)
	out := rw.apply(data)
	if !bytes.Equal(data, in) {
		t.Fatal("the input was modified")
	}
	if bytes.Equal(out, data) {
		return
	}
	var before, after map[string]json.RawMessage
	if err := json.Unmarshal(data, &before); err != nil {
		t.Fatalf("rewrote a non-object: %q → %q", data, out)
	}
	if err := json.Unmarshal(out, &after); err != nil {
		t.Fatalf("rewrite is not JSON: %q → %q", data, out)
	}
	if len(before) != len(after) {
		t.Fatalf("keys changed: %q → %q", data, out)
	}
	for k, v := range before {
		var s string
		isString := json.Unmarshal(v, &s) == nil
		want := ""
		switch {
		case (k == "poll_url" || k == "result_url") && isString && strings.HasPrefix(s, "/jobs/"):
			want = rw.prefix + "/jobs/" + strings.TrimPrefix(s, "/jobs/")
			if rest := strings.TrimPrefix(s, "/jobs/"); rw.host != "" && rest != "" {
				want = rw.prefix + "/jobs/" + rw.host + "." + rest
			}
		case k == "job_id" && isString && rw.host != "" && s != "":
			want = rw.host + "." + s
		default:
			if !jsonEqual(v, after[k]) {
				t.Fatalf("%s changed: %s → %s", k, v, after[k])
			}
			continue
		}
		var got string
		if err := json.Unmarshal(after[k], &got); err != nil || got != want {
			t.Fatalf("%s: %q → %s, want %q", k, s, after[k], want)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

// FuzzBearerToken: any Authorization header parses without panic, and a
// token is only found after a case-insensitive "Bearer " scheme.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer abc", "BEARER  abc ", "Basic abc", "Bearer ", "Bearer", "", "Bearerabc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := &http.Request{Header: http.Header{"Authorization": {h}}}
		tok, ok := bearerToken(r)
		if !ok {
			if tok != "" {
				t.Fatalf("token %q without a scheme", tok)
			}
			return
		}
		if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") || tok != strings.TrimSpace(h[7:]) {
			t.Fatalf("%q → %q", h, tok)
		}
	})
}
