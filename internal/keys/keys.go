// Package keys is the tenancy model both front doors share: a key file
// (TOML) of API keys, each with a scope of model globs, limits and a
// flow-control class; the store that reads it, reloads it on change and
// looks a presented key up by its SHA-256; the per-key limiters (requests
// per minute, tokens or images per minute, concurrent requests); and the
// usage each key has run up (Prometheus counters, a JSON snapshot and a
// 15-minute series for the status pages).
//
// The router (mentat/serve) and the gateway (mortred/gateway) use exactly
// this package; they differ only in their Product: the key prefix, the unit
// of the second limit (tokens or images) and the metric names.
//
// A secret never leaves Authenticate: keys are stored and compared as
// hashes, and everything this package logs, counts or shows names a key by
// its id.
package keys

import (
	"fmt"
	"time"
)

// Unit is what a key's second per-minute limit counts.
type Unit string

const (
	// Tokens are prompt plus completion tokens (the router's tpm).
	Tokens Unit = "tokens"
	// Images are input images (the gateway's ipm).
	Images Unit = "images"
)

// Product is what differs between the two front doors.
type Product struct {
	// Name is the binary the CLI runs in ("mentatd-serve", "mortredctl"),
	// for messages.
	Name string
	// Prefix starts every secret of this product.
	Prefix string
	// Unit is what the second limit counts: the file field is "tpm" for
	// Tokens and "ipm" for Images; the other product's field is refused.
	Unit Unit
	// Metrics prefixes every metric name ("mentat_serve" gives
	// mentat_serve_key_requests_total).
	Metrics string
}

// The two products.
var (
	Router  = Product{Name: "mentatd-serve", Prefix: "sk-mentat-", Unit: Tokens, Metrics: "mentat_serve"}
	Gateway = Product{Name: "mortredctl", Prefix: "sk-mortred-", Unit: Images, Metrics: "mortred_gateway"}
)

// UnitField is the key-file field of p's second limit ("tpm" or "ipm").
func (p Product) UnitField() string {
	if p.Unit == Images {
		return "ipm"
	}
	return "tpm"
}

// Priority is a key's flow-control band: higher is served first when
// engines saturate. The zero value is Standard.
type Priority int8

const (
	Sheddable Priority = -1
	Standard  Priority = 0
	Critical  Priority = 1
)

func (p Priority) String() string {
	switch p {
	case Critical:
		return "critical"
	case Sheddable:
		return "sheddable"
	}
	return "standard"
}

// ParsePriority reads a band name; "" is Standard.
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "", "standard":
		return Standard, nil
	case "critical":
		return Critical, nil
	case "sheddable":
		return Sheddable, nil
	}
	return Standard, fmt.Errorf("priority %q is not critical, standard or sheddable", s)
}

// Entry is one [[key]] table of a key file as written.
type Entry struct {
	// ID names the key in logs, metrics and pages: 1-64 characters of
	// [A-Za-z0-9._-], unique in the file.
	ID string `toml:"id"`
	// Hash is the SHA-256 of the whole secret (prefix included), 64 lower-
	// or upper-case hex digits. Unique in the file.
	Hash string `toml:"hash"`
	// Models are path.Match globs over model names (router) or catalog ids
	// (gateway); empty allows every model.
	Models []string `toml:"models,omitempty"`
	// RPM is requests per minute; 0 is no limit.
	RPM int64 `toml:"rpm,omitempty"`
	// TPM is tokens per minute (router only); 0 is no limit.
	TPM int64 `toml:"tpm,omitempty"`
	// IPM is images per minute (gateway only); 0 is no limit.
	IPM int64 `toml:"ipm,omitempty"`
	// MaxConcurrent is the most requests in flight at once; 0 is no limit.
	MaxConcurrent int64 `toml:"max_concurrent,omitempty"`
	// Priority is "critical", "standard" (default) or "sheddable".
	Priority string `toml:"priority,omitempty"`
	// Weight is the key's share within its band when engines saturate;
	// 0 means 1. Must not be negative.
	Weight float64 `toml:"weight,omitempty"`
	// Expires, when set, is when the key stops working (a TOML offset
	// date-time, e.g. 2027-01-01T00:00:00Z).
	Expires *time.Time `toml:"expires,omitempty"`
	// Disabled keys are refused (401, reason disabled).
	Disabled bool `toml:"disabled,omitempty"`
	// Line is the line of the entry's [[key]] header (1-based), for
	// messages; not a file field.
	Line int `toml:"-"`
}

// FileError is a key file that cannot be used: where and why.
type FileError struct {
	File   string
	Line   int // 0 when the error concerns the whole file
	Reason string
}

func (e *FileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Reason)
}
