package keys

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// fileForm is a key file's top level.
type fileForm struct {
	Key []Entry `toml:"key"`
}

var (
	headerRE = regexp.MustCompile(`(?m)^[ \t]*\[\[[ \t]*key[ \t]*\]\]`)
	idRE     = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
)

// Parse reads a key file's bytes (name is used in errors only). It checks
// every rule the Entry fields state, and refuses a field of the other
// product's unit (tpm in a gateway file, ipm in a router file) and any
// unknown field, so that no limit the operator wrote goes unenforced.
// Errors are *FileError with the line of the offending entry.
func Parse(name string, data []byte, p Product) ([]Entry, error) {
	var f fileForm
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &FileError{File: name, Line: pe.Position.Line, Reason: pe.Message}
		}
		return nil, &FileError{File: name, Reason: err.Error()}
	}
	text := string(data)
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		field := k[len(k)-1]
		reason := fmt.Sprintf("unknown field %q", k.String())
		if len(k) == 1 {
			reason = fmt.Sprintf("unknown top-level field %q; a key file holds [[key]] tables only", k.String())
		}
		return nil, &FileError{File: name, Line: fieldLine(text, field), Reason: reason}
	}
	other := "ipm"
	if p.Unit == Images {
		other = "tpm"
	}
	for _, k := range md.Keys() {
		if len(k) == 2 && k[0] == "key" && k[1] == other {
			return nil, &FileError{File: name, Line: fieldLine(text, other),
				Reason: fmt.Sprintf("%s is not a limit of %s (its keys limit %s with %s); remove it", other, p.Name, p.Unit, p.UnitField())}
		}
	}
	heads := headerRE.FindAllStringIndex(text, -1)
	ids, hashes := map[string]bool{}, map[string]bool{}
	for i := range f.Key {
		e := &f.Key[i]
		if i < len(heads) {
			e.Line = 1 + strings.Count(text[:heads[i][0]], "\n")
		}
		if err := check(e, p); err != nil {
			return nil, &FileError{File: name, Line: e.Line, Reason: entryName(e) + err.Error()}
		}
		h := strings.ToLower(e.Hash)
		switch {
		case ids[e.ID]:
			return nil, &FileError{File: name, Line: e.Line, Reason: fmt.Sprintf("id %q is used twice; ids must be unique", e.ID)}
		case hashes[h]:
			return nil, &FileError{File: name, Line: e.Line, Reason: entryName(e) + "its hash is another entry's too; every key needs its own secret"}
		}
		ids[e.ID], hashes[h] = true, true
	}
	return f.Key, nil
}

func entryName(e *Entry) string {
	if e.ID == "" {
		return ""
	}
	return fmt.Sprintf("key %q: ", e.ID)
}

// check applies one entry's rules.
func check(e *Entry, p Product) error {
	switch {
	case !idRE.MatchString(e.ID):
		return fmt.Errorf("id %q must be 1-64 characters of A-Z a-z 0-9 . _ -", e.ID)
	case len(e.Hash) != 64:
		return fmt.Errorf("hash must be the SHA-256 of the key as 64 hex digits (`%s keys new` writes it), not %d characters", p.Name, len(e.Hash))
	}
	if _, err := hex.DecodeString(e.Hash); err != nil {
		return errors.New("hash must be 64 hex digits")
	}
	for _, g := range e.Models {
		if g == "" {
			return errors.New("models has an empty pattern; leave models out to allow every model")
		}
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("models pattern %q is not a valid glob", g)
		}
	}
	for _, l := range []struct {
		name string
		v    int64
	}{{"rpm", e.RPM}, {"tpm", e.TPM}, {"ipm", e.IPM}, {"max_concurrent", e.MaxConcurrent}} {
		if l.v < 0 {
			return fmt.Errorf("%s is %d; a limit is a positive number, or 0 (or absent) for none", l.name, l.v)
		}
	}
	if _, err := ParsePriority(e.Priority); err != nil {
		return err
	}
	if e.Weight < 0 || math.IsNaN(e.Weight) || math.IsInf(e.Weight, 0) {
		return fmt.Errorf("weight %v must be a positive number (0 or absent means 1)", e.Weight)
	}
	return nil
}

// fieldLine is the first line that assigns field, for messages about a
// field whose entry TOML's metadata does not say.
func fieldLine(text, field string) int {
	re, err := regexp.Compile(`(?m)^[ \t]*"?` + regexp.QuoteMeta(field) + `"?[ \t]*=`)
	if err != nil {
		return 0
	}
	loc := re.FindStringIndex(text)
	if loc == nil {
		return 0
	}
	return 1 + strings.Count(text[:loc[0]], "\n")
}
