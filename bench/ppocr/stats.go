package main

import (
	"fmt"
	"sort"
	"time"
)

// result is one scenario's measurement.
type result struct {
	name     string
	items    int
	errors   int
	elapsed  time.Duration
	latency  []time.Duration // per call (a call may carry several items)
	perCall  int
	firstErr error
}

func (r *result) throughput() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.items) / r.elapsed.Seconds()
}

func (r *result) pct(p float64) time.Duration {
	if len(r.latency) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), r.latency...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }
