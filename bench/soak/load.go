package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

// The load's shape: a few clients, each sending one request after
// another with a pause between, so the load is bounded by construction.
const (
	openaiClients  = 3
	mortredClients = 2
	// maxLateJobs bounds the jobs waiting to be polled late.
	maxLateJobs = 16
)

func (r *run) mentatPaths() map[string][]string {
	paths := map[string][]string{}
	for _, e := range r.mentat.engines {
		paths[e.model] = append(paths[e.model], "engine-"+e.group, "agent-"+e.group)
		if e.node != "" {
			paths[e.model] = append(paths[e.model], e.node)
		}
	}
	for m := range paths {
		for _, rt := range r.mentat.routers {
			paths[m] = append(paths[m], rt.name)
		}
		paths[m] = append(paths[m], "disk")
	}
	return paths
}

func (r *run) newMentatClient() *mentatClient {
	return &mentatClient{front: r.mentat.front, http: r.http, paths: r.mentatPaths()}
}

func (r *run) newMortredClient() *mortredClient {
	paths := map[string][]string{}
	for _, m := range mortredModels {
		paths[m.id] = []string{"model-" + m.id, "gateway", "supervisor", "disk"}
	}
	return &mortredClient{gw: r.mortred.gateway(), http: r.http, paths: paths}
}

// startLoad starts every client; each stops when ctx ends.
func (r *run) startLoad(ctx context.Context, wg *sync.WaitGroup, mc *mortredClient) {
	seed := uint64(r.cfg.Seed)
	loop := func(n uint64, pauseMin, pauseMax time.Duration, step func(*rand.Rand) record.Result) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(seed, n))
			for ctx.Err() == nil {
				res := step(rnd)
				if ctx.Err() != nil && res.Failed {
					return // cut by the end of the run, not judged
				}
				r.rec.Result(res)
				pause(ctx, pauseMin+time.Duration(rnd.Int64N(int64(pauseMax-pauseMin))))
			}
		}()
	}
	c := r.newMentatClient()
	for i := range openaiClients {
		loop(uint64(i+1), 50*time.Millisecond, 400*time.Millisecond, func(rnd *rand.Rand) record.Result {
			model := ModelA
			if rnd.IntN(3) == 0 {
				model = ModelB
			}
			switch n := rnd.IntN(10); {
			case n == 0:
				return c.embeddings(ctx, rnd, model)
			case n < 3:
				return c.chat(ctx, rnd, model, rnd.IntN(2) == 0, true, rnd.IntN(2) == 0)
			default:
				return c.chat(ctx, rnd, model, rnd.IntN(2) == 0, false, rnd.IntN(3) > 0)
			}
		})
	}
	mcp := &mcpClient{front: r.mentat.front, http: r.http, paths: map[string][]string{}}
	tools := []string{"serve_status"}
	mcp.paths["serve_status"] = []string{"router-1", "router-2", "disk"}
	for _, e := range r.mentat.engines {
		if e.mcp != 0 {
			tool := e.group + "__engine_status"
			tools = append(tools, tool)
			mcp.paths[tool] = []string{"engine-" + e.group, "agent-" + e.group, "router-1", "router-2", "disk"}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer mcp.close()
		rnd := rand.New(rand.NewPCG(seed, 100))
		for ctx.Err() == nil {
			res := mcp.call(ctx, tools[rnd.IntN(len(tools))])
			if ctx.Err() != nil && res.Failed {
				return
			}
			r.rec.Result(res)
			pause(ctx, 500*time.Millisecond+time.Duration(rnd.Int64N(int64(1500*time.Millisecond))))
		}
	}()
	var late atomic.Int32
	for i := range mortredClients {
		loop(uint64(200+i), 100*time.Millisecond, 600*time.Millisecond, func(rnd *rand.Rand) record.Result {
			models := []string{ModelOCR, ModelNSFW, ModelTest}
			model := models[rnd.IntN(len(models))]
			switch n := rnd.IntN(10); {
			case n < 5:
				return mc.infer(ctx, mc.pick(rnd, model))
			case n < 7:
				k := 2 + rnd.IntN(3)
				ins := make([]*input, k)
				for j := range ins {
					ins[j] = mc.pick(rnd, ModelTest)
				}
				return mc.infer(ctx, ins...)
			case n < 8 && late.Load() < maxLateJobs:
				late.Add(1)
				in, d := mc.pick(rnd, model), 30*time.Second+time.Duration(rnd.Int64N(int64(90*time.Second)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer late.Add(-1)
					res := mc.job(ctx, in, d)
					if ctx.Err() != nil && (res.Failed || res.End.IsZero() || res.Status == 202) {
						return
					}
					r.rec.Result(res)
				}()
				return mc.job(ctx, mc.pick(rnd, model), 0)
			default:
				return mc.job(ctx, mc.pick(rnd, model), 0)
			}
		})
	}
	loop(300, 500*time.Millisecond, 2*time.Second, func(rnd *rand.Rand) record.Result {
		return r.bad(ctx, rnd, c, mc)
	})
}

// bad sends one request an attacker or a broken client would.
func (r *run) bad(ctx context.Context, rnd *rand.Rand, c *mentatClient, mc *mortredClient) record.Result {
	front, gw := r.mentat.front, r.mortred.gateway()
	routerOnly := []string{"router-1", "router-2", "disk"}
	gwPath := []string{"gateway", "supervisor", "disk"}
	ri := rnd.IntN(len(r.mentat.routers))
	router := r.mentat.routers[ri]
	switch rnd.IntN(11) {
	case 0:
		return expect(ctx, r.http, "bad-json-router", routerOnly, newReq("POST", front+"/v1/chat/completions", "", []byte(`{"model":"soak-a","messages":[`)), 400)
	case 1:
		return expect(ctx, r.http, "bad-unknown-model-router", routerOnly,
			newReq("POST", front+"/v1/chat/completions", "", []byte(`{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`)), 404)
	case 2:
		// The gateway does not parse a body: the model server refuses it,
		// so a restarting model server answers 503 instead, and is on the
		// request's path.
		return expect(ctx, r.http, "bad-json-gateway", mc.paths[ModelTest], newReq("POST", gw+"/v1/models/"+ModelTest+"/infer", apiToken, []byte(`{"images":[`)), 400)
	case 3:
		return expect(ctx, r.http, "bad-unknown-model-gateway", gwPath, newReq("POST", gw+"/v1/models/NO_SUCH_MODEL/infer", apiToken, body(mc.pick(rnd, ModelTest))), 404)
	case 4:
		// 429 once this address has sent many wrong keys (bad_key_rate).
		return expect(ctx, r.http, "bad-token-gateway", gwPath, newReq("POST", gw+"/v1/models/"+ModelTest+"/infer", "wrong-token-"+words(rnd, 1), body(mc.pick(rnd, ModelTest))), 401, 429)
	case 5:
		big := `{"images":["` + strings.Repeat("A", GatewayBodyLimitMB<<20+4096) + `"]}`
		return expect(ctx, r.http, "bad-oversized-gateway", gwPath, newReq("POST", gw+"/v1/models/"+ModelTest+"/infer", apiToken, []byte(big)), 413)
	case 6:
		return stalled(ctx, "bad-stalled-body-router", []string{router.name, "disk"}, strings.TrimPrefix(r.mentat.routerURL(ri), "http://"), "/v1/chat/completions", "")
	case 7:
		return stalled(ctx, "bad-stalled-body-gateway", gwPath, strings.TrimPrefix(gw, "http://"), "/v1/models/"+ModelTest+"/infer", apiToken)
	case 8:
		// A body trickled in over ~2 s is served like any other.
		b := fmt.Sprintf(`{"model":%q,"max_tokens":5,"ignore_eos":true,"messages":[{"role":"user","content":%q}]}`, ModelB, words(rnd, 30))
		req, _ := http.NewRequest(http.MethodPost, r.mentat.routerURL(ri)+"/v1/chat/completions", &slowBody{b: []byte(b), piece: len(b)/8 + 1, pause: 250 * time.Millisecond})
		req.ContentLength = int64(len(b))
		req.Header.Set("Content-Type", "application/json")
		path := append([]string{router.name}, c.path(ModelB)...)
		return expect(ctx, r.http, "bad-slow-body-router", path, req, 200)
	case 9:
		return hangUp(ctx, c, rnd)
	default:
		return expect(ctx, r.http, "bad-method-router", routerOnly, newReq("DELETE", front+"/v1/chat/completions", "", nil), 405, 404)
	}
}
