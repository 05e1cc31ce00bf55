package testnet

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestLanTFatalAndSkip(t *testing.T) {
	lt := &Adapter{}
	ran := false
	err := lt.Do(func() {
		lt.Helper()
		lt.Fatal("ip link add: ", "refused")
		ran = true
	})
	if err == nil || err.Error() != "ip link add: refused" || ran {
		t.Errorf("Fatal: %v (ran on: %v)", err, ran)
	}
	var skip *SkipError
	for _, f := range []func(){func() { lt.Skip("no ", "ip") }, func() { lt.Skipf("refused: %d", 1) }} {
		if err := lt.Do(f); !errors.As(err, &skip) {
			t.Errorf("Skip: %v, want a *SkipError", err)
		}
	}
	if skip.Msg != "refused: 1" {
		t.Errorf("Skipf message %q", skip.Msg)
	}
	if err := lt.Do(func() {}); err != nil {
		t.Errorf("nothing failed: %v", err)
	}
	// Any other panic is not ours to swallow.
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want the panic to go on", r)
		}
	}()
	_ = lt.Do(func() { panic("boom") })
}

func TestLanTCleanup(t *testing.T) {
	lt := &Adapter{}
	var order []int
	lt.Cleanup(func() { order = append(order, 1) })
	lt.Cleanup(func() { lt.Fatal("second failed"); order = append(order, 2) })
	lt.Cleanup(func() { order = append(order, 3); lt.Errorf("cleanup: %s", "third reported") })
	err := lt.Close()
	if !slices.Equal(order, []int{3, 1}) {
		t.Errorf("ran %v, want the last first and every one despite a Fatal", order)
	}
	if err == nil || !strings.Contains(err.Error(), "third reported") || !strings.Contains(err.Error(), "second failed") {
		t.Errorf("close: %v", err)
	}
	if err := lt.Close(); err != nil || len(order) != 2 {
		t.Errorf("a second close ran again: %v %v", err, order)
	}
}
