package keys

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fe64bb06/frontdoor/internal/atomicfile"
)

// NewSecret returns a fresh secret for p (Prefix + 32 random bytes in
// base64url without padding) and its hash as a key file writes it.
func NewSecret(p Product) (secret, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	secret = p.Prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, HashSecret(secret), nil
}

// HashSecret is the key file's hash of secret: SHA-256, lower-case hex.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Command runs p's `keys` subcommand (args after "keys"): new, list,
// disable or enable, as the manuals describe, and returns the exit code
// (0 done, 1 failed, 2 usage). `new` prints the secret once, on stdout,
// and appends the entry to the file atomically (created 0600 when
// missing); the file is parsed before it is replaced, so it is never left
// unparseable.
func Command(p Product, args []string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprintf(stderr, "usage: %s keys new --file F --id NAME [--models GLOB,…] [--rpm N] [--%s N] [--max-concurrent N] [--priority critical|standard|sheddable] [--weight W] [--expires RFC3339]\n", p.Name, p.UnitField())
		fmt.Fprintf(stderr, "       %s keys list --file F [--json]\n", p.Name)
		fmt.Fprintf(stderr, "       %s keys disable|enable --file F ID\n", p.Name)
		return 2
	}
	if len(args) == 0 {
		return usage()
	}
	fset := flag.NewFlagSet(p.Name+" keys "+args[0], flag.ContinueOnError)
	fset.SetOutput(stderr)
	file := fset.String("file", "", "the key file")
	var err error
	switch args[0] {
	case "new":
		id := fset.String("id", "", "the key's id, shown in logs, metrics and pages")
		models := fset.String("models", "", "comma-separated model globs (empty: every model)")
		rpm := fset.Int64("rpm", 0, "requests per minute (0: no limit)")
		units := fset.Int64(p.UnitField(), 0, string(p.Unit)+" per minute (0: no limit)")
		conc := fset.Int64("max-concurrent", 0, "requests at once (0: no limit)")
		prio := fset.String("priority", "", "critical, standard or sheddable (default standard)")
		weight := fset.Float64("weight", 0, "share within its priority when engines saturate (default 1)")
		expires := fset.String("expires", "", "when the key stops working, RFC 3339 (e.g. 2027-01-01T00:00:00Z)")
		if fset.Parse(args[1:]) != nil || fset.NArg() != 0 || *file == "" || *id == "" {
			return usage()
		}
		e := Entry{ID: *id, RPM: *rpm, MaxConcurrent: *conc, Priority: *prio, Weight: *weight}
		if p.Unit == Images {
			e.IPM = *units
		} else {
			e.TPM = *units
		}
		for _, m := range strings.Split(*models, ",") {
			if m = strings.TrimSpace(m); m != "" {
				e.Models = append(e.Models, m)
			}
		}
		if *expires != "" {
			t, perr := time.Parse(time.RFC3339, *expires)
			if perr != nil {
				fmt.Fprintf(stderr, "%s keys new: --expires %q is not an RFC 3339 time such as 2027-01-01T00:00:00Z\n", p.Name, *expires)
				return 2
			}
			e.Expires = &t
		}
		var secret string
		secret, err = newKey(p, *file, e)
		if err == nil {
			fmt.Fprintln(stdout, secret)
			fmt.Fprintf(stderr, "key %s added to %s; the secret above is shown this once: give it to the key's owner\n", *id, *file)
		}
	case "list":
		asJSON := fset.Bool("json", false, "print JSON")
		if fset.Parse(args[1:]) != nil || fset.NArg() != 0 || *file == "" {
			return usage()
		}
		err = list(p, *file, *asJSON, stdout)
	case "disable", "enable":
		if fset.Parse(args[1:]) != nil || fset.NArg() != 1 || *file == "" {
			return usage()
		}
		err = setDisabled(p, *file, fset.Arg(0), args[0] == "disable")
		if err == nil {
			fmt.Fprintf(stderr, "key %s %sd in %s; a running server picks it up within a second (or on SIGHUP)\n", fset.Arg(0), args[0], *file)
		}
	default:
		return usage()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s keys %s: %v\n", p.Name, args[0], err)
		return 1
	}
	return 0
}

// readKeyFile reads path; a missing file is empty.
func readKeyFile(path string) ([]byte, fs.FileMode, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0o600, nil
	}
	if err != nil {
		return nil, 0, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	return b, fi.Mode().Perm(), nil
}

func newKey(p Product, path string, e Entry) (string, error) {
	old, mode, err := readKeyFile(path)
	if err != nil {
		return "", err
	}
	entries, err := Parse(path, old, p)
	if err != nil {
		return "", err
	}
	for _, x := range entries {
		if x.ID == e.ID {
			return "", fmt.Errorf("%s already has a key %q (line %d); choose another id", path, e.ID, x.Line)
		}
	}
	secret, hash, err := NewSecret(p)
	if err != nil {
		return "", err
	}
	e.Hash = hash
	var b strings.Builder
	b.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		b.WriteByte('\n')
	}
	if len(old) > 0 {
		b.WriteByte('\n')
	}
	b.WriteString(block(e))
	return secret, writeChecked(p, path, []byte(b.String()), mode)
}

// block is e as a [[key]] table.
func block(e Entry) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var b strings.Builder
	b.WriteString("[[key]]\nid = " + q(e.ID) + "\nhash = " + q(e.Hash) + "\n")
	if len(e.Models) > 0 {
		ms := make([]string, len(e.Models))
		for i, m := range e.Models {
			ms[i] = q(m)
		}
		b.WriteString("models = [" + strings.Join(ms, ", ") + "]\n")
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"rpm", e.RPM}, {"tpm", e.TPM}, {"ipm", e.IPM}, {"max_concurrent", e.MaxConcurrent}} {
		if f.v != 0 {
			fmt.Fprintf(&b, "%s = %d\n", f.name, f.v)
		}
	}
	if e.Priority != "" {
		b.WriteString("priority = " + q(e.Priority) + "\n")
	}
	if e.Weight != 0 {
		b.WriteString("weight = " + strconv.FormatFloat(e.Weight, 'g', -1, 64) + "\n")
	}
	if e.Expires != nil {
		b.WriteString("expires = " + e.Expires.Format(time.RFC3339) + "\n")
	}
	return b.String()
}

// writeChecked parses data, then replaces path with it atomically (a
// temporary file beside it, renamed), keeping mode.
func writeChecked(p Product, path string, data []byte, mode fs.FileMode) error {
	if _, err := Parse(path, data, p); err != nil {
		return fmt.Errorf("the change would leave the file unusable, so it was not made: %w", err)
	}
	return atomicfile.Write(path, data, mode)
}

// listed is an entry as `keys list --json` shows it: no hash.
type listed struct {
	ID            string     `json:"id"`
	Models        []string   `json:"models"`
	RPM           int64      `json:"rpm"`
	Units         int64      `json:"units_per_minute"`
	Unit          Unit       `json:"unit"`
	MaxConcurrent int64      `json:"max_concurrent"`
	Priority      string     `json:"priority"`
	Weight        float64    `json:"weight"`
	Expires       *time.Time `json:"expires,omitempty"`
	State         string     `json:"state"`
}

func list(p Product, path string, asJSON bool, out io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	entries, err := Parse(path, data, p)
	if err != nil {
		return err
	}
	rows := make([]listed, len(entries))
	now := time.Now()
	for i, e := range entries {
		prio, _ := ParsePriority(e.Priority)
		l := listed{ID: e.ID, Models: e.Models, RPM: e.RPM, Units: e.TPM, Unit: p.Unit, MaxConcurrent: e.MaxConcurrent,
			Priority: prio.String(), Weight: e.Weight, Expires: e.Expires, State: "active"}
		if p.Unit == Images {
			l.Units = e.IPM
		}
		if l.Weight == 0 {
			l.Weight = 1
		}
		if l.Models == nil {
			l.Models = []string{}
		}
		switch {
		case e.Disabled:
			l.State = "disabled"
		case e.Expires != nil && !now.Before(*e.Expires):
			l.State = "expired"
		}
		rows[i] = l
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\tSTATE\tMODELS\tRPM\t%s\tMAX_CONCURRENT\tPRIORITY\tWEIGHT\tEXPIRES\n", strings.ToUpper(p.UnitField()))
	lim := func(v int64) string {
		if v == 0 {
			return "-"
		}
		return strconv.FormatInt(v, 10)
	}
	for _, l := range rows {
		models, exp := "*", "-"
		if len(l.Models) > 0 {
			models = strings.Join(l.Models, ",")
		}
		if l.Expires != nil {
			exp = l.Expires.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%g\t%s\n", l.ID, l.State, models, lim(l.RPM), lim(l.Units), lim(l.MaxConcurrent), l.Priority, l.Weight, exp)
	}
	return tw.Flush()
}

var disabledRE = regexp.MustCompile(`^[ \t]*disabled[ \t]*=`)

// setDisabled edits the disabled line of entry id in place (or adds one
// after its [[key]] header), keeping every other line.
func setDisabled(p Product, path, id string, disabled bool) error {
	data, mode, err := readKeyFile(path)
	if err != nil {
		return err
	}
	entries, err := Parse(path, data, p)
	if err != nil {
		return err
	}
	var e *Entry
	for i := range entries {
		if entries[i].ID == id {
			e = &entries[i]
		}
	}
	if e == nil {
		return fmt.Errorf("%s has no key %q (`keys list` shows the ids)", path, id)
	}
	lines := strings.SplitAfter(string(data), "\n")
	end := len(lines)
	for i := e.Line; i < len(lines); i++ { // lines[e.Line] is the line after the header
		if t := strings.TrimSpace(lines[i]); strings.HasPrefix(t, "[") {
			end = i
			break
		}
	}
	val := "disabled = " + strconv.FormatBool(disabled) + "\n"
	done := false
	for i := e.Line; i < end; i++ {
		if disabledRE.MatchString(lines[i]) {
			lines[i], done = val, true
		}
	}
	if !done {
		lines = append(lines[:e.Line], append([]string{val}, lines[e.Line:]...)...)
	}
	return writeChecked(p, path, []byte(strings.Join(lines, "")), mode)
}
