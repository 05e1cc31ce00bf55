package ctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var client = &http.Client{Timeout: 3 * time.Minute}

// call sends a request to the supervisor and decodes a 2xx JSON answer into
// out. The error of a non-2xx answer carries the server's own message.
func (c *CLI) call(method, path string, out any) error {
	if err := c.needToken(); err != nil {
		return err
	}
	return c.do(method, "http://"+c.G.Addr+path, nil, "", out, "the supervisor at "+c.G.Addr)
}

func (c *CLI) do(method, u string, body []byte, ctype string, out any, who string) error {
	return c.doWith(client, method, u, body, ctype, out, who)
}

// doWith is do through cl (a rollout waits longer than other calls).
func (c *CLI) doWith(cl *http.Client, method, u string, body []byte, ctype string, out any, who string) error {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.G.Token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := cl.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("cannot reach %s (connection refused): is it running? (--addr/--gateway or MORTREDCTL_ADDR/MORTREDCTL_GATEWAY_ADDR)", who)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("%s did not answer in time: %v", who, err)
		}
		return fmt.Errorf("%s: %v", who, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s: reading the answer: %v", who, err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return fmt.Errorf("%s refused the token (401): check --token / MORTRED_API_TOKEN", who)
	}
	if resp.StatusCode/100 != 2 {
		return &httpError{Status: resp.StatusCode, Body: data, Who: who}
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = data
		return nil
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s: unexpected answer: %v", who, err)
		}
	}
	return nil
}

type httpError struct {
	Status int
	Body   []byte
	Who    string
}

func (e *httpError) Error() string {
	var m struct {
		Error  string `json:"error"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
		StatusStr string `json:"status_str"`
		Results   []struct {
			Message string `json:"message"`
		} `json:"results"`
	}
	msg := strings.TrimSpace(string(e.Body))
	if json.Unmarshal(e.Body, &m) == nil {
		switch {
		case m.Error != "":
			msg = m.Error
		case len(m.Errors) > 0:
			msg = m.Errors[0].Message
		case len(m.Results) > 0 && m.Results[0].Message != "":
			// Every item failed: the first item's reason says what to fix.
			msg = m.StatusStr + ": " + m.Results[0].Message
		case m.StatusStr != "":
			msg = m.StatusStr
		}
	}
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	return fmt.Sprintf("%s answered %d %s: %s", e.Who, e.Status, http.StatusText(e.Status), msg)
}

type serverStatus struct {
	ID             string `json:"id"`
	State          string `json:"state"`
	PID            int    `json:"pid"`
	Ready          bool   `json:"ready"`
	RestartCount   int    `json:"restart_count"`
	LastExitStatus string `json:"last_exit_status"`
	StartedAtMS    int64  `json:"started_at_ms"`
	Error          string `json:"error"`
	Port           int    `json:"port"`
	Category       string `json:"category"`
}

func (c *CLI) status(args []string) error {
	if _, err := c.subFlags("status", args, func(*flag.FlagSet) {}); err != nil {
		return err
	}
	var raw json.RawMessage
	if err := c.call("GET", "/api/v1/status", &raw); err != nil {
		return err
	}
	if c.G.JSON {
		return printJSON(c.Out, raw)
	}
	var st struct {
		Gateway serverStatus   `json:"gateway"`
		Servers []serverStatus `json:"servers"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return err
	}
	rows := [][]string{statusRow(st.Gateway)}
	for _, s := range st.Servers {
		rows = append(rows, statusRow(s))
	}
	writeTable(c.Out, []string{"ID", "STATE", "READY", "PID", "RESTARTS", "PORT", "NOTE"}, rows)
	return nil
}

func statusRow(s serverStatus) []string {
	ready := "no"
	if s.Ready {
		ready = "yes"
	}
	pid := "-"
	if s.PID > 0 {
		pid = strconv.Itoa(s.PID)
	}
	note := s.Error
	if note == "" && s.LastExitStatus != "" && s.State != "running" {
		note = "last exit: " + s.LastExitStatus
	}
	return []string{s.ID, s.State, ready, pid, strconv.Itoa(s.RestartCount), strconv.Itoa(s.Port), note}
}

func (c *CLI) catalog(args []string) error {
	if _, err := c.subFlags("catalog", args, func(*flag.FlagSet) {}); err != nil {
		return err
	}
	var raw json.RawMessage
	if err := c.call("GET", "/api/v1/catalog", &raw); err != nil {
		return err
	}
	if c.G.JSON {
		return printJSON(c.Out, raw)
	}
	var cat struct {
		Servers []struct {
			ID, Name, Category, URI string
			Port                    int
		} `json:"servers"`
	}
	if err := json.Unmarshal(raw, &cat); err != nil {
		return err
	}
	var rows [][]string
	for _, s := range cat.Servers {
		rows = append(rows, []string{s.ID, s.Category, strconv.Itoa(s.Port), s.URI})
	}
	writeTable(c.Out, []string{"ID", "CATEGORY", "PORT", "URI"}, rows)
	return nil
}

func (c *CLI) lifecycle(action string, args []string) error {
	pos, err := c.subFlags(action, args, func(*flag.FlagSet) {})
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{action + " takes one server id (see mortredctl catalog)"}
	}
	var raw json.RawMessage
	if err := c.call("POST", "/api/v1/servers/"+url.PathEscape(pos[0])+"/"+action, &raw); err != nil {
		return err
	}
	if c.G.JSON {
		return printJSON(c.Out, raw)
	}
	fmt.Fprintf(c.Out, "%s %s: ok\n", action, pos[0])
	return nil
}

func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		_, err = w.Write(raw)
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}
