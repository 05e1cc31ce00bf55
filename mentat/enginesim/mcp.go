package enginesim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/fe64bb06/frontdoor/internal/version"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The management server: a few tools about this engine on Streamable HTTP
// at /mcp, for both protocol eras on one path.
const (
	mcpPath = "/mcp"
	// mcpSessionTimeout reaps legacy sessions clients leave open.
	mcpSessionTimeout = 10 * time.Minute
	// maxWindow bounds latency_percentiles' blocking window.
	maxWindow = 600.0
	// modernProtocol is the first protocol version only the stateless
	// handler serves.
	modernProtocol = "2026-07-28"
	mcpMaxBody     = 4 << 20
)

type mcpServer struct {
	e                   *Engine
	server              *mcp.Server
	stateful, stateless http.Handler
}

func (e *Engine) newMCPServer() *mcpServer {
	s := mcp.NewServer(&mcp.Implementation{Name: "enginesim", Version: version.Version}, &mcp.ServerOptions{
		Instructions: "Management tools of one simulated vLLM engine (enginesim).",
		Capabilities: &mcp.ServerCapabilities{},
	})
	m := &mcpServer{e: e, server: s}
	mcp.AddTool(s, &mcp.Tool{
		Name:        "engine_status",
		Description: "Queue, running requests, KV cache usage, current latency settings and totals since start.",
	}, m.engineStatus)
	mcp.AddTool(s, &mcp.Tool{
		Name: "latency_percentiles",
		Description: "Samples time to first token and inter-token latency of the requests served during the next " +
			"window_s seconds (the call blocks that long), then returns p50/p90/p99 of each.",
	}, m.latencyPercentiles)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "set_latency",
		Description: "Changes the time to first token, inter-token latency and jitter at run time; omitted fields keep their value.",
	}, m.setLatency)
	get := func(*http.Request) *mcp.Server { return s }
	m.stateful = mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{SessionTimeout: mcpSessionTimeout})
	m.stateless = mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
	return m
}

// closeSessions ends the legacy sessions still open, at shutdown.
func (m *mcpServer) closeSessions() {
	for ss := range m.server.Sessions() {
		_ = ss.Close()
	}
}

// handler dispatches each request to the stateless handler (protocol
// 2026-07-28 and later) or the stateful one (2025 clients): by the
// MCP-Protocol-Version header, then a session id, then the method, then a
// look at the body.
func (m *mcpServer) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != mcpPath {
			http.Error(w, "not found: the MCP endpoint is "+mcpPath, http.StatusNotFound)
			return
		}
		if !loopbackOrigin(r.Header.Get("Origin")) {
			http.Error(w, "forbidden: cross-origin requests from a non-loopback Origin are refused", http.StatusForbidden)
			return
		}
		if modernRequest(r) {
			m.stateless.ServeHTTP(w, r)
			return
		}
		m.stateful.ServeHTTP(w, r)
	})
}

func modernRequest(r *http.Request) bool {
	if v := r.Header.Get("MCP-Protocol-Version"); v != "" {
		return v >= modernProtocol
	}
	if r.Header.Get("Mcp-Session-Id") != "" || r.Method != http.MethodPost {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, mcpMaxBody))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if err != nil {
		return false
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return false
	}
	_, hasVersion := msg.Params.Meta[mcp.MetaKeyProtocolVersion]
	return msg.Method == "server/discover" || hasVersion
}

// loopbackOrigin allows no Origin (non-browser clients) and loopback ones.
func loopbackOrigin(origin string) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

type latencyOut struct {
	TTFT   string  `json:"ttft"`
	ITL    string  `json:"itl"`
	TTFTS  float64 `json:"ttft_s"`
	ITLS   float64 `json:"itl_s"`
	Jitter float64 `json:"jitter"`
}

func latencyView(l latencySettings) latencyOut {
	return latencyOut{TTFT: l.TTFT.String(), ITL: l.ITL.String(), TTFTS: l.TTFT.Seconds(), ITLS: l.ITL.Seconds(), Jitter: l.Jitter}
}

type finishedOut struct {
	Stop   int64 `json:"stop"`
	Length int64 `json:"length"`
	Abort  int64 `json:"abort"`
}

type totalsOut struct {
	Requests         int64       `json:"requests"`
	Finished         finishedOut `json:"finished"`
	PromptTokens     int64       `json:"prompt_tokens"`
	GenerationTokens int64       `json:"generation_tokens"`
	Preemptions      int64       `json:"preemptions"`
	InjectedFailures int64       `json:"injected_failures"`
	QueueFull        int64       `json:"queue_full"`
}

// cacheOut is the prefix cache part of engine_status.
type cacheOut struct {
	Enabled      bool    `json:"enabled"`
	BlockSize    int     `json:"block_size"`
	Blocks       int     `json:"blocks"`
	BlocksUsed   int     `json:"blocks_used"`
	CachedBlocks int     `json:"cached_blocks"`
	CachedTokens int     `json:"cached_tokens"`
	QueryTokens  int64   `json:"query_tokens"`
	HitTokens    int64   `json:"hit_tokens"`
	HitRate      float64 `json:"hit_rate"`
	Evictions    int64   `json:"evictions"`
}

type statusOut struct {
	Model            string   `json:"model"`
	ServedModelNames []string `json:"served_model_names"`
	UptimeS          float64  `json:"uptime_s"`
	Running          int      `json:"running"`
	Waiting          int      `json:"waiting"`
	MaxNumSeqs       int      `json:"max_num_seqs"`
	MaxModelLen      int      `json:"max_model_len"`
	KVCacheUsage     float64  `json:"kv_cache_usage"`
	KVCacheTokens    int      `json:"kv_cache_tokens"`
	PrefixCache      cacheOut `json:"prefix_cache"`
	// The fixed cost model: prefill per uncached token, the step budget
	// and the decode knee.
	PrefillPerToken     string     `json:"prefill_per_token"`
	MaxNumBatchedTokens int        `json:"max_num_batched_tokens"`
	DecodeKnee          int        `json:"decode_knee"`
	Latency             latencyOut `json:"latency"`
	Totals              totalsOut  `json:"totals"`
}

func (m *mcpServer) engineStatus(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, statusOut, error) {
	e := m.e
	st := e.sched.state()
	rate := 0.0
	if st.Queries > 0 {
		rate = float64(st.Hits) / float64(st.Queries)
	}
	return nil, statusOut{
		Model: e.cfg.Model, ServedModelNames: e.cfg.ServedModelNames,
		UptimeS: time.Since(e.started).Seconds(),
		Running: st.Running, Waiting: st.Waiting, MaxNumSeqs: e.cfg.MaxNumSeqs, MaxModelLen: e.cfg.MaxModelLen,
		KVCacheUsage: st.Usage, KVCacheTokens: st.Blocks * st.BlockSize,
		PrefixCache: cacheOut{
			Enabled: st.Caching, BlockSize: st.BlockSize, Blocks: st.Blocks, BlocksUsed: st.BlocksUsed,
			CachedBlocks: st.CachedBlocks, CachedTokens: st.CachedBlocks * st.BlockSize,
			QueryTokens: st.Queries, HitTokens: st.Hits, HitRate: rate, Evictions: st.Evictions,
		},
		Latency:         latencyView(e.lat.get()),
		PrefillPerToken: e.cfg.PrefillPerToken.String(), MaxNumBatchedTokens: e.cfg.MaxNumBatchedTokens, DecodeKnee: e.cfg.DecodeKnee,
		Totals: totalsOut{
			Requests: e.stats.requests.Load(),
			Finished: finishedOut{
				Stop: e.stats.finishedStop.Load(), Length: e.stats.finishedLength.Load(), Abort: e.stats.finishedAbort.Load(),
			},
			PromptTokens: e.stats.promptTokens.Load(), GenerationTokens: e.stats.generationTokens.Load(),
			Preemptions: e.stats.preemptions.Load(), InjectedFailures: e.stats.injectedFailures.Load(),
			QueueFull: e.stats.queueFull.Load(),
		},
	}, nil
}

type percentilesIn struct {
	WindowS float64 `json:"window_s" jsonschema:"sampling window in seconds, more than 0 and at most 600; the call blocks this long"`
}

type percentilesOut struct {
	WindowS        float64     `json:"window_s"`
	TTFT           percentiles `json:"ttft"`
	ITL            percentiles `json:"itl"`
	DroppedSamples int         `json:"dropped_samples"`
}

func (m *mcpServer) latencyPercentiles(ctx context.Context, _ *mcp.CallToolRequest, in percentilesIn) (*mcp.CallToolResult, percentilesOut, error) {
	if !(in.WindowS > 0 && in.WindowS <= maxWindow) {
		return nil, percentilesOut{}, fmt.Errorf("window_s must be more than 0 and at most %v seconds, got %v", maxWindow, in.WindowS)
	}
	w, err := m.e.samples.collect(ctx, time.Duration(in.WindowS*float64(time.Second)))
	if err != nil {
		return nil, percentilesOut{}, fmt.Errorf("sampling window ended early: %w", err)
	}
	return nil, percentilesOut{WindowS: in.WindowS, TTFT: summarize(w.ttft), ITL: summarize(w.itl), DroppedSamples: w.dropped}, nil
}

type setLatencyIn struct {
	TTFT   *string  `json:"ttft,omitempty" jsonschema:"time to first token as a Go duration, e.g. 150ms or 1.5s"`
	ITL    *string  `json:"itl,omitempty" jsonschema:"inter-token latency as a Go duration, e.g. 20ms"`
	Jitter *float64 `json:"jitter,omitempty" jsonschema:"random spread of each delay as a fraction from 0 to 1"`
}

type setLatencyOut struct {
	Previous latencyOut `json:"previous"`
	Current  latencyOut `json:"current"`
}

func (m *mcpServer) setLatency(_ context.Context, _ *mcp.CallToolRequest, in setLatencyIn) (*mcp.CallToolResult, setLatencyOut, error) {
	prev := m.e.lat.get()
	next := prev
	parse := func(name string, s *string, dst *time.Duration) error {
		if s == nil {
			return nil
		}
		d, err := time.ParseDuration(*s)
		if err != nil || d < 0 {
			return fmt.Errorf("%s %q is not a non-negative Go duration such as 150ms or 1.5s", name, *s)
		}
		*dst = d
		return nil
	}
	if err := parse("ttft", in.TTFT, &next.TTFT); err != nil {
		return nil, setLatencyOut{}, err
	}
	if err := parse("itl", in.ITL, &next.ITL); err != nil {
		return nil, setLatencyOut{}, err
	}
	if in.Jitter != nil {
		if !(*in.Jitter >= 0 && *in.Jitter <= 1) {
			return nil, setLatencyOut{}, fmt.Errorf("jitter %v must be between 0 and 1", *in.Jitter)
		}
		next.Jitter = *in.Jitter
	}
	m.e.lat.set(next.TTFT, next.ITL, next.Jitter)
	m.e.log.Info("latency_set", "ttft", next.TTFT.String(), "itl", next.ITL.String(), "jitter", next.Jitter)
	return nil, setLatencyOut{Previous: latencyView(prev), Current: latencyView(next)}, nil
}
