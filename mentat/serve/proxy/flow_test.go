package proxy

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/flow"
)

// A request's band comes from its key, lowered (never raised) by
// X-Priority; its tenant is the key's id, else X-Tenant, else its
// address; a header tenant cannot take a key's share by naming its id.
func TestFlowRequest(t *testing.T) {
	crit := &keys.Key{ID: "ops", Priority: keys.Critical, Weight: 3}
	shed := &keys.Key{ID: "batch", Priority: keys.Sheddable, Weight: 1}
	for _, c := range []struct {
		name     string
		key      *keys.Key
		priority string
		tenant   string
		band     flow.Band
		who      string
		label    string
		weight   float64
		code     string
	}{
		{"no key, nothing said", nil, "", "", flow.Standard, "a:192.0.2.7", "-", 1, ""},
		{"no key, header band and tenant", nil, "critical", "team-x", flow.Critical, "h:team-x", "-", 1, ""},
		{"key band", crit, "", "", flow.Critical, "ops", "ops", 3, ""},
		{"key lowered", crit, "sheddable", "", flow.Sheddable, "ops", "ops", 3, ""},
		{"key never raised", shed, "critical", "", flow.Sheddable, "batch", "batch", 1, ""},
		{"X-Tenant cannot pose as a key", nil, "", "ops", flow.Standard, "h:ops", "-", 1, ""},
		{"a key ignores X-Tenant", shed, "", "someone", flow.Sheddable, "batch", "batch", 1, ""},
		{"bad band", nil, "urgent", "", 0, "", "", 0, "invalid_priority"},
		{"long tenant", nil, "", strings.Repeat("t", MaxTenantName+1), 0, "", "", 0, "invalid_tenant"},
	} {
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		r.RemoteAddr = "192.0.2.7:5000"
		if c.priority != "" {
			r.Header.Set(PriorityHeader, c.priority)
		}
		if c.tenant != "" {
			r.Header.Set(TenantHeader, c.tenant)
		}
		fr, err := flowRequest(r, "m", c.key)
		if c.code != "" {
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != c.code {
				t.Errorf("%s: %v, want 400 %s", c.name, err, c.code)
			}
			continue
		}
		if err != nil || fr.Band != c.band || fr.Tenant != c.who || fr.Label != c.label || fr.Weight != c.weight || fr.Model != "m" {
			t.Errorf("%s: %+v %v", c.name, fr, err)
		}
	}
}
