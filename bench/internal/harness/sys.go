package harness

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/freeport"
)

// FreePort returns a free loopback TCP port for a binary that must be told
// its port.
func FreePort() (int, error) { return freeport.TCP() }

// RaiseNoFile lifts RLIMIT_NOFILE (soft and hard) to at least want, so the
// children started afterwards inherit it. Raising the hard limit needs
// CAP_SYS_RESOURCE; without it the soft limit goes up to the hard one and
// the error says so. It returns the soft limit in force.
func RaiseNoFile(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: max(lim.Max, want)})
	if err == nil {
		return want, nil
	}
	if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: lim.Max, Max: lim.Max}); err2 != nil {
		return lim.Cur, fmt.Errorf("raise RLIMIT_NOFILE to %d: %v; to the hard limit %d: %v", want, err, lim.Max, err2)
	}
	return lim.Max, fmt.Errorf("hard limit %d could not be raised to %d (%v: needs CAP_SYS_RESOURCE)", lim.Max, want, err)
}

// CPUTime is the user+system CPU time pid has used, from /proc/<pid>/stat
// (clock ticks of 10 ms).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14, stime 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// Children lists pid's direct children (from /proc/<pid>/task/*/children).
func Children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			var c int
			if _, err := fmt.Sscan(f, &c); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// Machine describes where a run happened.
type Machine struct {
	CPUModel string
	NProc    int
	MemTotal string
	Kernel   string
	Go       string
	Nginx    string
	Wrk      string
}

// ReadMachine reads the machine description from /proc and the tools'
// own version output.
func ReadMachine() Machine {
	m := Machine{NProc: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(v), &kb)
				m.MemTotal = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	m.Nginx = firstLine("nginx", "-v")
	m.Wrk = firstLine("wrk", "-v")
	return m
}

// firstLine is the first line a command prints about its version (nginx
// writes it on stderr, wrk exits non-zero), or "not found".
func firstLine(bin string, args ...string) string {
	path, err := exec.LookPath(bin)
	if err != nil {
		for _, dir := range []string{"/usr/sbin", "/usr/local/sbin"} {
			if _, serr := os.Stat(dir + "/" + bin); serr == nil {
				path = dir + "/" + bin
			}
		}
		if path == "" {
			return "not found"
		}
	}
	out, _ := exec.Command(path, args...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// LoadAvg is /proc/loadavg's first three fields.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// LookNginx finds the nginx binary, which Debian puts in /usr/sbin (not
// always on a non-root PATH).
func LookNginx() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", fmt.Errorf("nginx not found: install it with `apt-get install -y nginx-light` (scripts/setup-deb.sh lists it)")
}
