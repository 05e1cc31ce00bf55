package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

func asyncKeys(extra map[string]string) map[string]string {
	k := map[string]string{"async_enabled": "true"}
	for a, b := range extra {
		k[a] = b
	}
	return k
}

func (f *fixture) submit(body string) (reply, envelope.JobAccepted) {
	f.t.Helper()
	rep := f.do(req{path: "/jobs", token: token, body: body})
	var acc envelope.JobAccepted
	if rep.code == http.StatusAccepted {
		if err := json.Unmarshal(rep.body, &acc); err != nil {
			f.t.Fatal(err)
		}
	}
	return rep, acc
}

func (f *fixture) jobStatus(path string) (int, envelope.JobStatus) {
	f.t.Helper()
	rep := f.do(req{method: http.MethodGet, path: path, token: token})
	var st envelope.JobStatus
	_ = json.Unmarshal(rep.body, &st)
	return rep.code, st
}

func (f *fixture) waitState(id, state string) envelope.JobStatus {
	f.t.Helper()
	var st envelope.JobStatus
	eventually(f.t, "job "+id+" to be "+state, func() bool {
		_, st = f.jobStatus("/jobs/" + id)
		return st.State == state
	})
	return st
}

func TestJobLifecycle(t *testing.T) {
	f := start(t, opts{gated: true, keys: asyncKeys(nil)})
	// 202 at admission: the gate is closed, so inference cannot have run.
	rep, acc := f.submit(`{"req_id":"job-req","images":["` + darkPNG + `","` + lightPNG + `"]}`)
	if rep.code != http.StatusAccepted || acc.State != envelope.JobPending || acc.JobID == "" {
		t.Fatalf("submit → %d %s", rep.code, rep.body)
	}
	if rep.hdr.Get("Location") != acc.PollURL || acc.PollURL != "/jobs/"+acc.JobID || acc.ResultURL != acc.PollURL+"/result" {
		t.Fatalf("urls %+v Location %q", acc, rep.hdr.Get("Location"))
	}
	// The worker took the first item and waits on the gate: running.
	f.waitState(acc.JobID, envelope.JobRunning)
	if code, st := f.jobStatus(acc.ResultURL); code != http.StatusConflict || st.State != envelope.JobRunning {
		t.Fatalf("result while running → %d %+v", code, st)
	}
	// wait with a short budget answers 200 with the current state.
	if code, st := f.jobStatus(acc.PollURL + "/wait?timeout=50"); code != 200 || st.State != envelope.JobRunning {
		t.Fatalf("wait → %d %+v", code, st)
	}
	f.open(2)
	code, st := f.jobStatus(acc.PollURL + "/wait?timeout=60000")
	if code != 200 || st.State != envelope.JobDone || st.ElapsedMS <= 0 {
		t.Fatalf("wait → %d %+v", code, st)
	}
	for i := 0; i < 2; i++ { // repeatable
		res := f.do(req{method: http.MethodGet, path: acc.ResultURL, token: token})
		checkEnvelope(t, res, envelope.StatusOK, 2)
		if res.env.TaskID != "job-req" {
			t.Fatalf("task_id %q", res.env.TaskID)
		}
	}
	// elapsed_ms is frozen once done.
	_, a := f.jobStatus(acc.PollURL)
	time.Sleep(20 * time.Millisecond)
	_, b := f.jobStatus(acc.PollURL)
	if a.ElapsedMS != b.ElapsedMS {
		t.Fatalf("elapsed moved after done: %v → %v", a.ElapsedMS, b.ElapsedMS)
	}
}

func TestJobPendingWhileQueued(t *testing.T) {
	f := start(t, opts{gated: true, keys: asyncKeys(nil)})
	busy := f.inBackground(images(darkPNG))
	eventually(t, "the worker to be busy", func() bool { return f.metric("mortred_workers_busy") == 1 })
	_, acc := f.submit(images(lightPNG))
	if code, st := f.jobStatus(acc.PollURL); code != 200 || st.State != envelope.JobPending {
		t.Fatalf("→ %d %+v", code, st)
	}
	if code, st := f.jobStatus(acc.ResultURL); code != http.StatusConflict || st.State != envelope.JobPending {
		t.Fatalf("result while pending → %d %+v", code, st)
	}
	f.open(2)
	checkEnvelope(t, <-busy, envelope.StatusOK, 1)
	f.waitState(acc.JobID, envelope.JobDone)
}

func TestJobFailedAndTimeout(t *testing.T) {
	f := start(t, opts{keys: asyncKeys(map[string]string{"async_timeout": "200"})})
	_, failed := f.submit(withParams(`{"session_error":true}`, darkPNG))
	st := f.waitState(failed.JobID, envelope.JobFailed)
	if !strings.Contains(st.Error, "engine failure") {
		t.Fatalf("%+v", st)
	}
	if code, _ := f.jobStatus(failed.ResultURL); code != http.StatusConflict {
		t.Fatalf("result of failed job → %d", code)
	}
	_, slow := f.submit(withParams(`{"delay_ms":5000}`, darkPNG))
	st = f.waitState(slow.JobID, envelope.JobTimeout)
	if st.Error == "" {
		t.Fatalf("%+v", st)
	}
	if code, _ := f.jobStatus(slow.ResultURL); code != http.StatusConflict {
		t.Fatalf("result of timed-out job → %d", code)
	}
	if f.metric("mortred_async_jobs_total", "state", "failed") != 1 || f.metric("mortred_async_jobs_total", "state", "timeout") != 1 {
		t.Fatal("job states not counted")
	}
}

func TestJobErrors(t *testing.T) {
	f := start(t, opts{gated: true, keys: asyncKeys(map[string]string{"async_max_queue": "1"})})
	for _, p := range []string{"/jobs/nope", "/jobs/nope/wait", "/jobs/nope/result"} {
		checkEnvelope(t, f.do(req{method: http.MethodGet, path: p, token: token}), envelope.StatusNotFound, 0)
	}
	// Bad envelope: 422 before admission, nothing queued.
	checkEnvelope(t, f.do(req{path: "/jobs", token: token, body: `{"img_data":"x"}`}), envelope.StatusInvalidRequest, 0)
	checkEnvelope(t, f.do(req{path: "/jobs", token: "bad", body: images(darkPNG)}), envelope.StatusUnauthorized, 0)
	checkEnvelope(t, f.do(req{method: http.MethodGet, path: "/jobs", token: token}), envelope.StatusMethodNotAllowed, 0)
	checkEnvelope(t, f.do(req{path: "/jobs/x", token: token, body: images(darkPNG)}), envelope.StatusMethodNotAllowed, 0)

	_, acc := f.submit(images(darkPNG))
	rep, _ := f.submit(images(darkPNG))
	checkEnvelope(t, rep, envelope.StatusRateLimited, 0)
	if rep.hdr.Get("Retry-After") == "" || f.metric("mortred_queue_rejected_total", "queue", "async") != 1 {
		t.Fatal("async 429 without Retry-After or counter")
	}
	for _, q := range []string{"-1", "soon", "1.5"} {
		checkEnvelope(t, f.do(req{method: http.MethodGet, path: acc.PollURL + "/wait?timeout=" + q, token: token}), envelope.StatusInvalidRequest, 0)
	}
	f.open(1)
	f.waitState(acc.JobID, envelope.JobDone)
	// The slot is free again.
	if rep, _ := f.submit(images(darkPNG)); rep.code != http.StatusAccepted {
		t.Fatalf("→ %d", rep.code)
	}
	f.open(1)
}

func TestJobsOffAre404(t *testing.T) {
	f := start(t, opts{})
	checkEnvelope(t, f.do(req{path: "/jobs", token: token, body: images(darkPNG)}), envelope.StatusNotFound, 0)
	checkEnvelope(t, f.do(req{method: http.MethodGet, path: "/jobs/x/result", token: token}), envelope.StatusNotFound, 0)
}

func TestJobExpiry(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		f := start(t, opts{keys: asyncKeys(map[string]string{"async_max_completed": "1"})})
		_, a := f.submit(images(darkPNG))
		f.waitState(a.JobID, envelope.JobDone)
		_, b := f.submit(images(darkPNG))
		f.waitState(b.JobID, envelope.JobDone)
		if code, _ := f.jobStatus(a.PollURL); code != http.StatusNotFound {
			t.Fatalf("oldest job kept: %d", code)
		}
		if code, _ := f.jobStatus(b.ResultURL); code != 200 {
			t.Fatalf("newest job → %d", code)
		}
	})
	t.Run("ttl", func(t *testing.T) {
		f := start(t, opts{keys: asyncKeys(map[string]string{"async_job_ttl": "1000"})})
		_, a := f.submit(images(darkPNG))
		code, st := f.jobStatus(a.PollURL + "/wait?timeout=60000")
		if code != 200 || st.State != envelope.JobDone {
			t.Fatalf("%d %+v", code, st)
		}
		eventually(t, "the job to expire", func() bool {
			code, _ := f.jobStatus(a.PollURL)
			return code == http.StatusNotFound
		})
	})
}

func TestWaitCapsTimeout(t *testing.T) {
	f := start(t, opts{gated: true, keys: asyncKeys(nil)})
	_, acc := f.submit(images(darkPNG))
	done := make(chan envelope.JobStatus, 1)
	go func() {
		rep, err := f.try(req{method: http.MethodGet, path: acc.PollURL + "/wait?timeout=999999999", token: token})
		var st envelope.JobStatus
		if err == nil {
			_ = json.Unmarshal(rep.body, &st)
		}
		done <- st
	}()
	f.open(1)
	select {
	case st := <-done:
		if st.State != envelope.JobDone {
			t.Fatalf("%+v", st)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("wait did not return when the job finished")
	}
}

// TestJobTenants: a job submitted with X-Mortred-Tenant (the gateway's API
// key id) is not found by a read with another tenant, on every job route,
// and is found by its own tenant and by a read without the header.
func TestJobTenants(t *testing.T) {
	f := start(t, opts{keys: asyncKeys(nil)})
	rep := f.do(req{path: "/jobs", token: token, body: images(darkPNG), hdr: map[string]string{envelope.HeaderTenant: "team-a"}})
	var acc envelope.JobAccepted
	if rep.code != http.StatusAccepted || json.Unmarshal(rep.body, &acc) != nil {
		t.Fatalf("submit → %d %s", rep.code, rep.body)
	}
	if got := rep.hdr.Get(envelope.HeaderItems); got != "1" {
		t.Fatalf("%s on the 202: %q, want 1", envelope.HeaderItems, got)
	}
	read := func(path, tenant string) reply {
		r := req{method: http.MethodGet, path: path, token: token}
		if tenant != "-" {
			r.hdr = map[string]string{envelope.HeaderTenant: tenant}
		}
		return f.do(r)
	}
	if rep := read(acc.PollURL+"/wait?timeout=60000", "team-a"); rep.code != 200 || !strings.Contains(string(rep.body), `"state":"done"`) {
		t.Fatalf("own wait → %d %s", rep.code, rep.body)
	}
	for _, p := range []string{acc.PollURL, acc.PollURL + "/wait?timeout=10", acc.ResultURL} {
		for _, other := range []string{"team-b", "", "TEAM-A"} {
			rep := read(p, other)
			checkEnvelope(t, rep, envelope.StatusNotFound, 0)
			if !strings.Contains(string(rep.body), "no job") {
				t.Errorf("%s as %q: %s, want the unknown job's message", p, other, rep.body)
			}
		}
		for _, ok := range []string{"team-a", "-"} {
			if rep := read(p, ok); rep.code != 200 {
				t.Errorf("%s as %q → %d %s", p, ok, rep.code, rep.body)
			}
		}
	}
	// A job submitted without a tenant (the operator's) is no key's.
	_, op := f.submit(images(darkPNG))
	f.waitState(op.JobID, envelope.JobDone)
	checkEnvelope(t, read(op.ResultURL, "team-a"), envelope.StatusNotFound, 0)
}

// TestItemsHeader: an accepted request's answer counts its images in
// X-Mortred-Items; refusals carry none.
func TestItemsHeader(t *testing.T) {
	f := start(t, opts{keys: map[string]string{"max_request_items": "2"}})
	for _, c := range []struct {
		body string
		want string
	}{
		{images(darkPNG, lightPNG), "2"},
		{images(darkPNG, notImage), "2"}, // one item failed in the model's hands: both were taken
		{images(darkPNG, lightPNG, darkPNG), ""},
		{`{"images":[]}`, ""},
		{images(notImage), ""}, // every item refused before the model: 400
	} {
		rep := f.infer(c.body)
		if got := rep.hdr.Get(envelope.HeaderItems); got != c.want {
			t.Errorf("%.60s → %d, %s %q, want %q", c.body, rep.code, envelope.HeaderItems, got, c.want)
		}
	}
	if rep := f.do(req{token: "wrong", body: images(darkPNG)}); rep.hdr.Get(envelope.HeaderItems) != "" {
		t.Errorf("401 with %s", envelope.HeaderItems)
	}
}
