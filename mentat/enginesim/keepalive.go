package enginesim

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// readHeaderTimeout bounds a request's header read; it is not the
// keep-alive timeout, which only applies between requests.
const readHeaderTimeout = 30 * time.Second

// newHTTPServer builds a server that closes a keep-alive connection once it
// has been idle for idle, as uvicorn does after --timeout-keep-alive (5 s by
// default). A router that pools connections longer than that meets a closed
// one on its next request, which is exactly what enginesim must reproduce.
// There is no read or write deadline: a generation may stream for minutes.
// base is every request's parent context; cancelling it cuts all streams.
func newHTTPServer(h http.Handler, idle time.Duration, base context.Context, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		IdleTimeout:       idle,
		ReadHeaderTimeout: readHeaderTimeout,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}
