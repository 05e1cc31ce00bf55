package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/flow"
)

// The headers a request names its flow-control band and tenant with.
// Neither is forwarded to an engine (forwarded is an allow list).
const (
	PriorityHeader = "X-Priority"
	TenantHeader   = "X-Tenant"
	// MaxTenantName bounds an X-Tenant value.
	MaxTenantName = 128
)

// waitTurn asks flow control for the request's turn (FLOW_CONTROL): at
// once when its model has room, else when capacity frees. Its band is
// its key's priority, lowered (never raised) by X-Priority; without a key
// X-Priority alone, standard by default. Its tenant is its key's id, else
// X-Tenant, else the client's address. A refusal is 429 with Retry-After;
// a client that left while waiting is never sent.
func (p *Proxy) waitTurn(w http.ResponseWriter, r *http.Request, x *exchange, k *keys.Key) error {
	fr, err := flowRequest(r, x.model, k)
	if err != nil {
		return err
	}
	fr.Cost = float64(PromptEstimate(x.promptBytes))
	adm, err := p.cfg.Flow.Admit(r.Context(), fr)
	var ref *flow.Refusal
	switch {
	case errors.As(err, &ref):
		httpx.SetRetryAfter(w.Header(), ref.RetryAfter)
		return &Error{Status: http.StatusTooManyRequests, Type: typeRequests, Code: ref.Reason, Message: ref.Message}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errClientGone
	case err != nil:
		return err
	}
	x.adm = adm
	return nil
}

// flowRequest reads a request's band and tenant.
func flowRequest(r *http.Request, model string, k *keys.Key) (flow.Request, error) {
	fr := flow.Request{Model: model, Band: flow.Standard, Weight: 1, Label: "-"}
	if k != nil {
		fr.Band, fr.Tenant, fr.Label, fr.Weight = flow.BandOf(k.Priority), k.ID, k.ID, k.Weight
	}
	if v := r.Header.Get(PriorityHeader); v != "" {
		b, ok := flow.ParseBand(v)
		if !ok {
			return fr, &Error{Status: http.StatusBadRequest, Code: "invalid_priority", Message: fmt.Sprintf(
				"%s %q is not a priority band; send critical, standard or sheddable (a request may lower its key's band, never raise it)", PriorityHeader, v)}
		}
		if k == nil {
			fr.Band = b
		} else {
			fr.Band = max(fr.Band, b) // a higher band number is a lower priority
		}
	}
	if fr.Tenant != "" {
		return fr, nil
	}
	if v := r.Header.Get(TenantHeader); v != "" {
		if len(v) > MaxTenantName {
			return fr, &Error{Status: http.StatusBadRequest, Code: "invalid_tenant", Message: fmt.Sprintf(
				"%s is %d bytes long; a tenant name may have at most %d", TenantHeader, len(v), MaxTenantName)}
		}
		fr.Tenant = "h:" + v
		return fr, nil
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	fr.Tenant = "a:" + host
	return fr, nil
}

// Charge is the meter's charger for x: the key's usage (with keys on)
// and the answer's tokens that flow control charges its tenant.
func (x *exchange) Charge(c keys.Charge) {
	if x.grant != nil {
		x.grant.Charge(c)
	}
	x.tokens += c.Completion
}
