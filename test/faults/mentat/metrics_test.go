package mentat

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// scrapeGauge sums every sample of one metric name (all label sets, or
// those whose line contains each of labels) in a Prometheus text answer.
func scrapeGauge(url, name string, labels ...string) (float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue // a longer name with this prefix
		}
		if !containsAll(rest, labels) {
			continue
		}
		f := strings.Fields(line[strings.LastIndexByte(line, '}')+1:])
		if rest[0] == ' ' {
			f = strings.Fields(rest)
		}
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %v", url, line, err)
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s has no %s", url, name)
	}
	return sum, nil
}

// procUsage is what /proc says about a process.
type procUsage struct {
	fds   int
	rssKB int
}

func readProc(pid int) (procUsage, error) {
	var u procUsage
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return u, err
	}
	u.fds = len(ents)
	if u.rssKB, err = testproc.RSSKiB(pid); err == nil && u.rssKB == 0 {
		err = fmt.Errorf("/proc/%d/status has no VmRSS", pid)
	}
	if err != nil {
		return u, err
	}
	return u, nil
}

func containsAll(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
