package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/model"
)

// inProc is the limit: `workers` model instances built by the same factory,
// from the same model TOML and with the same intra-op threads as the
// server's (as many as its worker_nums), each looped by one goroutine on
// Prepare + Run of `batch` items. Prepare decodes and resizes the PNG, as
// the server's does for every item, so both paths pay the image decode; what
// the loop leaves out is exactly the server's own work (HTTP, envelope,
// base64, queue, response) and its clients'.
type inProc struct {
	insts []model.Model
	batch int
	img   []byte
}

func newInProc(kind, confPath, lib string, workers, threads, batch int, img []byte) (*inProc, error) {
	f, err := model.Lookup(kind)
	if err != nil {
		return nil, err
	}
	p := &inProc{batch: batch, img: img}
	for range workers {
		m, err := f(confPath, model.Options{ORTLib: lib, IntraOpThreads: threads})
		if err != nil {
			p.close()
			return nil, fmt.Errorf("%s: %w", confPath, err)
		}
		p.insts = append(p.insts, m)
	}
	return p, nil
}

func (p *inProc) close() {
	for _, m := range p.insts {
		_ = m.Close()
	}
}

// run loops every instance for d or maxCalls calls each, whichever ends
// first.
func (p *inProc) run(name string, d time.Duration, maxCalls int) *result {
	res := &result{name: name}
	var mu sync.Mutex
	var wg sync.WaitGroup
	cpu0 := selfCPU()
	start := time.Now()
	deadline := start.Add(d)
	for _, m := range p.insts {
		wg.Add(1)
		go func(m model.Model) {
			defer wg.Done()
			var lat []time.Duration
			items, errs := 0, 0
			var firstErr error
			in := make([]model.Input, p.batch)
			for n := 0; n < maxCalls && time.Now().Before(deadline); n++ {
				var err error
				t0 := time.Now()
				for k := range in {
					if in[k], err = m.Prepare(p.img, nil); err != nil {
						break
					}
				}
				var out []model.Result
				if err == nil {
					out, err = m.Run(context.Background(), in)
				}
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				lat = append(lat, time.Since(t0))
				items += len(out)
			}
			mu.Lock()
			res.latency = append(res.latency, lat...)
			res.items += items
			res.errors += errs
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
			mu.Unlock()
		}(m)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cpuSelf = selfCPU() - cpu0
	return res
}
