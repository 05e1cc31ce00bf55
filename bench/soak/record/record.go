// Package record holds what a soak run records: every request's verdict,
// every injected fault and every process-health reading, shared by the
// load, the faults, the sampler and the report.
package record

import (
	"sync"
	"time"
)

// Outcome is the verdict on one request.
type Outcome int

const (
	// Served: answered as it should be (for bad traffic, refused with the
	// status it deserves).
	Served Outcome = iota
	// CleanFail: not served, and the client was told so (a clear status
	// and body, an error event in a stream, or a connection error) while
	// a fault was on the request's path.
	CleanFail
	// Unattributed: failed cleanly, but no injected fault explains it.
	Unattributed
	// Defect: a 2xx with wrong or truncated content, a stream that ended
	// without its end marker and without an error, a lost job, a hang
	// past the deadline, an answer meant for another client.
	Defect
)

func (o Outcome) String() string {
	switch o {
	case Served:
		return "served"
	case CleanFail:
		return "failed cleanly (fault)"
	case Unattributed:
		return "failed, no fault to blame"
	case Defect:
		return "defect"
	}
	return "?"
}

// Result is one judged request.
type Result struct {
	// Kind names the request's type: "chat", "chat-stream", "mcp-call",
	// "ocr", "job", "bad-json", …
	Kind       string
	Start, End time.Time
	// Failed is set by the client when the request was not served; the
	// judge turns it into CleanFail or Unattributed from the faults.
	Failed bool
	// Defect is set by the client when the answer is wrong (see Outcome).
	Defect bool
	// Outcome is the final verdict, set by Judge.
	Outcome Outcome
	// Status is the HTTP status (0: none, a connection error).
	Status int
	// Detail says what went wrong, for failures and defects.
	Detail string
	// Path names the components the request depended on (Fault.Target
	// values: "engine-a1", "router-1", "gateway", "model-ppocr", …);
	// a failure is attributable when a fault on one of them overlaps it.
	Path []string
	// Only, when set, names the fault kinds that may explain this
	// failure (a job lost from the ledger: only a fault that ends the
	// process holding it).
	Only []string
	// Blame is the fault kind a failure was attributed to.
	Blame string
}

// Fault is one injected fault.
type Fault struct {
	// Kind is the fault's type ("sigkill-engine", "sigstop-agent",
	// "restart-router", "disk-full", "link-down", …); Target the
	// component it hit.
	Kind, Target string
	// Start is when it was injected, End when it was lifted (the
	// process restarted, resumed, the disk freed), Recovered when the
	// component served again (zero: never within the bound).
	Start, End, Recovered time.Time
	// Bound is the documented recovery bound for its kind.
	Bound time.Duration
	// Note says what happened, e.g. why recovery failed.
	Note string
}

// Sample is one reading of one long-lived process.
type Sample struct {
	At   time.Time
	Proc string // component name, as in Fault.Target
	PID  int
	// RSS in bytes; FDs open descriptors; Conns open sockets; Threads
	// OS threads; Goroutines from the process's Prometheus metrics
	// (go_goroutines), -1 when it exposes none.
	RSS int64
	// RSSAnon is the part of RSS no file backs (RssAnon: heap, stacks):
	// memory a process keeps grows here, while pages of its binary it
	// runs for the first time grow only RSS.
	RSSAnon             int64
	FDs, Conns, Threads int
	Goroutines          int
}

// Recorder collects results, faults and samples from many goroutines.
type Recorder struct {
	mu      sync.Mutex
	results []Result
	faults  []*Fault
	samples []Sample
}

func (r *Recorder) Result(x Result) {
	r.mu.Lock()
	r.results = append(r.results, x)
	r.mu.Unlock()
}

func (r *Recorder) Fault(f *Fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
}

func (r *Recorder) Sample(s Sample) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
}

// Edit runs f under the recorder's lock, for changing a Fault already
// recorded (its End and Recovered are set while the run goes on).
func (r *Recorder) Edit(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
}

// Snapshot copies everything recorded so far.
func (r *Recorder) Snapshot() ([]Result, []Fault, []Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs := make([]Fault, len(r.faults))
	for i, f := range r.faults {
		fs[i] = *f
	}
	return append([]Result(nil), r.results...), fs, append([]Sample(nil), r.samples...)
}
