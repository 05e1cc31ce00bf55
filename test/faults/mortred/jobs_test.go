package mortred

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

// TestJobsSurviveGatewayRestart: the gateway is stateless and the job
// ledger lives in the model server, so a job submitted through one gateway
// process is polled, waited on and fetched through the next one after a
// restart through the supervisor's API.
func TestJobsSurviveGatewayRestart(t *testing.T) {
	t.Parallel()
	d := deploy(t, []stack.Model{{ID: "LEDGER", Keys: map[string]any{"worker_nums": 1}}}, nil)
	gw := d.Conf.GatewayURL()
	get := func(path string) (stack.Reply, error) {
		return stack.Do(stack.Req{URL: gw + path, Token: d.Tokens.API})
	}

	r, err := stack.Do(stack.Req{URL: gw + "/v1/models/LEDGER/jobs", Token: d.Tokens.API,
		Body: stack.Envelope("survivor", `{"delay_ms":2500}`, stack.LightPNG)})
	if err != nil || r.Code != http.StatusAccepted {
		t.Fatalf("submit: %v %v", r, err)
	}
	var job struct {
		JobID     string `json:"job_id"`
		State     string `json:"state"`
		PollURL   string `json:"poll_url"`
		ResultURL string `json:"result_url"`
	}
	if err := r.JSON(&job); err != nil {
		t.Fatal(err)
	}
	prefix := "/v1/models/LEDGER/jobs/" + job.JobID
	if job.PollURL != prefix || job.ResultURL != prefix+"/result" {
		t.Fatalf("job URLs not on the gateway's prefix: %+v", job)
	}

	before := d.Server(t, "gateway")
	r, err = d.API("POST", "/api/v1/servers/gateway/restart")
	if err != nil || r.Code != http.StatusOK || !strings.Contains(string(r.Body), `"ok":true`) {
		t.Fatalf("restart the gateway: %v %v", r, err)
	}
	after := d.WaitReady(t, "gateway", 60*time.Second)
	if after.PID == before.PID {
		t.Fatalf("gateway pid %d unchanged by the restart", after.PID)
	}
	t.Logf("gateway restarted: pid %d → %d", before.PID, after.PID)

	// The job is still known, and finishes.
	var state string
	testproc.Eventually(t, 30*time.Second, "job visible through the new gateway", func() error {
		r, err := get(job.PollURL)
		if err != nil || r.Code != http.StatusOK {
			return fmt.Errorf("%v %v", r, err)
		}
		var s struct {
			State string `json:"state"`
		}
		if err := r.JSON(&s); err != nil {
			return err
		}
		state = s.State
		return nil
	})
	t.Logf("state through the new gateway: %s", state)
	if state != "pending" && state != "running" && state != "done" {
		t.Fatalf("job state after the gateway restart: %q", state)
	}
	testproc.Eventually(t, 60*time.Second, "job done", func() error {
		r, err := get(job.PollURL + "/wait?timeout=5000")
		if err != nil || r.Code != http.StatusOK {
			return fmt.Errorf("%v %v", r, err)
		}
		var s struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(r.Body, &s); err != nil || s.State != "done" {
			return fmt.Errorf("state %q %v", s.State, err)
		}
		return nil
	})
	r, err = get(job.ResultURL)
	if err != nil || r.Code != http.StatusOK {
		t.Fatalf("result: %v %v", r, err)
	}
	var env stack.Response
	if err := r.JSON(&env); err != nil || env.Status != 0 || len(env.Results) != 1 || env.Results[0].Status != 0 ||
		!strings.Contains(string(env.Results[0].Data), `"light"`) {
		t.Fatalf("result through the new gateway: %v %v", r, err)
	}
	if env.TaskID != "survivor" {
		t.Fatalf("result is not the submitted job's (task_id %q)", env.TaskID)
	}
	d.mustInfer(t, "LEDGER")
}
