package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// check sends one request and wants a 200 chat completion, so a
// misrouted path (404, 503) fails the run instead of being measured.
func check(ctx context.Context, url string, body []byte, header map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"chat.completion"`)) {
		return fmt.Errorf("POST %s: HTTP %d, want a chat completion: %s", url, resp.StatusCode, b)
	}
	return nil
}
