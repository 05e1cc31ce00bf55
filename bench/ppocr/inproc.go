package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/model"
)

// inProcess is the limit: `workers` model instances (as many as the server
// runs), each looped by one goroutine on Prepare + Run, with batches of
// `batch` items, for d or maxCalls per worker, whichever ends first.
func inProcess(name, kind, confPath, lib string, workers, batch int, img []byte, d time.Duration, maxCalls int) (*result, error) {
	f, err := model.Lookup(kind)
	if err != nil {
		return nil, err
	}
	insts := make([]model.Model, workers)
	for i := range insts {
		if insts[i], err = f(confPath, model.Options{ORTLib: lib, IntraOpThreads: 1}); err != nil {
			return nil, fmt.Errorf("%s: %w", confPath, err)
		}
		defer insts[i].Close()
	}
	res := &result{name: name, perCall: batch}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for _, m := range insts {
		wg.Add(1)
		go func(m model.Model) {
			defer wg.Done()
			var lat []time.Duration
			items, errs := 0, 0
			var firstErr error
			for n := 0; n < maxCalls && time.Now().Before(deadline); n++ {
				var err error
				t0 := time.Now()
				in := make([]model.Input, batch)
				for k := range in {
					if in[k], err = m.Prepare(img, nil); err != nil {
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
	return res, nil
}
