package ctl

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/envconf"
)

func run(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb, envconf.Map(env))
	return out.String(), errb.String(), code
}

// readEnvFile parses KEY=VALUE lines, skipping comments.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		out[k] = v
	}
	return out
}

func TestInitTrust(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mortred.env")
	stdout, stderr, code := run(t, nil, "init-trust", "--out", path)
	if code != 0 || stderr != "" || !strings.Contains(stdout, "wrote fresh tokens to "+path+" (mode 0600)") {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", st.Mode(), err)
	}
	first := readEnvFile(t, path)
	names := []string{"MORTRED_API_TOKEN", "MORTRED_METRICS_TOKEN", "MORTRED_AUTH_TOKEN"}
	seen := map[string]bool{}
	for _, n := range names {
		v := first[n]
		if len(v) < 40 || seen[v] {
			t.Fatalf("%s=%q: want a fresh, distinct token of 256 bits", n, v)
		}
		seen[v] = true
	}
	if len(first) != len(names) {
		t.Fatalf("unexpected variables: %v", first)
	}

	// No overwrite without --force: exit 1, the file unchanged.
	before, _ := os.ReadFile(path)
	_, stderr, code = run(t, nil, "init-trust", "--out", path)
	after, _ := os.ReadFile(path)
	if code != 1 || !strings.Contains(stderr, "exists; pass --force") || !bytes.Equal(before, after) {
		t.Fatalf("second run: exit %d, %q, changed %v", code, stderr, !bytes.Equal(before, after))
	}

	// --force writes new tokens, and mode 0600 even over a 0644 file.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _, code = run(t, nil, "--json", "init-trust", "--out", path, "--force")
	if code != 0 || strings.TrimSpace(stdout) != `{"file":"`+path+`"}` {
		t.Fatalf("--force: exit %d %q", code, stdout)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode after --force %v", st.Mode())
	}
	second := readEnvFile(t, path)
	for _, n := range names {
		if second[n] == first[n] {
			t.Fatalf("%s kept its old value", n)
		}
	}

	if _, stderr, code := run(t, nil, "init-trust", "extra"); code != 2 || !strings.Contains(stderr, "init-trust takes no arguments") {
		t.Fatalf("positional: %d %q", code, stderr)
	}
}

func TestNewTokenDistinct(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := NewToken()
		if seen[tok] || len(tok) != 43 {
			t.Fatalf("token %q", tok)
		}
		seen[tok] = true
	}
}

// TestInitTrustHintWorksAsPrinted runs the printed "load them with" line
// and the file's header line in a real shell, from the directory
// mortredctl ran in and (for an absolute --out) from another one.
func TestInitTrustHintWorksAsPrinted(t *testing.T) {
	root := t.TempDir()
	elsewhere := t.TempDir()
	for _, c := range []struct {
		out, hint string
		absolute  bool
	}{
		{filepath.Join(root, "x/mortred.env"), ". " + filepath.Join(root, "x/mortred.env"), true},
		{"mortred.env", ". ./mortred.env", false},
		{"sub/m.env", ". ./sub/m.env", false},
		{"./dot.env", ". ./dot.env", false},
		{"../up.env", ". ../up.env", false},
		{filepath.Join(root, "with space/it's.env"), `. '` + filepath.Join(root, "with space/it") + `'\''s.env'`, true},
	} {
		t.Run(c.out, func(t *testing.T) {
			dir := filepath.Join(root, "cwd")
			target := c.out
			if !filepath.IsAbs(target) {
				target = filepath.Join(dir, target)
			}
			for _, d := range []string{dir, filepath.Dir(target)} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Chdir(dir)
			stdout, stderr, code := run(t, nil, "init-trust", "--out", c.out, "--force")
			want := "load them with: set -a; " + c.hint + "; set +a\n"
			if code != 0 || stderr != "" || !strings.HasSuffix(stdout, want) {
				t.Fatalf("exit %d, stderr %q, stdout %q; want it to end %q", code, stderr, stdout, want)
			}
			header, err := os.ReadFile(c.out)
			if err != nil || !strings.Contains(string(header), "# Load it into a shell with: set -a; "+c.hint+"; set +a\n") {
				t.Fatalf("file header: %v\n%s", err, header)
			}
			line := strings.TrimPrefix(strings.TrimSuffix(want, "\n"), "load them with: ")
			dirs := []string{dir}
			if c.absolute {
				dirs = append(dirs, elsewhere)
			}
			tokens := readEnvFile(t, c.out)
			for _, d := range dirs {
				cmd := exec.Command("sh", "-c", line+`; printf %s "$MORTRED_API_TOKEN"`)
				cmd.Dir = d
				cmd.Env = []string{"PATH=/usr/bin:/bin"}
				got, err := cmd.CombinedOutput()
				if err != nil || string(got) != tokens["MORTRED_API_TOKEN"] {
					t.Fatalf("in %s, sh -c %q: %v: %q", d, line, err, got)
				}
			}
		})
	}
}
