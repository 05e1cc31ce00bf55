package keys

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testbin"
)

// TestBinariesManageKeys runs the real `mentatd-serve keys`, `mentatd
// serve keys` and `mortredctl keys` as an operator would, then checks
// that the files they wrote authenticate the secrets they printed.
func TestBinariesManageKeys(t *testing.T) {
	for _, c := range []struct {
		bin  string
		pre  []string
		p    Product
		unit string
	}{{"mentatd-serve", nil, Router, "--tpm"}, {"mentatd", []string{"serve"}, Router, "--tpm"}, {"mortredctl", nil, Gateway, "--ipm"}} {
		t.Run(c.bin, func(t *testing.T) {
			bin, err := testbin.Path(c.bin)
			if err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(t.TempDir(), "keys.toml")
			run := func(want int, args ...string) (string, string) {
				t.Helper()
				cmd := exec.Command(bin, append(append(append([]string{}, c.pre...), "keys"), args...)...)
				var out, errb bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				err := cmd.Run()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				if code != want {
					t.Fatalf("%v: exit %d, want %d: %s", args, code, want, errb.String())
				}
				return out.String(), errb.String()
			}
			out, errs := run(0, "new", "--file", f, "--id", "team-a", "--models", "a*", "--rpm", "5", c.unit, "7")
			secret := strings.TrimSpace(out)
			if !strings.HasPrefix(secret, c.p.Prefix) || strings.Contains(errs, secret) {
				t.Fatalf("secret %q, stderr %q", secret, errs)
			}
			run(2, "new", "--file", f)
			run(1, "new", "--file", f, "--id", "team-a")
			list, _ := run(0, "list", "--file", f)
			if !strings.Contains(list, "team-a") || strings.Contains(list, HashSecret(secret)) || strings.Contains(list, secret) {
				t.Fatalf("list: %s", list)
			}
			run(0, "disable", "--file", f, "team-a")
			s, err := Open(f, Options{Product: c.p})
			if err != nil {
				t.Fatal(err)
			}
			if _, rej := s.Authenticate(bearerHeader(secret), "127.0.0.1"); rej == nil || rej.Reason != DisabledKey {
				t.Fatalf("disabled: %+v", rej)
			}
			run(0, "enable", "--file", f, "team-a")
			if err := s.Reload(); err != nil {
				t.Fatal(err)
			}
			k, rej := s.Authenticate(bearerHeader(secret), "127.0.0.1")
			if rej != nil || k.RPM != 5 || k.Units != 7 || !k.Allows("abc") || k.Allows("b") {
				t.Fatalf("key %+v %+v", k, rej)
			}
		})
	}
}
