package enginesim

import (
	"context"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// job is one validated generation request.
type job struct {
	id           string
	created      int64
	model        string
	promptTokens int
	// maxTokens is the most tokens to generate (finish "length"); stopAt is
	// where the text ends on its own (finish "stop"), MaxInt with ignore_eos.
	maxTokens int
	stopAt    int
	rng       *rand.Rand
	arrival   time.Time
	// cachedTokens is the prompt prefix served from the prefix cache on
	// the first admission, known once the first token is out.
	cachedTokens int
}

// promptSpec is a validated prompt: the text that seeds generation, its
// token ids (nil when only the count is needed: prefix caching off), the
// count, and the request's cache_salt.
type promptSpec struct {
	seed string
	ids  []int
	n    int
	salt string
}

// cacheSalt checks a request's cache_salt as vLLM does: absent, or a
// non-empty string.
func cacheSalt(s *string) (string, error) {
	if s == nil {
		return "", nil
	}
	if *s == "" {
		return "", badRequest("Parameter 'cache_salt' must be a non-empty string if provided.")
	}
	return *s, nil
}

// textPrompt tokenizes a rendered prompt; the ids are only built when the
// prefix cache needs them.
func (e *Engine) textPrompt(text, salt string) promptSpec {
	if !e.cfg.EnablePrefixCaching {
		return promptSpec{seed: text, n: CountTokens(text), salt: salt}
	}
	ids := Tokenize(make([]int, 0, len(text)/3+1), text)
	return promptSpec{seed: text, ids: ids, n: len(ids), salt: salt}
}

// Natural lengths of a generation that is not cut by max_tokens.
const (
	minNaturalLen = 16
	maxNaturalLen = 128
)

// newJob seeds the request's random source from the engine seed, the
// request's own seed and its prompt, so the same request gives the same text.
func (e *Engine) newJob(prefix, model, prompt string, promptTokens, maxTokens, minTokens int, ignoreEOS bool, seed *int64) *job {
	h := fnv.New64a()
	_, _ = h.Write([]byte(prompt))
	s := e.cfg.Seed
	if seed != nil {
		s ^= uint64(*seed) * 0x9e3779b97f4a7c15
	}
	rng := rand.New(rand.NewPCG(s, h.Sum64()))
	stopAt := minNaturalLen + rng.IntN(maxNaturalLen-minNaturalLen+1)
	stopAt = max(stopAt, minTokens)
	if ignoreEOS {
		stopAt = math.MaxInt
	}
	return &job{
		id:           e.newID(prefix),
		created:      time.Now().Unix(),
		model:        model,
		promptTokens: promptTokens,
		maxTokens:    maxTokens,
		stopAt:       stopAt,
		rng:          rng,
		arrival:      time.Now(),
	}
}

// tokenSink receives generated token i: the index of its word in words
// (written with a leading space unless i is 0) and, on the last token, the
// finish reason. An error (the client went away) aborts the generation.
type tokenSink func(i, word int, finish string) error

// generate queues j, plays its timing and hands each token to sink. It
// returns the finish reason and the number of tokens generated. Cancelling
// ctx frees the slot at once; the request then counts as "abort".
//
// The caller's goroutine does all the work: no goroutine or timer per
// token, one timer per request.
func (e *Engine) generate(ctx context.Context, t *ticket, j *job, sink tokenSink) (finish string, n int, err error) {
	defer e.sched.release(t)
	total := min(j.maxTokens, j.stopAt)
	finish = finishLength
	if j.stopAt <= j.maxTokens {
		finish = finishStop
	}
	defer func() {
		if err != nil {
			finish = finishAbort
		}
		e.stats.finished(finish)
		e.metrics.e2eLatency.Observe(time.Since(j.arrival).Seconds())
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var firstScheduled, firstToken, last time.Time
	prefill := true // the next token comes after a (re)computed prefill
	batch := 1
	word := -1 // the next token's word, drawn once even if it is preempted
	for n < total {
		if err := e.sched.wait(ctx, t); err != nil {
			return finish, n, err
		}
		var d time.Duration
		if prefill {
			if firstScheduled.IsZero() {
				firstScheduled = t.admitted
				j.cachedTokens = t.cachedTokens
				e.metrics.queueTime.Observe(t.admitted.Sub(j.arrival).Seconds())
			}
			batch = t.batch
			d = e.lat.fixed(j.rng) + time.Until(t.prefillEnd)
		} else {
			d = e.lat.decode(batch, j.rng)
		}
		if d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return finish, n, ctx.Err()
			case <-timer.C:
			}
		} else if err := ctx.Err(); err != nil {
			return finish, n, err
		}
		if word < 0 {
			word = j.rng.IntN(len(words))
		}
		running, ok := e.sched.grow(t, wordToken(n, word))
		if !ok {
			e.sched.preempt(t)
			e.stats.preemptions.Add(1)
			prefill = true
			continue
		}
		batch = running
		prefill = false
		now := time.Now()
		if n == 0 {
			firstToken = now
			s := now.Sub(j.arrival).Seconds()
			e.metrics.ttft.Observe(s)
			e.metrics.prefillTime.Observe(now.Sub(firstScheduled).Seconds())
			e.samples.observe(sampleTTFT, s)
			e.stats.promptTokens.Add(int64(j.promptTokens))
		} else {
			s := now.Sub(last).Seconds()
			e.metrics.itl.Observe(s)
			e.samples.observe(sampleITL, s)
		}
		last = now
		f := ""
		if n == total-1 {
			f = finish
		}
		if err := sink(n, word, f); err != nil {
			return finish, n, err
		}
		word = -1
		e.stats.generationTokens.Add(1)
		n++
	}
	if n > 0 {
		// As vLLM splits a request's time: decode from the first token,
		// inference from the first scheduling, both to the last token.
		e.metrics.decodeTime.Observe(last.Sub(firstToken).Seconds())
		e.metrics.inferenceTime.Observe(last.Sub(firstScheduled).Seconds())
	}
	return finish, n, nil
}

// startJob checks min_tokens against the budget, takes a scheduler slot (or
// a place in the queue) and builds the job: the part chat and completions
// share once each has its prompt.
func (e *Engine) startJob(prefix, model string, p promptSpec, maxTokens, minTokens int, ignoreEOS bool, seed *int64) (*ticket, *job, error) {
	if minTokens < 0 || minTokens > maxTokens {
		return nil, nil, badRequest("min_tokens must be between 0 and max_tokens=%d, got %d.", maxTokens, minTokens)
	}
	// The job first: its arrival time must precede the admission.
	j := e.newJob(prefix, model, p.seed, p.n, maxTokens, minTokens, ignoreEOS, seed)
	t, err := e.admit(e.sched.newSeq(p.ids, p.n, p.salt))
	if err != nil {
		return nil, nil, err
	}
	return t, j, nil
}

// generateText runs a non-streaming job to its end and returns its text.
func (e *Engine) generateText(ctx context.Context, t *ticket, j *job) (text, finish string, n int, err error) {
	var b strings.Builder
	finish, n, err = e.generate(ctx, t, j, func(i, word int, _ string) error {
		b.WriteString(wordPiece(i, word))
		return nil
	})
	return b.String(), finish, n, err
}
