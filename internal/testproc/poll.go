package testproc

import (
	"testing"
	"time"
)

// pollEvery is how often Eventually and Until test their condition: often
// enough that a test does not wait noticeably, rarely enough that polling
// a server does not load the shared machine.
const pollEvery = 50 * time.Millisecond

// Eventually tests cond until it returns nil, failing the test with what
// and cond's last error once timeout has passed. Deadlines in callers are
// generous: the tests share two cores with other builds and tests.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %s: %v", what, timeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// Until is Eventually for a condition that has no error to tell.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pollEvery)
	}
}
