package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// child is one mortred-server child process on a loopback port.
type child struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

const benchToken = "ppocr-bench-token"

// setKey sets key = value in a model-server TOML body, adding the line to
// the table when the file does not have it.
func setKey(body, key, value string) string {
	re := regexp.MustCompile(`(?m)^` + key + `\s*=.*$`)
	if re.MatchString(body) {
		return re.ReplaceAllLiteralString(body, key+" = "+value)
	}
	// The server file is one table; a key appended at the end belongs to it.
	return strings.TrimRight(body, "\n") + "\n" + key + " = " + value + "\n"
}

// startServer runs bin/mortred-server on a copy of the model-server file
// with the bench's batch size, worker count and intra-op threads (so that
// the server runs exactly the instances the in-process loop runs), on port
// 0, and waits for its "listening on" line and /ready.
func startServer(bin, serverConf, modelConf, lib string, batch, workers, threads int, tmp string) (*child, error) {
	src, err := os.ReadFile(serverConf)
	if err != nil {
		return nil, err
	}
	body := string(src)
	body = setKey(body, "max_batch_size", strconv.Itoa(batch))
	body = setKey(body, "worker_nums", strconv.Itoa(workers))
	body = setKey(body, "intra_op_threads", strconv.Itoa(threads))
	body = setKey(body, "model_config_file_path", strconv.Quote(modelConf))
	body = setKey(body, "max_queue_depth", "0")
	conf := filepath.Join(tmp, fmt.Sprintf("server-b%d-%s", batch, filepath.Base(serverConf)))
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config", conf)
	cmd.Env = append(os.Environ(), "MORTRED_LISTEN_PORT=0", "MORTRED_AUTH_TOKEN="+benchToken, "MORTRED_ORT_LIB="+lib)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %v (run make build)", bin, err)
	}
	s := &child{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "mortred-server listening on "); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(s.done)
	}()
	select {
	case a := <-addr:
		s.addr = a
	case <-s.done:
		return nil, fmt.Errorf("%s exited before listening: %s", bin, strings.TrimSpace(stderr.String()))
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, fmt.Errorf("%s did not listen within 60s", bin)
	}
	for end := time.Now().Add(60 * time.Second); ; {
		resp, err := http.Get("http://" + s.addr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(end) {
			s.stop()
			return nil, fmt.Errorf("%s not ready within 60s: %s", bin, strings.TrimSpace(stderr.String()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *child) pid() int { return s.cmd.Process.Pid }

func (s *child) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// httpLoad is `clients` keep-alive connections, each posting the same
// one-image request back to back. The request's bytes (headers and body)
// are built once, and answers are read with a minimal HTTP/1.1 reader, as
// wrk does: the clients share the server's two cores, so what they spend
// is taken from the server, and net/http's client costs several times
// more per request than reading one Content-Length answer.
type httpLoad struct {
	addr  string
	req   []byte
	conns []*conn
}

func newHTTPLoad(addr, uri string, clients int, img []byte) *httpLoad {
	body, _ := json.Marshal(map[string]any{"images": []string{base64.StdEncoding.EncodeToString(img)}})
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s",
		uri, addr, benchToken, len(body), body)
	l := &httpLoad{addr: addr, req: req}
	for range clients {
		l.conns = append(l.conns, &conn{addr: addr})
	}
	return l
}

func (l *httpLoad) close() {
	for _, c := range l.conns {
		c.close()
	}
}

// run posts from every connection for d or maxCalls calls each, whichever
// ends first. serverPID's CPU time is measured alongside this process's.
func (l *httpLoad) run(name string, d time.Duration, maxCalls, serverPID int) *result {
	res := &result{name: name}
	var mu sync.Mutex
	var wg sync.WaitGroup
	cpu0, srv0 := selfCPU(), procCPU(serverPID)
	start := time.Now()
	deadline := start.Add(d)
	for _, c := range l.conns {
		wg.Add(1)
		go func(c *conn) {
			defer wg.Done()
			var lat []time.Duration
			items, errs := 0, 0
			var firstErr error
			for n := 0; n < maxCalls && time.Now().Before(deadline); n++ {
				t0 := time.Now()
				if err := c.post(l.req); err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				lat = append(lat, time.Since(t0))
				items++
			}
			mu.Lock()
			res.latency = append(res.latency, lat...)
			res.items += items
			res.errors += errs
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cpuSelf, res.cpuServer = selfCPU()-cpu0, procCPU(serverPID)-srv0
	return res
}

// conn is one keep-alive client connection, redialled after an error or a
// Connection: close.
type conn struct {
	addr    string
	c       net.Conn
	br      *bufio.Reader
	body    []byte
	checked bool // the first answer is decoded in full, later ones checked by prefix
}

func (c *conn) close() {
	if c.c != nil {
		_ = c.c.Close()
		c.c = nil
	}
}

// okPrefix starts every answer of a one-image request that succeeded: the
// envelope's fields are written in a fixed order (status, status_str, …,
// results).
var okPrefix = []byte(`{"status":0,"status_str":"`)

// okItem is an item answered with an object or a list (detections) as data.
var okItem, okList = []byte(`"results":[{"status":0,"data":{`), []byte(`"results":[{"status":0,"data":[`)

func (c *conn) post(req []byte) error {
	if c.c == nil {
		nc, err := net.Dial("tcp", c.addr)
		if err != nil {
			return err
		}
		c.c, c.br = nc, bufio.NewReaderSize(nc, 16<<10)
	}
	_ = c.c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.c.Write(req); err != nil {
		c.close()
		return err
	}
	code, keep, err := c.read()
	if err != nil {
		c.close()
		return err
	}
	if !keep {
		c.close()
	}
	if code != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", code, c.body)
	}
	if !bytes.HasPrefix(c.body, okPrefix) || !(bytes.Contains(c.body, okItem) || bytes.Contains(c.body, okList)) {
		return fmt.Errorf("bad answer: %.200s", c.body)
	}
	if !c.checked {
		var env struct {
			Status  int `json:"status"`
			Results []struct {
				Status int             `json:"status"`
				Data   json.RawMessage `json:"data"`
			} `json:"results"`
		}
		if err := json.Unmarshal(c.body, &env); err != nil || env.Status != 0 || len(env.Results) != 1 || env.Results[0].Status != 0 {
			return fmt.Errorf("bad answer: %.200s", c.body)
		}
		c.checked = true
	}
	return nil
}

// read reads one answer with a Content-Length body into c.body.
func (c *conn) read() (code int, keep bool, err error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	f := bytes.Fields(line)
	if len(f) < 2 || !bytes.HasPrefix(f[0], []byte("HTTP/1.")) {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	if code, err = strconv.Atoi(string(f[1])); err != nil {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	n, keep := -1, true
	for {
		h, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, _ := bytes.Cut(h, []byte(":"))
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if n, err = strconv.Atoi(string(v)); err != nil {
				return 0, false, fmt.Errorf("bad Content-Length %q", v)
			}
		case bytes.EqualFold(k, []byte("Connection")) && bytes.EqualFold(v, []byte("close")):
			keep = false
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			return 0, false, errors.New("chunked answers are not expected from mortred-server")
		}
	}
	if n < 0 {
		return 0, false, errors.New("answer without Content-Length")
	}
	if cap(c.body) < n {
		c.body = make([]byte, n)
	}
	c.body = c.body[:n]
	if _, err := io.ReadFull(c.br, c.body); err != nil {
		return 0, false, err
	}
	return code, keep, nil
}
