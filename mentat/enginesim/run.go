package enginesim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// Run listens on Host:Port, and on Host:MCPPort when set, and serves until
// ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	api, err := listen(e.cfg.Host, e.cfg.Port, "--port")
	if err != nil {
		return err
	}
	var mcpLn net.Listener
	if e.cfg.MCPPort != 0 {
		if mcpLn, err = listen(e.cfg.Host, e.cfg.MCPPort, "--mcp-port"); err != nil {
			api.Close()
			return err
		}
	}
	return e.Serve(ctx, api, mcpLn)
}

func listen(host string, port int, flagName string) (net.Listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	network := "tcp"
	if ip := net.ParseIP(host); ip != nil && ip.To4() != nil {
		// Go would bind [::] for 0.0.0.0; vLLM (uvicorn) binds IPv4 only,
		// and that is what a bind check on the node must see.
		network = "tcp4"
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (free the port or choose another with %s)", addr, err, flagName)
	}
	return ln, nil
}

// Serve serves the OpenAI API on api and, when mcpLn is not nil, the
// management MCP server on it, until ctx ends or a server fails. Then it
// stops accepting, gives running requests ShutdownTimeout to finish, cuts
// the rest, and returns once every handler has returned. It owns and closes
// both listeners.
func (e *Engine) Serve(ctx context.Context, api, mcpLn net.Listener) error {
	base, cut := context.WithCancel(context.Background())
	defer cut()
	// inflight lets Serve return only after every handler has: Close does
	// not wait for them.
	var inflight sync.WaitGroup
	track := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			h.ServeHTTP(w, r)
		})
	}
	apiSrv := newHTTPServer(track(e.Handler()), e.cfg.KeepAliveTimeout, base, e.log)
	type served struct {
		srv *http.Server
		ln  net.Listener
	}
	all := []served{{apiSrv, api}}
	var mgmt *mcpServer
	if mcpLn != nil {
		mgmt = e.newMCPServer()
		all = append(all, served{newHTTPServer(track(mgmt.handler()), e.cfg.KeepAliveTimeout, base, e.log), mcpLn})
	}

	errc := make(chan error, len(all))
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	attrs := []any{"addr", api.Addr().String(), "model", e.cfg.Model, "served_model_names", e.cfg.ServedModelNames,
		"max_num_seqs", e.cfg.MaxNumSeqs, "max_model_len", e.cfg.MaxModelLen}
	if mcpLn != nil {
		attrs = append(attrs, "mcp", "http://"+mcpLn.Addr().String()+"/mcp")
	}
	e.log.Info("enginesim_listening", attrs...)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		e.log.Error("enginesim_serve_failed", "err", runErr)
	}

	// The management server has nothing to finish; its open streams would
	// only hold the shutdown up.
	for _, s := range all[1:] {
		_ = s.srv.Close()
	}
	if mgmt != nil {
		mgmt.closeSessions()
	}
	sctx, done := context.WithTimeout(context.Background(), e.cfg.ShutdownTimeout)
	defer done()
	if err := apiSrv.Shutdown(sctx); err != nil {
		st := e.sched.state()
		e.log.Warn("enginesim_shutdown_cut", "running", st.Running, "waiting", st.Waiting, "after", e.cfg.ShutdownTimeout.String())
		cut()
		_ = apiSrv.Close()
	}
	wg.Wait()
	inflight.Wait()
	e.log.Info("enginesim_stopped")
	return runErr
}
