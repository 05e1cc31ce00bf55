package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// result is one measurement (one segment, or the sum of a scenario's
// segments).
type result struct {
	name     string
	items    int
	errors   int
	elapsed  time.Duration
	latency  []time.Duration // per call (a call may carry several items)
	firstErr error
	// CPU time spent during the measurement: self is this process (the
	// in-process loop, or the HTTP clients), server the mortred-server
	// child (zero in-process).
	cpuSelf, cpuServer time.Duration
}

func (r *result) throughput() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.items) / r.elapsed.Seconds()
}

func (r *result) pct(p float64) time.Duration {
	if len(r.latency) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), r.latency...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// add folds segment o into r.
func (r *result) add(o *result) {
	r.items += o.items
	r.errors += o.errors
	r.elapsed += o.elapsed
	r.latency = append(r.latency, o.latency...)
	r.cpuSelf += o.cpuSelf
	r.cpuServer += o.cpuServer
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
}

// cpuPerItem is CPU milliseconds per item.
func cpuPerItem(d time.Duration, items int) float64 {
	if items == 0 {
		return 0
	}
	return float64(d.Microseconds()) / 1000 / float64(items)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

// selfCPU is this process's user+system time, all threads (ONNX Runtime's
// included).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is another process's user+system time from /proc/<pid>/stat
// (clock ticks, 100 per second on Linux).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
