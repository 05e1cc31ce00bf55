package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Client calls a daemon's agent registration API. It is what `mentatd
// agent` uses; any other agent may speak the same JSON (docs/mentatd.md).
type Client struct {
	// Base is the daemon's address, "host:port".
	Base string
	HTTP *http.Client
}

// NewClient returns a client for the daemon at hostport with a per-call
// timeout.
func NewClient(hostport string, timeout time.Duration) *Client {
	return &Client{Base: hostport, HTTP: &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second}}}
}

// APIError is an answer other than 200 from the daemon.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("daemon answered %d: %s", e.Status, e.Message) }

// IsUnknownAgent reports whether err means "register again".
func IsUnknownAgent(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// IsRejected reports whether the daemon refused the request as invalid
// (400, 409, 413, 415): sending it again unchanged will not help.
func IsRejected(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Status {
	case http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return true
	}
	return false
}

func (c *Client) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.Base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = string(bytes.TrimSpace(data))
		}
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// Register sends the agent's whole state.
func (c *Client) Register(ctx context.Context, r RegisterRequest) (RegisterResponse, error) {
	var out RegisterResponse
	err := c.call(ctx, PathRegister, r, &out)
	return out, err
}

// Heartbeat keeps the registration alive and returns the daemon's boot id.
func (c *Client) Heartbeat(ctx context.Context, agentID string) (HeartbeatResponse, error) {
	var out HeartbeatResponse
	err := c.call(ctx, PathHeartbeat, AgentRef{AgentID: agentID}, &out)
	return out, err
}

// SetActor reports one actor's state.
func (c *Client) SetActor(ctx context.Context, u ActorUpdate) error {
	return c.call(ctx, PathActor, u, nil)
}

// SetNote sets or clears a service's note.
func (c *Client) SetNote(ctx context.Context, u NoteUpdate) error {
	return c.call(ctx, PathNote, u, nil)
}

// Deregister removes the agent and its actors.
func (c *Client) Deregister(ctx context.Context, agentID string) error {
	return c.call(ctx, PathDeregister, AgentRef{AgentID: agentID}, nil)
}

// Close releases idle connections.
func (c *Client) Close() { c.HTTP.CloseIdleConnections() }
