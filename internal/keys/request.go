package keys

import "context"

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
