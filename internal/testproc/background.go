package testproc

import (
	"context"
	"testing"
)

// Background runs run in its own goroutine for the rest of the test, the
// in-process counterpart of Start: cleanup cancels run's context, waits for
// it to return, and fails the test if it returned an error.
func Background(t testing.TB, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
