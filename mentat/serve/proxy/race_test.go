//go:build race

package proxy

// raceEnabled: the race detector's instrumentation deepens stacks, so
// the stack bound of TestIdleStreamMemory holds only without it.
const raceEnabled = true
