package gateway

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuTicks is one CPU's busy and total jiffies from /proc/stat.
type cpuTicks struct{ busy, total uint64 }

// readCPU reads the line of one CPU ("0", "1") from /proc/stat; ok is
// false when cpu is not a single CPU number (no pin, a list) or the line
// is missing, and the caller then reports no busy figure.
func readCPU(cpu string) (cpuTicks, bool) {
	if _, err := strconv.Atoi(cpu); err != nil {
		return cpuTicks{}, false
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "cpu"+cpu {
			continue
		}
		var t cpuTicks
		for i, s := range f[1:] {
			v, _ := strconv.ParseUint(s, 10, 64)
			// guest and guest_nice (fields 9, 10) are already in user
			// and nice; idle (3) and iowait (4) are not busy.
			if i >= 8 {
				break
			}
			t.total += v
			if i != 3 && i != 4 {
				t.busy += v
			}
		}
		return t, true
	}
	return cpuTicks{}, false
}

// busyMeter measures what share of two CPUs was busy between start and
// stop: every process's time, so other work on the machine shows too.
type busyMeter struct {
	cpus   [2]string
	before [2]cpuTicks
	ok     [2]bool
}

func startBusy(server, load string) *busyMeter {
	m := &busyMeter{cpus: [2]string{server, load}}
	for i, c := range m.cpus {
		m.before[i], m.ok[i] = readCPU(c)
	}
	return m
}

// stop is each CPU's busy fraction, -1 where it could not be read.
func (m *busyMeter) stop() [2]float64 {
	out := [2]float64{-1, -1}
	for i, c := range m.cpus {
		after, ok := readCPU(c)
		if !ok || !m.ok[i] || after.total <= m.before[i].total {
			continue
		}
		out[i] = float64(after.busy-m.before[i].busy) / float64(after.total-m.before[i].total)
	}
	return out
}

// pct is a busy fraction for the text, "?" where unknown.
func pct(f float64) string {
	if f < 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}
