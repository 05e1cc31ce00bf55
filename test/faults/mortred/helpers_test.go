package mortred

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// deployment is a running supervisor and what the tests call on it.
type deployment struct {
	*stack.Supervisor
}

// deploy writes a catalog of these models and starts the supervisor; it
// returns once the gateway and every model are ready.
func deploy(t *testing.T, models []stack.Model, gateway map[string]any) deployment {
	t.Helper()
	conf := stack.WriteConf(t, models, gateway)
	d := deployment{stack.StartSupervisor(t, conf, stack.NewTokens())}
	for _, m := range models {
		d.WaitReady(t, m.ID, 60*time.Second)
	}
	return d
}

// infer posts an envelope to the gateway's /v1/models/{id}/infer.
func (d deployment) infer(id string, body []byte) (stack.Reply, error) {
	return stack.Do(stack.Req{URL: d.Conf.GatewayURL() + "/v1/models/" + id + "/infer", Token: d.Tokens.API, Body: body})
}

// direct posts an envelope to the model server itself, on its server_uri.
func (d deployment) direct(id string, body []byte) (stack.Reply, error) {
	m := d.Conf.Models[id]
	return stack.Do(stack.Req{URL: fmt.Sprintf("http://127.0.0.1:%d%s", m.Port, m.URI()), Token: d.Tokens.Model, Body: body})
}

// mustInfer checks that one normal request through the gateway succeeds.
func (d deployment) mustInfer(t *testing.T, id string) {
	t.Helper()
	r, err := d.infer(id, stack.Envelope("ok", "", stack.LightPNG))
	if err != nil || r.Code != http.StatusOK {
		t.Fatalf("normal request to %s: %v %v", id, r, err)
	}
	var resp stack.Response
	if err := r.JSON(&resp); err != nil || resp.Status != 0 || len(resp.Results) != 1 || resp.Results[0].Status != 0 {
		t.Fatalf("normal request to %s: %v %v", id, r, err)
	}
}

// modelMetric sums one metric's samples on a model server's /metrics.
func (d deployment) modelMetric(id, name string) (float64, error) {
	m := d.Conf.Models[id]
	r, err := stack.Do(stack.Req{URL: fmt.Sprintf("http://127.0.0.1:%d/metrics", m.Port), Token: d.Tokens.Model})
	if err != nil {
		return 0, err
	}
	if r.Code != http.StatusOK {
		return 0, fmt.Errorf("/metrics of %s: %v", id, r)
	}
	return sumMetric(string(r.Body), name)
}

func sumMetric(text, name string) (float64, error) {
	sum, found := 0.0, false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line[strings.LastIndexAny(line, "} ")+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %v", line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("no %s", name)
	}
	return sum, nil
}
