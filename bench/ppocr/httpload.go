package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// server is one mortred-server child process on a loopback port.
type server struct {
	cmd  *exec.Cmd
	base string
	done chan struct{}
}

const benchToken = "ppocr-bench-token"

// startServer runs bin/mortred-server on a copy of the model-server file with
// max_batch_size set, on port 0, and waits for its "listening on" line and
// /ready.
func startServer(bin, serverConf, modelConf, lib string, batch int, tmp string) (*server, error) {
	src, err := os.ReadFile(serverConf)
	if err != nil {
		return nil, err
	}
	body := string(src)
	body = regexp.MustCompile(`(?m)^max_batch_size\s*=.*$`).ReplaceAllString(body, fmt.Sprintf("max_batch_size = %d", batch))
	body = regexp.MustCompile(`(?m)^model_config_file_path\s*=.*$`).ReplaceAllString(body, fmt.Sprintf("model_config_file_path = %q", modelConf))
	body = regexp.MustCompile(`(?m)^max_queue_depth\s*=.*$`).ReplaceAllString(body, "max_queue_depth = 0")
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
	s := &server{cmd: cmd, done: make(chan struct{})}
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
		s.base = "http://" + a
	case <-s.done:
		return nil, fmt.Errorf("%s exited before listening: %s", bin, strings.TrimSpace(stderr.String()))
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, fmt.Errorf("%s did not listen within 60s", bin)
	}
	for end := time.Now().Add(60 * time.Second); ; {
		resp, err := http.Get(s.base + "/ready")
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

func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// overHTTP posts one-image requests from `clients` goroutines for d or
// maxCalls per client, whichever ends first.
func overHTTP(name, url string, clients int, img []byte, d time.Duration, maxCalls int) *result {
	body, _ := json.Marshal(map[string]any{"images": []string{base64.StdEncoding.EncodeToString(img)}})
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	res := &result{name: name, perCall: 1}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			items, errs := 0, 0
			var firstErr error
			for n := 0; n < maxCalls && time.Now().Before(deadline); n++ {
				t0 := time.Now()
				err := post(hc, url, body)
				if err != nil {
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
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func post(hc *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+benchToken)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	var env struct {
		Status  int `json:"status"`
		Results []struct {
			Status int             `json:"status"`
			Data   json.RawMessage `json:"data"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Status != 0 || len(env.Results) != 1 || env.Results[0].Status != 0 {
		return fmt.Errorf("bad answer: %.200s", b)
	}
	return nil
}
