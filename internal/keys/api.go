package keys

// This file is the package's contract, written before its implementation so
// that the router and the gateway can be built against it. Bodies that
// panic are still to be written; signatures and doc comments are binding.

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/internal/series"
)

// Parse reads a key file's bytes (name is used in errors only). It checks
// every rule the Entry fields state, and refuses a field of the other
// product's unit (tpm in a gateway file, ipm in a router file) and any
// unknown field, so that no limit the operator wrote goes unenforced.
// Errors are *FileError with the line of the offending entry.
func Parse(name string, data []byte, p Product) ([]Entry, error) {
	panic("keys.Parse: not implemented")
}

// Options configure a Store. Zero fields take the defaults noted.
type Options struct {
	// Product is the front door the store serves (Router or Gateway).
	Product Product
	// Poll is how often Run looks at the file for a change (size, mtime,
	// inode, then content); default 1 s.
	Poll time.Duration
	// Log receives keys_loaded, keys_reload_failed, keys_file_permissions
	// (a file readable by group or others) and the like; nil discards.
	Log *slog.Logger
	// Registerer gets the per-key metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Operator is an extra secret with every model in scope and no limits
	// (the gateway's MORTRED_API_TOKEN), shown as OperatorID; "" is none.
	// It is not subject to the Product's prefix.
	Operator string
	// BadKeyBurst and BadKeyRate bound failed authentications per client
	// address (before a presented key is hashed): a burst of BadKeyBurst
	// (default 20), refilled at BadKeyRate per second (default 1).
	BadKeyBurst int
	BadKeyRate  float64
	// Now is the clock; nil is time.Now. Tests set it.
	Now func() time.Time
}

// OperatorID is the id shown for Options.Operator.
const OperatorID = "operator"

// Store is a loaded key file. Safe for concurrent use; request paths never
// block on a reload.
type Store struct{}

// Open reads and checks the key file at path. A file that cannot be read
// or parsed is an error naming file, line and reason (the process should
// stop). A file readable by group or others logs keys_file_permissions.
func Open(path string, o Options) (*Store, error) {
	panic("keys.Open: not implemented")
}

// Run watches the file (every Options.Poll) and reloads it on change, and
// samples the usage series (every 10 s, 90 samples: 15 minutes), until ctx
// ends.
func (s *Store) Run(ctx context.Context) { panic("not implemented") }

// Reload reads the file now (SIGHUP calls it). On failure the keys in force
// stay, keys_reload_failed is logged with the reason and
// <metrics>_keys_reload_failures_total counts it. A key's limiter state,
// in-flight count and usage carry over a reload when its id stays.
func (s *Store) Reload() error { panic("not implemented") }

// Path is the key file's path.
func (s *Store) Path() string { panic("not implemented") }

// Authenticate checks a request's Authorization header (Bearer scheme, any
// case, one header) for client address addr (an IP, no port). A client
// address over its failed-authentication budget is refused with 429
// (reason bad_key_rate) before the key is hashed. A missing header is 401
// missing_key; an unknown key 401 invalid_key; a disabled or expired key
// 401 disabled or expired. Only the id ever reaches a log or metric.
func (s *Store) Authenticate(header http.Header, addr string) (*Key, *Rejection) {
	panic("not implemented")
}

// Keys lists the keys in force, in file order.
func (s *Store) Keys() []*Key { panic("not implemented") }

// Usage is every key's usage and limits now, in file order, then keys that
// were removed or renamed but ran up usage since the process started.
func (s *Store) Usage() []Usage { panic("not implemented") }

// Series is the per-key usage series taken after sinceMS (unix ms; 0 for
// all): requests/s, units/s and rejections/s per key, for the charts.
func (s *Store) Series(sinceMS int64) SeriesSnapshot { panic("not implemented") }

// Key is one key in force. Its fields are read-only.
type Key struct {
	ID       string
	Models   []string
	Priority Priority
	// Weight is the entry's weight, 1 when unset.
	Weight float64
	// RPM, Units (tpm or ipm, by Product) and MaxConcurrent: 0 no limit.
	RPM, Units, MaxConcurrent int64
	Expires                   time.Time // zero: never
}

// Allows reports whether model is in the key's scope (empty Models: all).
func (k *Key) Allows(model string) bool { panic("not implemented") }

// Scope is nil when model is in scope, else the 403 refusal (reason
// model_scope), counted in the key's usage.
func (k *Key) Scope(model string) *Rejection { panic("not implemented") }

// Admit takes one request of the key's per-minute budget and a concurrency
// slot, or refuses with 429 (reason rpm, tpm, ipm or concurrency) and the
// wait after which the same request would be admitted. The unit budget
// admits while anything is left of it (a request's units are charged when
// known, and may take it below zero, as OpenAI does). Every Grant must be
// ended with Done.
func (k *Key) Admit() (*Grant, *Rejection) { panic("not implemented") }

// Grant is one admitted request of a key.
type Grant struct{}

// Key is the key the grant belongs to.
func (g *Grant) Key() *Key { panic("not implemented") }

// SetHeaders writes the rate-limit headers of the key as of admission
// (x-ratelimit-{limit,remaining,reset}-{requests,tokens|images}), for the
// limits the key has.
func (g *Grant) SetHeaders(h http.Header) { panic("not implemented") }

// Charge adds units to the request's usage and to the key's per-minute
// budget. It may be called more than once (the router charges a stream's
// usage when the usage frame passes).
func (g *Grant) Charge(c Charge) { panic("not implemented") }

// Done ends the request with the status its client got (499: the client
// went away), releases its concurrency slot and counts it. Safe to call
// once only; a nil Grant is a no-op.
func (g *Grant) Done(status int) { panic("not implemented") }

// Charge is what one request used.
type Charge struct {
	// Prompt, Completion and Cached are tokens (router); Cached is the
	// part of Prompt the engine served from its prefix cache.
	Prompt, Completion, Cached int64
	// Images are input images (gateway).
	Images int64
	// Counted marks tokens the router counted itself (a stream that asked
	// for no usage: its frames, and the prompt estimated from its bytes)
	// instead of reading the answer's usage.
	Counted bool
}

// Reason says why a request was refused.
type Reason string

const (
	MissingKey  Reason = "missing_key"
	InvalidKey  Reason = "invalid_key"
	DisabledKey Reason = "disabled"
	ExpiredKey  Reason = "expired"
	BadKeyRate  Reason = "bad_key_rate"
	ModelScope  Reason = "model_scope"
	RPMLimit    Reason = "rpm"
	TPMLimit    Reason = "tpm"
	IPMLimit    Reason = "ipm"
	Concurrency Reason = "concurrency"
)

// Rejection is a refused request: what to answer.
type Rejection struct {
	// Status is 401, 403 or 429.
	Status int
	Reason Reason
	// Message says what failed and what to do, naming the key by id only.
	Message string
	// RetryAfter is the wait after which the request would be admitted
	// (429 only).
	RetryAfter time.Duration
	// Key is the key refused; nil for 401 and bad_key_rate.
	Key *Key
}

// SetHeaders writes the refusal's headers: WWW-Authenticate for 401;
// Retry-After (whole seconds, rounded up), retry-after-ms and the
// x-ratelimit-* headers for 429.
func (r *Rejection) SetHeaders(h http.Header) { panic("not implemented") }

// Usage is one key's usage since the process started, and its limits now.
type Usage struct {
	ID       string   `json:"id"`
	Priority string   `json:"priority"`
	Weight   float64  `json:"weight"`
	Models   []string `json:"models"`
	// State is "active", "disabled", "expired" or "removed".
	State string `json:"state"`
	// Limits: 0 is none.
	RPM           int64 `json:"rpm"`
	Units         int64 `json:"units_per_minute"`
	Unit          Unit  `json:"unit"`
	MaxConcurrent int64 `json:"max_concurrent"`
	// Remaining budget now (-1: no limit) and requests in flight.
	RemainingRequests int64 `json:"remaining_requests"`
	RemainingUnits    int64 `json:"remaining_units"`
	InFlight          int64 `json:"in_flight"`
	// Requests by answered status code ("200", "429", "499", ...).
	Requests map[string]uint64 `json:"requests"`
	// Tokens (router): prompt, completion, cached; counted is the part of
	// prompt+completion the router counted itself (Charge.Counted).
	PromptTokens     uint64 `json:"prompt_tokens"`
	CompletionTokens uint64 `json:"completion_tokens"`
	CachedTokens     uint64 `json:"cached_tokens"`
	CountedTokens    uint64 `json:"counted_tokens"`
	// Images (gateway).
	Images uint64 `json:"images"`
	// Rejections by Reason (only those with a key: scope and limits).
	Rejections map[string]uint64 `json:"rejections"`
}

// SeriesSnapshot is the per-key usage series: Times[i] (unix ms) is when
// Keys[id].Requests[i] etc. were sampled; a value is a rate per second
// over the interval before it, null (NaN) where unknown.
type SeriesSnapshot struct {
	Times []int64              `json:"times"`
	Keys  map[string]KeySeries `json:"keys"`
}

// KeySeries is one key's series.
type KeySeries struct {
	Requests   series.Values `json:"requests"`
	Units      series.Values `json:"units"`
	Rejections series.Values `json:"rejections"`
}

// NewSecret returns a fresh secret for p (Prefix + 32 random bytes in
// base64url without padding) and its hash as a key file writes it.
func NewSecret(p Product) (secret, hash string, err error) { panic("not implemented") }

// HashSecret is the key file's hash of secret: SHA-256, lower-case hex.
func HashSecret(secret string) string { panic("not implemented") }

// Command runs p's `keys` subcommand (args after "keys"): new, list or
// disable, as the manuals describe, and returns the exit code (0 done, 1
// failed, 2 usage). `new` prints the secret once, on stdout, and appends
// the entry to the file atomically (created 0600 when missing); the file
// is parsed before it is replaced, so it is never left unparseable.
func Command(p Product, args []string, stdout, stderr io.Writer) int { panic("not implemented") }

type ctxKey struct{}

// NewContext returns ctx carrying k (the authenticated key of a request).
func NewContext(ctx context.Context, k *Key) context.Context {
	return context.WithValue(ctx, ctxKey{}, k)
}

// FromContext is the key NewContext put in ctx, nil when none (keys off).
func FromContext(ctx context.Context) *Key {
	k, _ := ctx.Value(ctxKey{}).(*Key)
	return k
}
