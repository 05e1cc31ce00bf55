package server

import (
	"container/list"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// Wait budget of GET /jobs/{id}/wait, in ms.
const (
	defaultWaitMS = 30000
	maxWaitMS     = 300000
)

// job is one async request. Fields after mu are guarded by the ledger's mu.
type job struct {
	id     string
	taskID string
	// tenant is the X-Mortred-Tenant of the submission ("" without one):
	// only reads with the same header, or with none, see the job.
	tenant    string
	submitted time.Time
	done      chan struct{} // closed when the job is terminal

	state    string
	finished time.Time
	errMsg   string
	result   []byte // the envelope, when state is done
	elem     *list.Element
}

// ledger is the in-memory job table: at most maxActive unfinished jobs
// (more → 429), finished jobs kept for ttl and at most maxCompleted of them,
// oldest evicted first. Expiry runs on every access; nothing runs in the
// background.
type ledger struct {
	maxActive, maxCompleted int
	ttl                     time.Duration
	m                       *metrics
	now                     func() time.Time

	mu       sync.Mutex
	jobs     map[string]*job
	finished list.List // *job in finish order
	active   int
}

func newLedger(maxActive, maxCompleted int, ttl time.Duration, m *metrics) *ledger {
	return &ledger{maxActive: maxActive, maxCompleted: maxCompleted, ttl: ttl, m: m, now: time.Now, jobs: map[string]*job{}}
}

// expireLocked drops finished jobs past their TTL or over the count.
func (l *ledger) expireLocked() {
	now := l.now()
	for e := l.finished.Front(); e != nil; e = l.finished.Front() {
		j := e.Value.(*job)
		if l.finished.Len() <= l.maxCompleted && now.Sub(j.finished) < l.ttl {
			break
		}
		l.finished.Remove(e)
		delete(l.jobs, j.id)
	}
}

func (l *ledger) add(taskID, tenant string) (*job, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	if l.active >= l.maxActive {
		return nil, false
	}
	j := &job{id: newID("job-"), taskID: taskID, tenant: tenant, submitted: l.now(), done: make(chan struct{}), state: envelope.JobPending}
	l.jobs[j.id] = j
	l.active++
	l.m.asyncQueueDepth.Set(float64(l.active))
	l.m.asyncJobs.WithLabelValues(envelope.JobPending).Inc()
	return j, true
}

// get finds job id for a read by r: a read that carries X-Mortred-Tenant
// (the gateway's, for an API key) finds only that tenant's jobs, so one
// tenant cannot learn of, wait for or read another's; a read without the
// header (the gateway's operator token, or a caller with the model token
// on the model port) finds every job.
func (l *ledger) get(id string, r *http.Request) (*job, envelope.JobStatus, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	j := l.jobs[id]
	if vv, scoped := r.Header[envelope.HeaderTenant]; j != nil && scoped && (len(vv) != 1 || vv[0] != j.tenant) {
		j = nil
	}
	if j == nil {
		return nil, envelope.JobStatus{}, false
	}
	return j, l.statusLocked(j), true
}

func (l *ledger) statusLocked(j *job) envelope.JobStatus {
	end := l.now()
	if !j.finished.IsZero() {
		end = j.finished
	}
	return envelope.JobStatus{JobID: j.id, State: j.state, ElapsedMS: envelope.MS(end.Sub(j.submitted).Nanoseconds()), Error: j.errMsg}
}

func (l *ledger) running(j *job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if j.state == envelope.JobPending {
		j.state = envelope.JobRunning
		l.m.asyncJobs.WithLabelValues(envelope.JobRunning).Inc()
	}
}

func (l *ledger) finish(j *job, state, errMsg string, result []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j.state, j.errMsg, j.result, j.finished = state, errMsg, result, l.now()
	j.elem = l.finished.PushBack(j)
	l.active--
	l.m.asyncQueueDepth.Set(float64(l.active))
	l.m.asyncJobs.WithLabelValues(state).Inc()
	close(j.done)
	l.expireLocked()
}

// submitJob answers 202 at admission and runs the request in the
// background with async_timeout as its deadline.
// items is the X-Mortred-Items of the 202.
func (s *Server) submitJob(w http.ResponseWriter, r *http.Request, p *envelope.Parsed, taskID string, arrival time.Time, items string) {
	j, ok := s.jobs.add(taskID, r.Header.Get(envelope.HeaderTenant))
	if !ok {
		s.m.queueRejected.WithLabelValues("async").Inc()
		retry := s.q.retryAfter()
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		reject(w, envelope.StatusRateLimited, taskID, arrival, fmt.Sprintf("async_max_queue (%d) unfinished jobs already; retry after %d s", s.cfg.AsyncMaxQueue, retry))
		return
	}
	s.wg.Add(1)
	go s.runJob(j, p, arrival)
	poll := "/jobs/" + j.id
	w.Header().Set("Location", poll)
	w.Header().Set(envelope.HeaderItems, items)
	writeJSON(w, http.StatusAccepted, taskID, envelope.JobAccepted{JobID: j.id, State: envelope.JobPending, PollURL: poll, ResultURL: poll + "/result"})
}

func (s *Server) runJob(j *job, p *envelope.Parsed, arrival time.Time) {
	defer s.wg.Done()
	resp, err := s.infer(s.ctx, p, j.taskID, arrival, arrival.Add(s.cfg.JobTimeout()), true, func() { s.jobs.running(j) })
	switch {
	case err != nil || resp == nil:
		s.jobs.finish(j, envelope.JobFailed, "the server stopped before the job ran", nil)
	case resp.Status == envelope.StatusRunTimeout:
		s.jobs.finish(j, envelope.JobTimeout, fmt.Sprintf("async_timeout (%d ms) expired before any item finished", s.cfg.AsyncTimeout), nil)
	case envelope.HTTPCode(resp.Status) != http.StatusOK:
		msg := resp.StatusStr
		for _, it := range resp.Results {
			if it.Message != "" {
				msg += ": " + it.Message
				break
			}
		}
		s.jobs.finish(j, envelope.JobFailed, msg, nil)
	default:
		b, err := json.Marshal(resp)
		if err != nil {
			s.jobs.finish(j, envelope.JobFailed, "encoding the result failed: "+err.Error(), nil)
			return
		}
		s.jobs.finish(j, envelope.JobDone, "", b)
	}
}

func (s *Server) jobNotFound(w http.ResponseWriter, r *http.Request, id string, arrival time.Time) {
	reject(w, envelope.StatusNotFound, taskID("", r), arrival, fmt.Sprintf("no job %q: it never existed or expired (async_job_ttl %d ms, async_max_completed %d)", id, s.cfg.AsyncJobTTL, s.cfg.AsyncMaxCompleted))
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request, id string, arrival time.Time) {
	_, st, ok := s.jobs.get(id, r)
	if !ok {
		s.jobNotFound(w, r, id, arrival)
		return
	}
	writeJSON(w, http.StatusOK, "", st)
}

func (s *Server) waitJob(w http.ResponseWriter, r *http.Request, id string, arrival time.Time) {
	wait := defaultWaitMS
	if v := r.URL.Query().Get("timeout"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			resp := envelope.New(envelope.StatusInvalidRequest, taskID("", r), envelope.FieldError{Pointer: "", Message: fmt.Sprintf("query timeout=%q must be a non-negative integer of milliseconds (default %d, cap %d)", v, defaultWaitMS, maxWaitMS)})
			writeEnvelope(w, resp)
			return
		}
		wait = min(n, maxWaitMS)
	}
	j, _, ok := s.jobs.get(id, r)
	if !ok {
		s.jobNotFound(w, r, id, arrival)
		return
	}
	t := time.NewTimer(time.Duration(wait) * time.Millisecond)
	defer t.Stop()
	select {
	case <-j.done:
	case <-t.C:
	case <-r.Context().Done():
		return
	case <-s.ctx.Done():
	}
	s.jobs.mu.Lock()
	st := s.jobs.statusLocked(j)
	s.jobs.mu.Unlock()
	writeJSON(w, http.StatusOK, "", st)
}

func (s *Server) jobResult(w http.ResponseWriter, r *http.Request, id string, arrival time.Time) {
	j, st, ok := s.jobs.get(id, r)
	if !ok {
		s.jobNotFound(w, r, id, arrival)
		return
	}
	if st.State != envelope.JobDone {
		writeJSON(w, http.StatusConflict, "", st)
		return
	}
	s.jobs.mu.Lock()
	b := j.result
	s.jobs.mu.Unlock()
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Request-ID", j.taskID)
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) // shared by every reader: never appended to
	_, _ = w.Write([]byte("\n"))
}
