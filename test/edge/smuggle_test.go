package edge

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// outcome is what one case must give: the client's final statuses in
// order, and the markers of the requests that reach the upstream, in
// order ("" is a request with an empty body).
type outcome struct {
	codes []int
	reach []string
}

// smuggleCase is raw client bytes and what they must give. In raw and
// body, {T} is the request-target, {H} the frontend's host:port, {A} its
// auth lines, {F} the header name it forwards, {B:m} the body marked m,
// {L:m} that body's length and {X:m} the body chunked.
type smuggleCase struct {
	name string
	raw  string
	// afterContinue is written once a 100 Continue arrives.
	afterContinue string
	want          outcome
	// alt are other acceptable outcomes (a stricter refusal), if any.
	alt []outcome
	// only runs the case on one frontend ("router", "gateway").
	only string
	// forbid are bytes that must not appear in any upstream head.
	forbid []string
	// app: a rule of the frontends, not of net/http's parser; the
	// reference skips it.
	app bool
	// no100: the frontend must refuse without soliciting the body.
	no100 bool
	// partial: the frontend may have started an upstream request it then
	// aborted (a body that turned bad mid-stream); such a request must not
	// parse as complete, and the client must not get a 2xx.
	partial bool
}

const (
	post   = "POST {T} HTTP/1.1\r\nHost: {H}\r\n{A}Content-Type: application/json\r\n"
	post10 = "POST {T} HTTP/1.0\r\nHost: {H}\r\n{A}Content-Type: application/json\r\n"
	withCL = "Content-Length: {L:a}\r\n\r\n{B:a}"
	withTE = "Transfer-Encoding: chunked\r\n\r\n{X:a}"
)

func ok(markers ...string) outcome { return outcome{codes: []int{200}, reach: markers} }
func refused(code int) outcome     { return outcome{codes: []int{code}} }
func alts(o ...outcome) []outcome  { return o }

// bigHeader is a field far past any head limit (net/http's default is
// 1 MiB).
var bigHeader = "X-Big: " + strings.Repeat("b", 2<<20) + "\r\n"

var smuggleCases = []smuggleCase{
	{name: "baseline Content-Length", raw: post + withCL, want: ok("a")},
	{name: "baseline chunked", raw: post + withTE, want: ok("a")},
	{name: "chunked with extension and trailer", raw: post + "Transfer-Encoding: chunked\r\n\r\n{L:a-hex};ext=1\r\n{B:a}\r\n0\r\nX-Trailer: smuggle\r\n\r\n", want: ok("a"), forbid: []string{"X-Trailer", "smuggle"}},

	// Content-Length and Transfer-Encoding together: chunked wins and the
	// length is dropped (RFC 9112 §6.3), or the request is refused.
	{name: "CL then TE", raw: post + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{X:a}", want: ok("a"), alt: alts(refused(400))},
	{name: "TE then CL", raw: post + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{X:a}", want: ok("a"), alt: alts(refused(400))},
	{name: "CL longer than the chunked body", raw: post + "Content-Length: 400\r\nTransfer-Encoding: chunked\r\n\r\n{X:a}", want: ok("a"), alt: alts(refused(400))},
	// CL.TE: a hop that framed by length would see one request; the
	// frontend frames by chunks, so the tail is a second request of the
	// client's own — reframed, it reaches the upstream as its own request.
	{name: "CL.TE smuggle attempt", raw: post + "Content-Length: {L:cl-te-len}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + post + withCL,
		want: outcome{codes: []int{400, 200}, reach: []string{"a"}}, alt: alts(refused(400)), only: "router"},
	{name: "CL.TE smuggle attempt (gateway)", raw: post + "Content-Length: {L:cl-te-len}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + post + withCL,
		want: outcome{codes: []int{200, 200}, reach: []string{"", "a"}}, alt: alts(refused(400)), only: "gateway"},

	// Content-Length forms.
	{name: "duplicate equal CL", raw: post + "Content-Length: {L:a}\r\nContent-Length: {L:a}\r\n\r\n{B:a}", want: ok("a"), alt: alts(refused(400))},
	{name: "conflicting CL", raw: post + "Content-Length: {L:a}\r\nContent-Length: 5\r\n\r\n{B:a}", want: refused(400)},
	{name: "CL comma list", raw: post + "Content-Length: {L:a}, {L:a}\r\n\r\n{B:a}", want: refused(400)},
	{name: "CL plus sign", raw: post + "Content-Length: +{L:a}\r\n\r\n{B:a}", want: refused(400)},
	{name: "CL minus", raw: post + "Content-Length: -1\r\n\r\n{B:a}", want: refused(400)},
	{name: "CL leading zeros", raw: post + "Content-Length: 000{L:a}\r\n\r\n{B:a}", want: ok("a"), alt: alts(refused(400))},
	{name: "CL hex", raw: post + "Content-Length: 0x10\r\n\r\n{B:a}", want: refused(400)},
	{name: "CL inner space", raw: post + "Content-Length: 1 0\r\n\r\n{B:a}", want: refused(400)},
	{name: "CL empty", raw: post + "Content-Length: \r\n\r\n{B:a}", want: refused(400)},
	{name: "CL overflows 64 bits", raw: post + "Content-Length: 99999999999999999999999\r\n\r\n{B:a}", want: refused(400)},
	{name: "CL of 1 TiB", raw: post + "Content-Length: 1099511627776\r\n\r\n{B:a}", want: refused(413)},

	// Transfer-Encoding forms: only a lone "chunked" is understood (501).
	{name: "TE chunked twice (two fields)", raw: post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n{X:a}", want: refused(501), alt: alts(refused(400))},
	{name: "TE chunked, chunked", raw: post + "Transfer-Encoding: chunked, chunked\r\n\r\n{X:a}", want: refused(501), alt: alts(refused(400))},
	{name: "TE chunked, identity", raw: post + "Transfer-Encoding: chunked, identity\r\n\r\n{X:a}", want: refused(501), alt: alts(refused(400))},
	{name: "TE identity, chunked", raw: post + "Transfer-Encoding: identity, chunked\r\n\r\n{X:a}", want: refused(501), alt: alts(refused(400))},
	{name: "TE gzip, chunked", raw: post + "Transfer-Encoding: gzip, chunked\r\n\r\n{X:a}", want: refused(501), alt: alts(refused(400))},
	{name: "TE xchunked", raw: post + "Transfer-Encoding: xchunked\r\n\r\n{X:a}", want: refused(501), alt: alts(refused(400))},
	{name: "TE identity", raw: post + "Transfer-Encoding: identity\r\nContent-Length: {L:a}\r\n\r\n{B:a}", want: refused(501), alt: alts(refused(400))},
	{name: "TE upper case", raw: post + "Transfer-Encoding: CHUNKED\r\n\r\n{X:a}", want: ok("a"), alt: alts(refused(501))},
	{name: "TE padded with white space", raw: post + "Transfer-Encoding: \t chunked \t\r\n\r\n{X:a}", want: ok("a"), alt: alts(refused(400))},
	{name: "TE space before colon", raw: post + "Transfer-Encoding : chunked\r\n\r\n{X:a}", want: refused(400)},
	{name: "TE in HTTP/1.0 with CL", raw: post10 + "Transfer-Encoding: chunked\r\nContent-Length: {L:a}\r\n\r\n{B:a}", want: ok("a"), alt: alts(refused(400))},
	{name: "TE in HTTP/1.0 alone", raw: post10 + "Transfer-Encoding: chunked\r\n\r\n{X:a}", want: refused(400), alt: alts(refused(501)), only: "router"},
	{name: "TE in HTTP/1.0 alone (gateway)", raw: post10 + "Transfer-Encoding: chunked\r\n\r\n{X:a}", want: ok(""), alt: alts(refused(400)), only: "gateway"},
	{name: "chunk size overflow", raw: post + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n{B:a}\r\n0\r\n\r\n", want: refused(400), partial: true},
	{name: "chunk size with bare LF", raw: post + "Transfer-Encoding: chunked\r\n\r\n{L:a-hex}\n{B:a}\r\n0\r\n\r\n", want: refused(400), partial: true},
	{name: "chunk data ended by bare LF", raw: post + "Transfer-Encoding: chunked\r\n\r\n{L:a-hex}\r\n{B:a}\n0\r\n\r\n", want: refused(400), partial: true},

	// Line folding, bare line ends, control bytes.
	{name: "obs-fold in a field", raw: post + "X-Fold: one\r\n two\r\n" + withCL, want: ok("a"), alt: alts(refused(400)), forbid: []string{"X-Fold"}},
	{name: "obs-fold continuing CL", raw: post + "Content-Length: 1\r\n 0\r\n\r\n{B:a}", want: refused(400)},
	{name: "obs-fold before the first field", raw: "POST {T} HTTP/1.1\r\n Host: {H}\r\n{A}Content-Length: {L:a}\r\n\r\n{B:a}", want: refused(400)},
	{name: "bare LF line ends", raw: "POST {T} HTTP/1.1\nHost: {H}\n{A-LF}Content-Type: application/json\nContent-Length: {L:a}\n\n{B:a}", want: ok("a"), alt: alts(refused(400))},
	{name: "bare CR inside a field", raw: post + "X-CR: a\rX-Injected: 1\r\n" + withCL, want: refused(400), forbid: []string{"X-Injected"}},
	{name: "bare CR line ends", raw: "POST {T} HTTP/1.1\rHost: {H}\r{A-CR}Content-Length: {L:a}\r\r\n\r\n{B:a}", want: refused(400)},
	{name: "NUL in a field value", raw: post + "X-Nul: a\x00b\r\n" + withCL, want: refused(400)},
	{name: "control byte in a field value", raw: post + "X-Ctl: a\x01b\r\n" + withCL, want: refused(400)},
	{name: "DEL in a field value", raw: post + "X-Del: a\x7fb\r\n" + withCL, want: refused(400)},
	{name: "NUL in a field name", raw: post + "X-N\x00ul: a\r\n" + withCL, want: refused(400)},
	{name: "NUL in the target", raw: "POST /v1/x\x00y HTTP/1.1\r\nHost: {H}\r\n{A}Content-Length: {L:a}\r\n\r\n{B:a}", want: refused(400)},
	{name: "tab in a field value", raw: post + "X-Tab: a\tb\r\n" + withCL, want: ok("a")},
	{name: "two spaces after the method", raw: "POST  {T} HTTP/1.1\r\nHost: {H}\r\n{A}Content-Length: {L:a}\r\n\r\n{B:a}", want: refused(400)},
	{name: "HTTP/3.0", raw: "POST {T} HTTP/3.0\r\nHost: {H}\r\n{A}Content-Length: {L:a}\r\n\r\n{B:a}", want: refused(505), alt: alts(refused(400))},
	{name: "lower-case method", raw: "post {T} HTTP/1.1\r\nHost: {H}\r\n{A}Content-Type: application/json\r\n" + withCL, want: refused(405), alt: alts(refused(400))},

	// Pipelining and stray line ends.
	{name: "two requests in one write", raw: post + withCL + post + "Content-Length: {L:b}\r\n\r\n{B:b}", want: outcome{codes: []int{200, 200}, reach: []string{"a", "b"}}},
	{name: "chunked then CL in one write", raw: post + withTE + post + "Content-Length: {L:b}\r\n\r\n{B:b}", want: outcome{codes: []int{200, 200}, reach: []string{"a", "b"}}},
	{name: "stray CRLF between two POSTs", raw: post + withCL + "\r\n" + post + "Content-Length: {L:b}\r\n\r\n{B:b}", want: outcome{codes: []int{200, 200}, reach: []string{"a", "b"}}},
	{name: "refused request with a pipelined one behind", raw: post + "Content-Length: 1, 2\r\n\r\n" + post + "Content-Length: {L:b}\r\n\r\n{B:b}", want: refused(400)},
	{name: "unsupported TE with a pipelined one behind", raw: post + "Transfer-Encoding: xchunked\r\n\r\n" + post + "Content-Length: {L:b}\r\n\r\n{B:b}", want: refused(501), alt: alts(refused(400))},
	{name: "CONNECT", raw: "CONNECT {H} HTTP/1.1\r\nHost: {H}\r\n{A}\r\n", want: refused(405), alt: alts(refused(400), refused(404))},
	{name: "CRLF before the first request", raw: "\r\n" + post + withCL, want: refused(400), alt: alts(ok("a"))},

	// Expect.
	{name: "Expect 100-continue, body after the 100", raw: post + "Expect: 100-continue\r\nContent-Length: {L:a}\r\n\r\n", afterContinue: "{B:a}", want: ok("a"), forbid: []string{"100-continue"}},
	{name: "Expect 100-continue, body at once", raw: post + "Expect: 100-continue\r\n" + withCL, want: ok("a"), forbid: []string{"100-continue"}},
	{name: "Expect 100-continue with a 1 TiB Content-Length", raw: post + "Expect: 100-continue\r\nContent-Length: 1099511627776\r\n\r\n", want: refused(413), no100: true},
	{name: "Expect something else", raw: post + "Expect: teapot\r\n" + withCL, want: refused(417)},

	// Targets and Host.
	{name: "absolute-form target", raw: "POST http://{H}{T} HTTP/1.1\r\nHost: {H}\r\n{A}Content-Type: application/json\r\n" + withCL, want: ok("a")},
	{name: "absolute-form naming another host", raw: "POST http://evil.example{T} HTTP/1.1\r\nHost: {H}\r\n{A}Content-Type: application/json\r\n" + withCL, want: ok("a"), alt: alts(refused(400)), forbid: []string{"evil.example"}},
	{name: "dot segments in the target", raw: "POST {T}/../{T-last} HTTP/1.1\r\nHost: {H}\r\n{A}Content-Type: application/json\r\n" + withCL, want: refused(307), alt: alts(ok("a"), refused(301), refused(404), refused(400)), app: true},
	{name: "asterisk-form target", raw: "POST * HTTP/1.1\r\nHost: {H}\r\n{A}Content-Type: application/json\r\n" + withCL, want: refused(400), alt: alts(refused(404), refused(405)), app: true},
	{name: "missing Host", raw: "POST {T} HTTP/1.1\r\n{A}Content-Type: application/json\r\n" + withCL, want: refused(400)},
	{name: "double Host", raw: "POST {T} HTTP/1.1\r\nHost: {H}\r\nHost: evil.example\r\n{A}Content-Type: application/json\r\n" + withCL, want: refused(400), forbid: []string{"evil.example"}},
	{name: "Host with a space", raw: "POST {T} HTTP/1.1\r\nHost: a b\r\n{A}Content-Type: application/json\r\n" + withCL, want: refused(400)},
	{name: "HTTP/1.0 without Host", raw: "POST {T} HTTP/1.0\r\n{A}Content-Type: application/json\r\n" + withCL, want: ok("a")},

	// Hop-by-hop headers and the ones Connection names.
	{name: "hop-by-hop headers", raw: post + "Connection: keep-alive, X-Hop\r\nKeep-Alive: timeout=99\r\nTE: trailers\r\nTrailer: X-Trail\r\nUpgrade: h2c\r\nProxy-Connection: keep-alive\r\nX-Hop: hop-secret\r\n" + withCL,
		want: ok("a"), forbid: []string{"hop-secret", "timeout=99", "h2c", "X-Trail"}},
	{name: "forwarded header reaches the upstream", raw: post + "{F}: fwd-control\r\n" + withCL, want: ok("a")},
	{name: "Connection names the forwarded header", raw: post + "Connection: {F}\r\n{F}: conn-named\r\n" + withCL, want: ok("a"), forbid: []string{"conn-named"}},
	{name: "Connection names it among others", raw: post + "Connection: keep-alive\r\nConnection: x-other, {F-lower}\r\n{F}: conn-named-2\r\n" + withCL, want: ok("a"), forbid: []string{"conn-named-2"}},
	{name: "Connection names Authorization", raw: post + "Connection: Authorization\r\nAuthorization: Bearer conn-named-auth\r\n" + withCL, want: ok("a"), forbid: []string{"conn-named-auth"}, only: "router"},
	{name: "Connection close", raw: post + "Connection: close\r\n" + withCL, want: ok("a")},

	// Oversized heads.
	{name: "one 2 MiB field", raw: post + bigHeader + withCL, want: refused(431)},
	{name: "2 MiB target", raw: "POST /" + strings.Repeat("t", 2<<20) + " HTTP/1.1\r\nHost: {H}\r\n{A}" + withCL, want: refused(431), alt: alts(refused(414))},
	{name: "one 100 KiB field, over the 64 KiB default", raw: post + "X-Big: " + strings.Repeat("b", 100<<10) + "\r\n" + withCL, want: refused(431)},
	{name: "a 60 KiB head, under the default", raw: post + "X-Big: " + strings.Repeat("b", 60<<10) + "\r\n" + withCL, want: ok("a")},

	// The gateway's body limit (request_size_limit_mb = 1 in
	// TestGatewaySmuggling): a declared length over it is refused
	// unread, an undeclared one when the limit is reached, and neither
	// reaches the model server whole.
	{name: "CL over the gateway's 1 MiB limit", raw: post + "Content-Length: 2097152\r\n\r\n", want: refused(413), only: "gateway", app: true},
	{name: "chunked body over the gateway's 1 MiB limit", raw: post + "Transfer-Encoding: chunked\r\n\r\n200000\r\n" + strings.Repeat("z", 0x200000) + "\r\n0\r\n\r\n",
		want: refused(413), only: "gateway", app: true, partial: true},

	// Where the router finds the model: engines decode JSON (escapes,
	// the last of duplicate keys); routing by anything else would send a
	// request to one group that its engine reads as naming another.
	{name: "two different models", raw: post + "Content-Length: {L:two-models}\r\n\r\n{B:two-models}", want: refused(400), only: "router", app: true},
	{name: "second model under an escaped key", raw: post + "Content-Length: {L:escaped-key}\r\n\r\n{B:escaped-key}", want: refused(400), only: "router", app: true},
	{name: "model named with an escape", raw: post + "Content-Length: {L:escaped-value}\r\n\r\n{B:escaped-value}", want: ok("escaped-value"), alt: alts(refused(400)), only: "router", app: true},
	{name: "model only in a nested object", raw: post + "Content-Length: {L:nested-model}\r\n\r\n{B:nested-model}", want: refused(400), only: "router", app: true},
	{name: "the same model twice", raw: post + "Content-Length: {L:same-model-two}\r\n\r\n{B:same-model-two}", want: ok("same-model-two"), alt: alts(refused(400)), only: "router", app: true},

	// Encoded request bodies: neither frontend decodes them, so neither
	// may pass them on as if plain.
	{name: "Content-Encoding gzip", raw: post + "Content-Encoding: gzip\r\n" + withCL, want: refused(415), app: true},
	{name: "Content-Encoding identity", raw: post + "Content-Encoding: identity\r\n" + withCL, want: ok("a"), alt: alts(refused(415)), app: true},
	{name: "40000 small fields", raw: post + strings.Repeat("X-Many: 0123456789012345678901234567890123456789\r\n", 40000) + withCL, want: refused(431)},
}

// oddBodies are router bodies, by marker, that name their model in ways
// an engine's JSON decoder reads differently from a naive scan.
var oddBodies = map[string]func(model string) string{
	"two-models": func(m string) string { return `{"model":"` + m + `","model":"other-model","marker":"two-models"}` },
	"escaped-key": func(m string) string {
		return `{"model":"` + m + `","mod\u0065l":"other-model","marker":"escaped-key"}`
	},
	"escaped-value": func(m string) string {
		return `{"model":"` + m[:len(m)-1] + `\u00` + fmt.Sprintf("%x", m[len(m)-1]) + `","marker":"escaped-value"}`
	},
	"nested-model":   func(m string) string { return `{"options":{"model":"` + m + `"},"marker":"nested-model"}` },
	"same-model-two": func(m string) string { return `{"model":"` + m + `","model":"` + m + `","marker":"same-model-two"}` },
}

// caseBody is the body marked m for model on f: one of oddBodies, or
// the frontend's own.
func caseBody(f *frontend, model, m string) string {
	if b, ok := oddBodies[m]; ok {
		return b(model)
	}
	return f.body(model, m)
}

// expand fills a case template for frontend f and model.
func expand(tmpl string, f *frontend, model string) string {
	body := func(m string) string { return caseBody(f, model, m) }
	lfAuth := strings.ReplaceAll(f.auth, "\r\n", "\n")
	crAuth := strings.ReplaceAll(f.auth, "\r\n", "\r")
	target := f.target(model)
	r := strings.NewReplacer("{T}", target, "{T-last}", target[strings.LastIndex(target, "/")+1:], "{H}", f.addr, "{A}", f.auth, "{A-LF}", lfAuth, "{A-CR}", crAuth,
		"{F}", f.forwardable, "{F-lower}", strings.ToLower(f.forwardable))
	s := r.Replace(tmpl)
	// The CL.TE attempt's length covers its empty chunk and the request
	// behind it.
	if strings.Contains(s, "{L:cl-te-len}") {
		i := strings.Index(s, "{L:cl-te-len}\r\n")
		j := strings.Index(s[i:], "\r\n\r\n") + i + 4
		rest := expand(s[j:], f, model)
		s = s[:j] + rest
		s = strings.Replace(s, "{L:cl-te-len}", strconv.Itoa(len(rest)), 1)
	}
	return placeholder.ReplaceAllStringFunc(s, func(p string) string {
		kind, m := p[1], p[3:len(p)-1]
		switch {
		case kind == 'B':
			return body(m)
		case kind == 'L' && strings.HasSuffix(m, "-hex"):
			return strconv.FormatInt(int64(len(body(strings.TrimSuffix(m, "-hex")))), 16)
		case kind == 'L':
			return strconv.Itoa(len(body(m)))
		default: // X
			b := body(m)
			return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b)
		}
	})
}

var placeholder = regexp.MustCompile(`\{[BLX]:[a-z0-9-]+\}`)

// hopFields are connection-specific fields (RFC 9110 §7.6.1) and the
// legacy ones; none may cross a proxy from its client.
var hopFields = []string{"Keep-Alive", "Te", "Trailer", "Upgrade", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Expect"}

// checkUpstreamHead fails unless s is a request in the plain form a proxy
// must emit: a clean head, an origin-form POST target, one Host naming
// the upstream, one framing, and no hop-by-hop field from the client.
func checkUpstreamHead(s seen, upAddr string, forbid []string) []string {
	if s.err != nil {
		return []string{"unparsable: " + s.err.Error()}
	}
	line, fields, problems := headFields(s.head)
	if m := regexp.MustCompile(`^POST /\S* HTTP/1\.1$`).FindString(line); m == "" {
		problems = append(problems, fmt.Sprintf("request line %q is not an origin-form HTTP/1.1 POST", line))
	}
	if target, _, _ := strings.Cut(strings.TrimPrefix(line, "POST "), "?"); strings.Contains(target+" ", "/../") || strings.Contains(target+" ", "/./") ||
		strings.HasSuffix(strings.TrimSuffix(target, " HTTP/1.1"), "/..") {
		problems = append(problems, fmt.Sprintf("request line %q has dot segments", line))
	}
	if h := values(fields, "Host"); len(h) != 1 || h[0] != upAddr {
		problems = append(problems, fmt.Sprintf("Host %q, want exactly [%s]", h, upAddr))
	}
	for _, name := range hopFields {
		if v := values(fields, name); len(v) > 0 {
			problems = append(problems, fmt.Sprintf("hop-by-hop %s: %q forwarded", name, v))
		}
	}
	if v := values(fields, "Connection"); len(v) > 0 && !(len(v) == 1 && strings.EqualFold(v[0], "close")) {
		problems = append(problems, fmt.Sprintf("Connection %q forwarded (only the proxy's own close may be sent)", v))
	}
	cl, te := values(fields, "Content-Length"), values(fields, "Transfer-Encoding")
	switch {
	case len(te) > 0 && (len(te) != 1 || te[0] != "chunked" || len(cl) > 0):
		problems = append(problems, fmt.Sprintf("framing Transfer-Encoding %q with Content-Length %q", te, cl))
	case len(cl) > 1:
		problems = append(problems, fmt.Sprintf("Content-Length %q", cl))
	case len(cl) == 1 && cl[0] != strconv.Itoa(len(s.body)):
		problems = append(problems, fmt.Sprintf("Content-Length %s for a %d-byte body", cl[0], len(s.body)))
	}
	for _, f := range forbid {
		if strings.Contains(strings.ToLower(string(s.head)), strings.ToLower(f)) {
			problems = append(problems, fmt.Sprintf("%q reached the upstream", f))
		}
	}
	return problems
}

// runSmuggling sends every case to f, whose upstream for model is up, and
// checks the answers and what reached up. A sentinel request after each
// case marks its end at the upstream; anything after the case's own
// requests and before the sentinel is one too many.
func runSmuggling(t *testing.T, f *frontend, up *upstream, model string, cases []smuggleCase) {
	name := f.name
	if up == nil {
		name = "gateway" // the reference passes bodies through, as the gateway does
	}
	for i, c := range cases {
		if (c.only != "" && c.only != name) || (c.app && up == nil) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			var mark int
			if up != nil {
				mark = up.mark()
			}
			want := len(c.want.codes)
			res := rawExchange(f.addr, []byte(expand(c.raw, f, model)), nilIfEmpty(expand(c.afterContinue, f, model)), want)
			codes := res.codes()
			matched := slices.Equal(codes, c.want.codes)
			expected := c.want
			for _, a := range c.alt {
				if !matched && slices.Equal(codes, a.codes) {
					matched, expected = true, a
				}
			}
			if !matched {
				t.Errorf("client got %s; want statuses %v", res, c.want.codes)
			}
			for _, a := range res.answers {
				if a.code >= 200 && a.code < 300 && string(a.body) != okBody {
					t.Errorf("client got %d with %q, not the upstream's answer", a.code, clip(a.body))
				}
			}
			if c.no100 && slices.Contains(res.interim, http.StatusContinue) {
				t.Errorf("client got 100 Continue for a body the frontend refuses: %s", res)
			}
			if up == nil {
				t.Logf("observed: client %v", codes)
				return // the reference has no upstream
			}
			sentinel := fmt.Sprintf("sentinel-%d", i)
			if code, err := f.post(model, sentinel); err != nil || code != http.StatusOK {
				t.Fatalf("sentinel request after the case: %d %v", code, err)
			}
			got, found := up.waitFor(mark, 20*time.Second, hasMarker(sentinel))
			if !found {
				t.Fatalf("the sentinel never reached the upstream; it saw %v", got)
			}
			got = got[:len(got)-1]
			var markers []string
			for _, s := range got {
				if s.err != nil && c.partial && !twoXX(codes) {
					continue // an aborted upstream body, as allowed
				}
				markers = append(markers, marker(s))
				for _, p := range checkUpstreamHead(s, up.Addr(), c.forbid) {
					t.Errorf("upstream request %s: %s", s, p)
				}
				if m := marker(s); m != "" && string(s.body) != caseBody(f, model, m) {
					t.Errorf("upstream body %q, want %q", s.body, caseBody(f, model, m))
				}
			}
			t.Logf("observed: client %v, upstream %q", codes, markers)
			if !slices.Equal(markers, expected.reach) && !(len(markers) == 0 && len(expected.reach) == 0) {
				t.Errorf("upstream received %d requests %q; want %q (client: %s):\n%v", len(got), markers, expected.reach, res, got)
			}
		})
	}
}

func twoXX(codes []int) bool {
	return slices.ContainsFunc(codes, func(c int) bool { return c >= 200 && c < 300 })
}

func nilIfEmpty(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// TestReferenceStatuses runs the case table against net/http itself: the
// statuses the table expects are the standard library's.
func TestReferenceStatuses(t *testing.T) {
	t.Parallel()
	runSmuggling(t, startReference(t), nil, "edge", smuggleCases)
}

// TestRouterSmuggling sends every case to mentatd-serve in front of a
// recording engine.
func TestRouterSmuggling(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "edge-smuggle")
	f := startRouter(t, map[string]*upstream{"edge-smuggle": up})
	runSmuggling(t, f, up, "edge-smuggle", smuggleCases)
}

// gatewaySmuggleConf is the [gateway] of the smuggling tests: a 1 MiB
// body limit, so its cases are quick.
var gatewaySmuggleConf = map[string]any{"request_size_limit_mb": 1}

// TestGatewaySmuggling sends every case to mortred-gateway in front of a
// recording model server.
func TestGatewaySmuggling(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	f := startGateway(t, map[string]*upstream{"EDGE": up}, gatewaySmuggleConf)
	runSmuggling(t, f, up, "EDGE", smuggleCases)
}
