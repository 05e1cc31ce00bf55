package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
)

// worker owns one model instance. It takes the oldest item, then — when
// batching is on — keeps taking items for up to max_batch_delay_ms or until
// max_batch_size, and runs them as one batch. Items whose request deadline
// has passed are answered with a timeout instead of being run.
func (s *Server) worker(ctx context.Context, m model.Model) {
	defer s.wg.Done()
	maxBatch, window := s.cfg.MaxBatchSize, s.cfg.BatchDelay()
	batch := make([]*item, 0, maxBatch)
	for {
		first := s.q.pop()
		if first == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.q.wake:
			}
			continue
		}
		batch = append(batch[:0], first)
		if maxBatch > 1 {
			batch = s.fill(ctx, batch, maxBatch, window)
		}
		s.runBatch(ctx, m, batch)
		clear(batch)
	}
}

// fill collects more items for a batch until it is full or the window ends.
func (s *Server) fill(ctx context.Context, batch []*item, maxBatch int, window time.Duration) []*item {
	start := time.Now()
	defer func() { s.m.batchWindowMS.Observe(msSince(start)) }()
	var timer *time.Timer
	for len(batch) < maxBatch {
		if it := s.q.pop(); it != nil {
			batch = append(batch, it)
			continue
		}
		if window <= 0 {
			break
		}
		if timer == nil {
			timer = time.NewTimer(window - time.Since(start))
			defer timer.Stop()
		}
		select {
		case <-s.q.wake:
		case <-timer.C:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// runBatch answers the items past their deadline with a timeout, prepares
// the others (one that fails Prepare fails alone) and runs those as one
// batch.
func (s *Server) runBatch(ctx context.Context, m model.Model, batch []*item) {
	now := time.Now()
	taken := make([]*item, 0, len(batch))
	for _, it := range batch {
		s.m.queueWaitMS.Observe(float64(now.Sub(it.enqueued).Nanoseconds()) / 1e6)
		if !now.Before(it.call.deadline) {
			// Past its deadline while queued: answered without a model run.
			it.image = nil
			it.call.drop(1)
			it.call.finish(it.idx, timeoutItem())
			continue
		}
		it.call.started()
		taken = append(taken, it)
	}
	if len(taken) == 0 {
		return
	}
	s.m.workersBusy.Inc()
	defer s.m.workersBusy.Dec()
	start := time.Now()
	live := make([]*item, 0, len(taken))
	inputs := make([]model.Input, 0, len(taken))
	for _, it := range taken {
		in, err := safePrepare(m, it.image, it.call.parsed.Params)
		it.image = nil
		it.call.drop(1)
		if err != nil {
			it.call.finish(it.idx, failedItem(err))
			continue
		}
		live, inputs = append(live, it), append(inputs, in)
	}
	prepared := time.Now()
	s.m.prepareMS.Observe(float64(prepared.Sub(start).Nanoseconds()) / 1e6)
	if len(live) == 0 {
		s.q.observe(prepared.Sub(start), len(taken))
		return
	}
	s.m.batchSize.Observe(float64(len(live)))
	results, err := safeRun(ctx, m, inputs)
	run := time.Since(prepared)
	s.m.inferenceMS.Observe(float64(run.Nanoseconds()) / 1e6)
	s.q.observe(time.Since(start), len(taken))

	switch {
	case err != nil:
		// Session-level failure: every participant fails with it.
		fail := failedItem(err)
		if ctx.Err() != nil {
			fail = envelope.Item{Status: envelope.StatusNotReady, Data: envelope.Null, Message: "the server is shutting down; retry on another instance"}
		} else {
			s.log.Warn("model_run_failed", "model", s.cfg.ID, "batch", len(live), "err", err)
		}
		for _, it := range live {
			it.call.finish(it.idx, fail)
		}
	case len(results) != len(live):
		s.log.Error("model_output_contract_failed", "model", s.cfg.ID, "batch", len(live), "results", len(results))
		msg := fmt.Sprintf("model returned %d results for %d inputs", len(results), len(live))
		for _, it := range live {
			it.call.finish(it.idx, envelope.Item{Status: envelope.StatusOutputContract, Data: envelope.Null, Message: msg})
		}
	default:
		for i, it := range live {
			it.call.finish(it.idx, resultItem(results[i]))
		}
	}
}

// safeRun turns a panicking model into a session-level error.
func safeRun(ctx context.Context, m model.Model, in []model.Input) (res []model.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("model panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return m.Run(ctx, in)
}

func resultItem(r model.Result) envelope.Item {
	if r.Err != nil {
		return failedItem(r.Err)
	}
	b, err := json.Marshal(r.Data)
	if err != nil {
		return envelope.Item{Status: envelope.StatusOutputContract, Data: envelope.Null, Message: "model output is not JSON-encodable: " + err.Error()}
	}
	return envelope.Item{Status: envelope.StatusOK, Data: b}
}

// failedItem maps an error to an item: an *ItemError keeps its status (one
// the table knows), anything else is a server error.
func failedItem(err error) envelope.Item {
	var ie *model.ItemError
	st := envelope.StatusServerError
	if errors.As(err, &ie) && known(ie.Status) && ie.Status != envelope.StatusOK {
		st = ie.Status
	}
	return envelope.Item{Status: st, Data: envelope.Null, Message: err.Error()}
}

func known(st envelope.Status) bool {
	for _, r := range envelope.Table {
		if r.Status == st {
			return true
		}
	}
	return false
}

func timeoutItem() envelope.Item {
	return envelope.Item{Status: envelope.StatusRunTimeout, Data: envelope.Null, Message: "model_run_timeout expired before this item finished; retry, or send fewer images per request"}
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Nanoseconds()) / 1e6 }
