// Package upstream holds the keys the router sends engines: the file named
// by SERVE_UPSTREAM_KEYS_FILE maps group names to the bearer token that
// group's engine wants (vLLM's --api-key). The router puts it in the
// Authorization header of every request it sends the group (proxied
// requests, admission probes, token counting); the client's own key never
// goes there.
//
// A key comes only from this file, never from an announcement or a
// daemon's view, and it is never shown or logged: errors name the file, a
// line and a group, not the value.
package upstream

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/BurntSushi/toml"
)

// file is the file's shape: one [groups] table of group = "key".
type file struct {
	Groups map[string]string `toml:"groups"`
}

// Parse reads an upstream keys file's bytes (name is used in errors). It
// refuses unknown tables and keys, an empty key, and any key with a space
// or control character (it is sent as a header value verbatim). The map
// is group name → key.
func Parse(name string, data []byte) (map[string]string, error) {
	var f file
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			// The parser may quote the text it stopped at, which can be
			// part of a key: only an unquoted message is shown.
			msg := pe.Message
			if strings.ContainsAny(msg, "'\"`") {
				msg = "not valid TOML here (check the quoting of the line)"
			}
			return nil, fmt.Errorf("%s:%d: %s", name, pe.Position.Line, msg)
		}
		// A type mismatch quotes no value (BurntSushi names the key and
		// the types), so it cannot leak a key.
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("%s: unknown field %q; the file holds one [groups] table of \"group\" = \"key\" lines", name, und[0].String())
	}
	groups := make([]string, 0, len(f.Groups))
	for g := range f.Groups {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		k := f.Groups[g]
		switch {
		case g == "":
			return nil, fmt.Errorf("%s: a group name is empty", name)
		case k == "":
			return nil, fmt.Errorf("%s: group %q has an empty key; remove the line or give the engine's key", name, g)
		case strings.IndexFunc(k, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
			return nil, fmt.Errorf("%s: the key of group %q has a space or control character, which a header cannot carry", name, g)
		}
	}
	if f.Groups == nil {
		f.Groups = map[string]string{}
	}
	return f.Groups, nil
}

// Keys is the loaded file. A nil *Keys holds no key. Safe for concurrent
// use; a reload swaps the whole map at once.
type Keys struct {
	path string
	log  *slog.Logger
	mu   sync.Mutex // serialises reloads
	// auth maps group → the Authorization value slice, built once so that
	// requests share it (the transport only reads header values).
	auth atomic.Pointer[map[string][]string]
}

// Open reads the file at path. An unreadable or invalid file is an error
// (the process should stop). A file readable by group or others logs
// upstream_keys_file_permissions.
func Open(path string, log *slog.Logger) (*Keys, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Keys{path: path, log: log}
	if err := k.load(); err != nil {
		return nil, err
	}
	return k, nil
}

// Path is the file's path.
func (k *Keys) Path() string { return k.path }

// Reload reads the file again. On failure the keys in force stay and the
// error says why (the caller logs it).
func (k *Keys) Reload() error {
	if k == nil {
		return nil
	}
	return k.load()
}

func (k *Keys) load() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	data, err := os.ReadFile(k.path)
	if err != nil {
		return fmt.Errorf("SERVE_UPSTREAM_KEYS_FILE: %w", err)
	}
	if fi, err := os.Stat(k.path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		k.log.Warn("upstream_keys_file_permissions", "file", k.path, "mode", fi.Mode().Perm().String(),
			"reason", "the file holds engine keys and is readable by group or others; chmod 600 it")
	}
	groups, err := Parse(k.path, data)
	if err != nil {
		return err
	}
	auth := make(map[string][]string, len(groups))
	for g, key := range groups {
		auth[g] = []string{"Bearer " + key}
	}
	k.auth.Store(&auth)
	return nil
}

// Authorization is the header value to send group's engine, nil when the
// file names no key for it (or k is nil). The slice is shared: never
// modify it.
func (k *Keys) Authorization(group string) []string {
	if k == nil {
		return nil
	}
	m := k.auth.Load()
	if m == nil {
		return nil
	}
	return (*m)[group]
}

// Groups is the number of groups with a key, for the start-up log.
func (k *Keys) Groups() int {
	if k == nil {
		return 0
	}
	if m := k.auth.Load(); m != nil {
		return len(*m)
	}
	return 0
}
