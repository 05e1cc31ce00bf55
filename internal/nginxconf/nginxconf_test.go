package nginxconf

import (
	"strings"
	"testing"
)

func TestUpstreamsRewritesOnlyAddresses(t *testing.T) {
	sample, err := Read(RoutersSample)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Upstreams(sample, 18090, []int{17001, 17002})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"    server 127.0.0.1:17001 max_fails=1 fail_timeout=5s;\n    server 127.0.0.1:17002 max_fails=1 fail_timeout=5s;\n\n",
		"listen 127.0.0.1:18090;",
		"proxy_next_upstream error timeout;",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rewritten sample lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, ":6391") || strings.Contains(got, ":8090") || strings.Count(got, "server 127.0.0.1:") != 2 {
		t.Errorf("sample addresses left:\n%s", got)
	}
	// Everything but the addresses is the sample's own text.
	strip := func(s string) string {
		var keep []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.Contains(l, "127.0.0.1:") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	if strip(got) != strip(sample) {
		t.Errorf("rewriting changed more than addresses")
	}
}

func TestUpstreamsRefusesMisshapenSample(t *testing.T) {
	for name, s := range map[string]string{
		"no servers":    "upstream u {\n}\nserver {\n    listen 127.0.0.1:1;\n}\n",
		"split servers": "upstream u {\n    server 127.0.0.1:1;\n    keepalive 4;\n    server 127.0.0.1:2;\n}\nserver {\n    listen 127.0.0.1:1;\n}\n",
		"two listens":   "upstream u {\n    server 127.0.0.1:1;\n}\nserver {\n    listen 127.0.0.1:1;\n    listen 127.0.0.1:2;\n}\n",
	} {
		if _, err := Upstreams(s, 1, []int{2}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The manual shows the sample as it is, so what operators copy is what the
// tests run.
func TestManualShowsTheSample(t *testing.T) {
	sample, err := Read(RoutersSample)
	if err != nil {
		t.Fatal(err)
	}
	manual, err := Read("docs/mentatd-serve.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(manual, "```nginx\n"+sample+"```\n") {
		t.Errorf("docs/mentatd-serve.md does not show %s as it is, in an nginx block", RoutersSample)
	}
}
