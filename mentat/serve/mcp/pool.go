package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fe64bb06/frontdoor/internal/version"
)

// pool holds one client session per upstream MCP URL. A session is made on
// first use, shared by every call to that URL, and made again when the
// upstream has forgotten it.
type pool struct {
	logger         *slog.Logger
	connectTimeout time.Duration
	httpClient     *http.Client
	// onListChanged is told which URL announced a change to its tools.
	onListChanged func(url string)

	ctx    context.Context // cancelled by close; parent of every dial
	cancel context.CancelFunc
	wg     sync.WaitGroup // dials, session closers and watchers

	mu        sync.Mutex
	upstreams map[string]*upstream
	closed    bool

	progressSeq atomic.Uint64
	progressMu  sync.Mutex
	progress    map[string]*progressCall // upstream progress token → call
}

// errPoolClosed is returned once the endpoint is closing.
var errPoolClosed = errors.New("the MCP endpoint is shutting down")

// connectError says the upstream could not be reached or refused the
// handshake; the call was never sent.
type connectError struct {
	url string
	err error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("cannot connect to %s: %v", e.url, e.err)
}
func (e *connectError) Unwrap() error { return e.err }

func newPool(logger *slog.Logger, connectTimeout time.Duration, onListChanged func(string)) *pool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{
		logger:         logger,
		connectTimeout: connectTimeout,
		// No client-wide timeout: SSE streams are long-lived and every call
		// carries its own deadline.
		onListChanged: onListChanged,
		ctx:           ctx,
		cancel:        cancel,
		upstreams:     map[string]*upstream{},
		progress:      map[string]*progressCall{},
	}
	p.httpClient = &http.Client{Transport: &progressTap{
		next:    http.DefaultTransport.(*http.Transport).Clone(),
		deliver: p.deliverProgress,
	}}
	return p
}

// get returns the upstream for url, creating its (unconnected) entry.
func (p *pool) get(url string) (*upstream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPoolClosed
	}
	u := p.upstreams[url]
	if u == nil {
		u = &upstream{pool: p, url: url}
		u.client = sdk.NewClient(&sdk.Implementation{Name: "mentatd-serve", Version: version.Version}, &sdk.ClientOptions{
			ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
				if p.onListChanged != nil {
					p.onListChanged(url)
				}
			},
		})
		p.upstreams[url] = u
	}
	return u, nil
}

// retain closes the sessions of every URL not in keep (groups that left).
func (p *pool) retain(keep map[string]bool) {
	p.mu.Lock()
	var drop []*upstream
	for url, u := range p.upstreams {
		if !keep[url] {
			drop = append(drop, u)
			delete(p.upstreams, url)
		}
	}
	p.mu.Unlock()
	for _, u := range drop {
		u.shutdown()
	}
}

// close ends every session and waits for the pool's goroutines.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	all := p.upstreams
	p.upstreams = map[string]*upstream{}
	p.mu.Unlock()
	for _, u := range all {
		u.shutdown()
	}
	p.cancel()
	p.wg.Wait()
	p.httpClient.CloseIdleConnections()
}

// upstream is one MCP server the router is a client of.
type upstream struct {
	pool   *pool
	url    string
	client *sdk.Client

	mu      sync.Mutex
	cs      *sdk.ClientSession
	dial    chan struct{} // non-nil while a connect runs; closed when it ends
	dialErr error
	shut    bool
}

// session returns a connected session, connecting if needed. The connect
// runs under the pool's context, not ctx, so one impatient caller does not
// fail the dial for the others waiting on it.
func (u *upstream) session(ctx context.Context) (*sdk.ClientSession, error) {
	u.mu.Lock()
	if u.shut {
		u.mu.Unlock()
		return nil, errPoolClosed
	}
	if u.cs != nil {
		cs := u.cs
		u.mu.Unlock()
		return cs, nil
	}
	if u.dial == nil {
		u.dial = make(chan struct{})
		u.pool.wg.Add(1)
		go u.connect(u.dial)
	}
	dial := u.dial
	u.mu.Unlock()
	select {
	case <-dial:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cs != nil {
		return u.cs, nil
	}
	if u.dialErr == nil {
		return nil, errPoolClosed
	}
	return nil, u.dialErr
}

func (u *upstream) connect(done chan struct{}) {
	defer u.pool.wg.Done()
	ctx, cancel := context.WithTimeout(u.pool.ctx, u.pool.connectTimeout)
	defer cancel()
	cs, err := u.client.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:   u.url,
		HTTPClient: u.pool.httpClient,
		// Our own retry is the fresh session below; the SDK's reconnect
		// loop would only stretch a dead upstream's failure over seconds.
		MaxRetries: 1,
	}, nil)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && u.pool.ctx.Err() == nil {
			err = fmt.Errorf("no answer to the MCP handshake within %s", u.pool.connectTimeout)
		}
		err = &connectError{url: u.url, err: err}
	}
	u.mu.Lock()
	u.dial = nil
	u.dialErr = err
	if err == nil {
		if u.shut {
			u.mu.Unlock()
			_ = cs.Close()
			close(done)
			return
		}
		u.cs = cs
		// A session the upstream ends (its GET stream got 404, say) is
		// dropped at once, so the next caller connects afresh instead of
		// sending into a dead connection.
		u.pool.wg.Add(1)
		go func() {
			defer u.pool.wg.Done()
			_ = cs.Wait()
			u.forget(cs)
		}()
	}
	u.mu.Unlock()
	close(done)
	if err != nil {
		u.pool.logger.Debug("mcp_upstream_connect_failed", "url", u.url, "err", err)
	}
}

// forget drops cs if it is still the current session and closes it.
func (u *upstream) forget(cs *sdk.ClientSession) {
	u.mu.Lock()
	if u.cs == cs {
		u.cs = nil
	}
	u.mu.Unlock()
	u.pool.wg.Add(1)
	go func() {
		defer u.pool.wg.Done()
		_ = cs.Close()
	}()
}

func (u *upstream) shutdown() {
	u.mu.Lock()
	u.shut = true
	cs := u.cs
	u.cs = nil
	u.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
}

// sessionMissing reports that the upstream answered 404 for our session: it
// forgot it, and did not process the request, so sending it again on a
// fresh session is safe even for a tool call.
func sessionMissing(err error) bool { return errors.Is(err, sdk.ErrSessionMissing) }

// sessionLost also counts a connection that ended under the request; only
// a request that is safe to repeat (a list) may be retried on that.
func sessionLost(err error) bool {
	return sessionMissing(err) || errors.Is(err, sdk.ErrConnectionClosed)
}

// do runs fn on a session; when retry says the session was lost it connects
// again once and repeats fn.
func (u *upstream) do(ctx context.Context, retry func(error) bool, fn func(*sdk.ClientSession) error) error {
	cs, err := u.session(ctx)
	if err != nil {
		return err
	}
	err = fn(cs)
	if sessionLost(err) {
		u.forget(cs)
	}
	if !retry(err) || ctx.Err() != nil {
		return err
	}
	u.pool.logger.Info("mcp_upstream_session_lost", "url", u.url, "err", err)
	if cs, err = u.session(ctx); err != nil {
		return err
	}
	err = fn(cs)
	if sessionLost(err) {
		u.forget(cs)
	}
	return err
}
