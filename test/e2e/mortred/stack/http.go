package stack

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

// Client is the tests' HTTP client; CloseIdle ends its keep-alive
// connections (call it before a leak check).
var Client = &http.Client{
	Timeout:   2 * time.Minute,
	Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second},
	// Answers are what the tests check, redirects included.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// CloseIdle closes the client's idle connections.
func CloseIdle() { Client.CloseIdleConnections() }

// Reply is a finished HTTP exchange.
type Reply struct {
	Code   int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v and returns v's error as a string for messages.
func (r Reply) JSON(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("decoding %d %q: %v", r.Code, trimBody(r.Body), err)
	}
	return nil
}

func (r Reply) String() string { return fmt.Sprintf("%d %s", r.Code, trimBody(r.Body)) }

func trimBody(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}

// Req describes one request.
type Req struct {
	Method, URL, Token, CType string
	Body                      []byte
	Header                    map[string]string
}

// Do sends the request; a transport error is returned as is.
func Do(r Req) (Reply, error) {
	if r.Method == "" {
		r.Method = http.MethodGet
		if r.Body != nil {
			r.Method = http.MethodPost
		}
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequest(r.Method, r.URL, body)
	if err != nil {
		return Reply{}, err
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	if r.CType == "" && r.Body != nil {
		r.CType = "application/json"
	}
	if r.CType != "" {
		req.Header.Set("Content-Type", r.CType)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	resp, err := Client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{Code: resp.StatusCode, Header: resp.Header, Body: data}, err
	}
	return Reply{Code: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// Images are small test PNGs, base64.
var (
	DarkPNG  = base64.StdEncoding.EncodeToString(testmodel.GrayPNG(8, 8, 20))
	LightPNG = base64.StdEncoding.EncodeToString(testmodel.GrayPNG(8, 8, 240))
)

// Envelope builds a request body with these images and params (JSON, may be "").
func Envelope(reqID, params string, images ...string) []byte {
	q := make([]string, len(images))
	for i, im := range images {
		q[i] = `"` + im + `"`
	}
	s := `{"req_id":"` + reqID + `","images":[` + strings.Join(q, ",") + `]`
	if params != "" {
		s += `,"params":` + params
	}
	return []byte(s + "}")
}

// Response is the part of the answer envelope the tests read.
type Response struct {
	Status    int    `json:"status"`
	StatusStr string `json:"status_str"`
	TaskID    string `json:"task_id"`
	Partial   bool   `json:"partial"`
	Results   []struct {
		Status int             `json:"status"`
		Data   json.RawMessage `json:"data"`
	} `json:"results"`
	Errors []struct {
		Pointer string `json:"pointer"`
		Message string `json:"message"`
	} `json:"errors"`
}
