// Package balance chooses which replica of a model takes a request. A
// model is served by every admitted group whose probe lists it; the
// policy orders those replicas for each request, best first, and the
// proxy sends to the first one that accepts the connection.
//
// The signals are the router's own in-flight count per replica (exact,
// updated as requests start and end), the engines' running and waiting
// requests and KV-cache usage from their /metrics (Watch), and, for the
// prefix policy, an index of the prompts' leading text (Blocks, index.go).
package balance

import (
	"fmt"
	"strings"
	"time"
)

// Policy is a replica-ordering rule (ROUTING_POLICY).
type Policy string

// The policies.
const (
	// Prefix walks the replicas in the rendezvous order of the prompt's
	// anchor block (the same on every router) and takes the first that
	// holds a long match of the prompt (MinAffinityShare of it), or is
	// its home while another does, and whose engine has room or whose
	// load is within Threshold of the least loaded; else the first within
	// HomeSlack of the least loaded (Balancer.prefix).
	Prefix Policy = "prefix"
	// LeastLoaded picks the replica with the lowest load.
	LeastLoaded Policy = "least-loaded"
	// RoundRobin rotates over the replicas, ignoring load.
	RoundRobin Policy = "round-robin"
	// Session ranks replicas by a rendezvous hash of the session key (a
	// header, else the body's user) and takes the first one within
	// Threshold of the least loaded; without a key it picks by load.
	Session Policy = "session"
	// First sends everything to the first replica by group name, the
	// router's behaviour before replicas were balanced.
	First Policy = "first"
)

// Policies lists every policy, the default first.
var Policies = []Policy{Prefix, LeastLoaded, RoundRobin, Session, First}

// ParsePolicy reads a ROUTING_POLICY value (case-insensitive).
func ParsePolicy(s string) (Policy, error) {
	p := Policy(strings.ToLower(strings.TrimSpace(s)))
	for _, q := range Policies {
		if p == q {
			return p, nil
		}
	}
	names := make([]string, len(Policies))
	for i, q := range Policies {
		names[i] = string(q)
	}
	return "", fmt.Errorf("unknown routing policy %q; want one of %s", s, strings.Join(names, ", "))
}

// Reason says why a replica got a request (the reason label of
// mentat_serve_routing_decisions_total).
type Reason string

// The reasons.
const (
	// Affinity: the replica holds the longest prefix match, or is the
	// session's replica, and its load is within the threshold.
	Affinity Reason = "affinity"
	// Load: chosen for its load (least-loaded, or no affinity to follow).
	Load Reason = "load"
	// Fallback: the preferred replica was over the threshold (and, for
	// the prefix policy, had no room) or busy, so the request went by
	// load instead.
	Fallback Reason = "fallback"
	// Refused: an earlier replica refused the connection (nothing was
	// sent), so the request went to the next in the order.
	Refused Reason = "refused"
	// Order: the policy's fixed order chose it (first, round-robin).
	Order Reason = "order"
	// Home: the prompt's rendezvous replica (Balancer.prefix), which
	// every router picks alike, took it without this router having sent
	// the prompt there: the prompt was new to the router, or its prefix
	// recurs and went elsewhere first (other routers keep it warm there).
	Home Reason = "home"
)

// Defaults for Config.
const (
	// DefaultThreshold is how many requests more than the least-loaded
	// replica a preferred replica may carry and still be chosen (by the
	// prefix policy, once its engine has no room). Each
	// spill is a cold prefill of the whole prefix that holds the
	// target's prefill for its length and delays every request behind
	// it, so a threshold low enough that load noise crosses it costs more
	// than the queue it saves: at 8, one router spilled 9 requests over
	// a 40-s step at 12.6 req/s per replica and routers behind a
	// balancer (whose load figures lag by a scrape) 20, raising p90 TTFT
	// from 0.04 s to 0.5 s; at 12, 1 and 5, with p90 0.03 s for both
	// (bench/routing's sustained comparison).
	DefaultThreshold = 12
	// DefaultSessionHeader carries the session key for the session policy.
	DefaultSessionHeader = "X-Session-ID"
	// DefaultScrapeInterval is how often Watch reads the engines' /metrics.
	DefaultScrapeInterval = time.Second
	// DefaultIndexBlocks bounds each model's prefix index, in blocks
	// (least recently used blocks are dropped first): 32768 blocks index
	// 8 MiB of distinct leading text in about 4 MiB of memory.
	DefaultIndexBlocks = 1 << 15
	// MinAffinityShare is the share of a prompt's blocks a replica must
	// hold beyond the least-loaded replica's for the prefix policy to
	// let it carry up to Threshold more load (see Balancer.affinity).
	MinAffinityShare = 0.5
	// AnchorBlocks is how deep into a prompt the block that picks its
	// home replica lies (the last block, for a shorter prompt): 2 KiB,
	// past a chat template's opening words, so prompts that share only
	// those do not share a home, while prompts sharing a longer
	// document or system prompt do.
	AnchorBlocks = 8
	// HomeSlack is how many requests more than the least-loaded replica
	// a prompt's home replica may carry and still take a prompt new to
	// the router: small, since the prompt may never come again, but
	// enough that routers whose load figures differ by their scrapes'
	// age still agree.
	HomeSlack = 2
	// KVFull is the KV-cache usage from which an engine counts Threshold
	// requests heavier: new work there queues or preempts.
	KVFull = 0.95
)

// Config tunes a Balancer. The zero value means every default.
type Config struct {
	Policy Policy
	// Threshold is ROUTING_THRESHOLD; zero or negative means the default.
	Threshold float64
	// SessionHeader is ROUTING_SESSION_HEADER.
	SessionHeader string
	// ScrapeInterval is how often engine loads are read; a load older
	// than three intervals plus ScrapeTimeout is stale (busy).
	ScrapeInterval time.Duration
	ScrapeTimeout  time.Duration
	// IndexBlocks bounds each model's prefix index.
	IndexBlocks int
	// MaxInflight caps the router's requests in flight to one replica
	// for Free (FLOW_MAX_INFLIGHT); 0 learns each engine's capacity from
	// the running count at which it started queueing.
	MaxInflight int
	// SaturatedKV is the KV-cache usage at which a replica has no room
	// for Free (FLOW_KV_THRESHOLD; default KVFull).
	SaturatedKV float64
	// Flow is FLOW_CONTROL: flow control lets a request go because some
	// replica has room (Free), so a replica without room is chosen only
	// for a prefix it holds (or is the home of) or a session, never for a
	// new prompt's home or a spill, which would queue the request in its
	// engine while another engine has a free slot.
	Flow bool
}

func (c Config) withDefaults() Config {
	if c.Policy == "" {
		c.Policy = Prefix
	}
	if c.Threshold <= 0 {
		c.Threshold = DefaultThreshold
	}
	if c.SessionHeader == "" {
		c.SessionHeader = DefaultSessionHeader
	}
	if c.ScrapeInterval <= 0 {
		c.ScrapeInterval = DefaultScrapeInterval
	}
	if c.ScrapeTimeout <= 0 {
		c.ScrapeTimeout = 2 * time.Second
	}
	if c.IndexBlocks <= 0 {
		c.IndexBlocks = DefaultIndexBlocks
	}
	if c.SaturatedKV <= 0 {
		c.SaturatedKV = KVFull
	}
	return c
}

// staleAfter is how old an engine load may be before the replica counts
// as busy: three missed scrapes.
func (c Config) staleAfter() time.Duration { return 3*c.ScrapeInterval + c.ScrapeTimeout }
