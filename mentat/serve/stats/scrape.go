package stats

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// scraper fetches engines' /metrics, keeping each answer for ttl so that
// any number of page loads within it cost one scrape per group. Concurrent
// callers for the same engine wait for the one scrape in progress.
type scraper struct {
	client  *http.Client
	ttl     time.Duration
	timeout time.Duration
	now     func() time.Time
	logger  *slog.Logger

	mu      sync.Mutex
	entries map[string]*scrapeEntry // by metrics URL
}

type scrapeEntry struct {
	// running is closed when the scrape in progress ends; nil when none is.
	running chan struct{}
	at      time.Time // when the last scrape ended; zero before the first
	fams    Families
	err     error
	failing bool // the last scrape failed; logged on change only
}

func newScraper(client *http.Client, ttl, timeout time.Duration, logger *slog.Logger) *scraper {
	return &scraper{client: client, ttl: ttl, timeout: timeout, now: time.Now, logger: logger, entries: map[string]*scrapeEntry{}}
}

// get returns url's exposition, scraping it when the cached one is older
// than ttl. A caller whose ctx ends stops waiting, but a scrape it started
// runs on (up to the scrape timeout) for the callers behind it.
func (s *scraper) get(ctx context.Context, url string) (Families, error) {
	return s.getFresh(ctx, url, s.ttl)
}

// getFresh is get reusing a cached answer only when younger than maxAge.
func (s *scraper) getFresh(ctx context.Context, url string, maxAge time.Duration) (Families, error) {
	s.mu.Lock()
	e := s.entries[url]
	if e == nil {
		e = &scrapeEntry{}
		s.entries[url] = e
	}
	if e.running == nil && !e.at.IsZero() && s.now().Sub(e.at) < maxAge {
		fams, err := e.fams, e.err
		s.mu.Unlock()
		return fams, err
	}
	if ch := e.running; ch != nil {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
		fams, err := e.fams, e.err
		s.mu.Unlock()
		return fams, err
	}
	ch := make(chan struct{})
	e.running = ch
	s.mu.Unlock()

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	fams, err := s.fetch(sctx, url)
	cancel()

	s.mu.Lock()
	e.fams, e.err, e.at, e.running = fams, err, s.now(), nil
	close(ch)
	changed := e.failing != (err != nil)
	e.failing = err != nil
	s.mu.Unlock()
	if changed && err != nil {
		s.logger.Warn("stats_scrape_failed", "url", url, "err", err)
	} else if changed {
		s.logger.Info("stats_scrape_recovered", "url", url)
	}
	return fams, err
}

// keep forgets every engine not in urls, so groups that left do not pin
// memory. A scrape in progress is left to finish.
func (s *scraper) keep(urls map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for u, e := range s.entries {
		if !urls[u] && e.running == nil {
			delete(s.entries, u)
		}
	}
}

func (s *scraper) fetch(ctx context.Context, url string) (Families, error) {
	return FetchMetrics(ctx, s.client, url)
}

// FetchMetrics GETs and parses one exposition (at most 16 MiB), asking for
// the classic text format, which every vLLM version serves.
func FetchMetrics(ctx context.Context, client *http.Client, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: engine answered %s", url, resp.Status)
	}
	fams, err := ParseMetrics(io.LimitReader(resp.Body, maxMetricsBytes), resp.Header.Get("Content-Type"))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return fams, nil
}
