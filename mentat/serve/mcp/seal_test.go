package mcp

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func b64(n int, fill byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, n))
}

func TestParseSessionKeys(t *testing.T) {
	k1, k2 := b64(32, 1), b64(48, 2)
	for _, tc := range []struct {
		name, file string
		keys       int
		err        string // part of the error; "" none
	}{
		{"one key", k1 + "\n", 1, ""},
		{"rotation, comments and blanks", "# new\n" + k2 + "\n\n  # old\n  " + k1 + "  \r\n", 2, ""},
		{"no padding", strings.TrimRight(b64(35, 3), "="), 1, ""},
		{"not base64", k1 + "\nnot base64!\n", 0, "line 2 is not base64"},
		{"url alphabet", strings.ReplaceAll(strings.ReplaceAll(b64(33, 0xfb), "+", "-"), "/", "_"), 0, "line 1 is not base64"},
		{"short", b64(31, 4), 0, "line 1 holds 31 bytes, fewer than 32"},
		{"wrapped by base64", b64(57, 5) + "\n" + b64(7, 5), 0, "line 2 holds 7 bytes"},
		{"empty", "", 0, "no key in the file"},
		{"only comments", "# nothing\n\n", 0, "no key in the file"},
		{"too many", strings.Repeat(k1+"\n", MaxSessionKeys+1), 0, "more than 16 keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := ParseSessionKeys([]byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				for _, line := range strings.Split(tc.file, "\n") {
					if line = strings.TrimSpace(line); len(line) > 8 && strings.Contains(err.Error(), line) {
						t.Fatalf("the error quotes the file: %v", err)
					}
				}
				return
			}
			if err != nil || len(keys) != tc.keys {
				t.Fatalf("%d keys, %v; want %d", len(keys), err, tc.keys)
			}
		})
	}
	keys, _ := ParseSessionKeys([]byte(k2 + "\n" + k1))
	if !bytes.Equal(keys[0], bytes.Repeat([]byte{2}, 48)) || !bytes.Equal(keys[1], bytes.Repeat([]byte{1}, 32)) {
		t.Fatal("keys out of order: the first line seals")
	}
}

func TestLoadSessionKeys(t *testing.T) {
	dir := t.TempDir()
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	if _, err := LoadSessionKeys(filepath.Join(dir, "missing"), log); err == nil || !strings.Contains(err.Error(), "cannot read the session key") {
		t.Fatalf("missing file: %v", err)
	}
	key := b64(32, 9)
	private := filepath.Join(dir, "private")
	os.WriteFile(private, []byte(key+"\n"), 0o600)
	if keys, err := LoadSessionKeys(private, log); err != nil || len(keys) != 1 || logged.Len() != 0 {
		t.Fatalf("0600 file: %v %d keys, logged %q", err, len(keys), logged.String())
	}
	shared := filepath.Join(dir, "shared")
	os.WriteFile(shared, []byte(key+"\n"), 0o644)
	if keys, err := LoadSessionKeys(shared, log); err != nil || len(keys) != 1 {
		t.Fatalf("0644 file: %v", err)
	}
	if !strings.Contains(logged.String(), "session_key_file_permissions") || !strings.Contains(logged.String(), "0644") {
		t.Fatalf("0644 file logged %q", logged.String())
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte(b64(16, 9)), 0o600)
	if _, err := LoadSessionKeys(bad, log); err == nil || !strings.Contains(err.Error(), bad+": line 1 holds 16 bytes") {
		t.Fatalf("short key: %v", err)
	}
	if strings.Contains(logged.String(), key) {
		t.Fatal("key material in the log")
	}
}

func TestSealRoundTripAndRotation(t *testing.T) {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	old, _ := newSealer([][]byte{oldKey})
	rotated, _ := newSealer([][]byte{newKey, oldKey})
	fresh, _ := newSealer([][]byte{newKey})
	now := time.Now()
	c := &sessionClaims{issued: now, expires: now.Add(time.Hour), nonce: [16]byte{7}, params: []byte(`{"protocolVersion":"2025-11-25"}`)}
	id := old.seal(c, "team-a")
	if strings.ContainsAny(id, "=+/") {
		t.Fatalf("id %q is not unpadded base64url", id)
	}
	if id2 := old.seal(c, "team-a"); id2 == id {
		t.Fatal("two seals of the same claims are the same id (the AEAD nonce must be random)")
	}
	got, ok := rotated.open(id, "team-a", now, time.Hour)
	if !ok || got.nonce != c.nonce || got.expires.Unix() != c.expires.Unix() || got.issued.Unix() != c.issued.Unix() || string(got.params) != string(c.params) {
		t.Fatalf("rotated opens the old key's id: %v %+v", ok, got)
	}
	if _, ok := fresh.open(id, "team-a", now, time.Hour); ok {
		t.Fatal("an id of a key removed from the file still opens")
	}
	if _, ok := old.open(rotated.seal(c, "team-a"), "team-a", now, time.Hour); ok {
		t.Fatal("a router without the new key opens its ids")
	}
	if _, ok := rotated.open(rotated.seal(c, "team-a"), "team-a", now, time.Hour); !ok {
		t.Fatal("the first key seals")
	}
	for _, keyID := range []string{"", "team-b", "team-a\x00"} {
		if _, ok := old.open(id, keyID, now, time.Hour); ok {
			t.Fatalf("team-a's id opens for key %q", keyID)
		}
	}
	if _, ok := old.open(id, "team-a", c.expires, 48*time.Hour); ok {
		t.Fatal("an id opens at its expiry")
	}
	if _, ok := old.open(id, "team-a", now.Add(30*time.Minute), 20*time.Minute); ok {
		t.Fatal("an id older than the router's max age opens")
	}
	if _, err := newSealer([][]byte{make([]byte, 31)}); err == nil {
		t.Fatal("a 31-byte key was taken")
	}
	r1, _ := newSealer(nil)
	r2, _ := newSealer(nil)
	if _, ok := r2.open(r1.seal(c, ""), "", now, time.Hour); ok {
		t.Fatal("two random keys are the same")
	}
}

func TestSealedParamsBounded(t *testing.T) {
	big := strings.Repeat("x", 2000)
	full := &sdk.InitializeParams{ProtocolVersion: legacy, ClientInfo: &sdk.Implementation{Name: "c", Version: "1"},
		Capabilities: &sdk.ClientCapabilities{Experimental: map[string]any{"blob": big}}}
	if got := string(sealedParams(full)); got != `{"protocolVersion":"2025-11-25","clientInfo":{"name":"c","version":"1"}}` {
		t.Errorf("too big capabilities: %s", got)
	}
	huge := &sdk.InitializeParams{ProtocolVersion: legacy, ClientInfo: &sdk.Implementation{Name: strings.Repeat("\x00", 500), Version: big, Title: big}}
	if got := sealedParams(huge); len(got) > maxParamsBytes || !strings.Contains(string(got), `"protocolVersion":"2025-11-25"`) {
		t.Errorf("too big clientInfo: %d bytes %s", len(got), got)
	}
	odd := &sdk.InitializeParams{ProtocolVersion: big, ClientInfo: &sdk.Implementation{Name: "é" + strings.Repeat("é", 1000)}}
	if got := sealedParams(odd); len(got) > maxParamsBytes || !strings.Contains(string(got), `"protocolVersion":""`) {
		t.Errorf("odd params: %d bytes %s", len(got), got)
	}
	if got := string(sealedParams(nil)); got != `{"protocolVersion":""}` {
		t.Errorf("nil params: %s", got)
	}
}

// FuzzOpenSessionID: the opener takes the session header of any request.
// It must never panic, and open only ids sealed with its key for the key
// id given. (Fuzzing workers seal the seeds again with nonces of their
// own, so an id that opens is checked by its contents, not against the
// seeds.)
func FuzzOpenSessionID(f *testing.F) {
	s, _ := newSealer([][]byte{bytes.Repeat([]byte{3}, 32)})
	now := time.Unix(1_800_000_000, 0)
	c := &sessionClaims{issued: now, expires: now.Add(time.Hour), nonce: [16]byte{1, 2, 3}, params: []byte(`{"protocolVersion":"2025-11-25","clientInfo":{"name":"c","version":"1"}}`)}
	sealedFor := []string{"", "team-a"}
	for _, k := range sealedFor {
		id := s.seal(c, k)
		f.Add(id, k)
		f.Add(id, "other")
		raw, _ := base64.RawURLEncoding.DecodeString(id)
		raw[len(raw)/2] ^= 0x80
		f.Add(base64.RawURLEncoding.EncodeToString(raw), k)
		f.Add(id[:len(id)-1], k)
	}
	f.Add("", "")
	f.Add("no-such-session", "")
	f.Add("AQ", "")
	f.Add(strings.Repeat("A", 100), "")
	f.Fuzz(func(t *testing.T, id, keyID string) {
		got, ok := s.open(id, keyID, now, 2*time.Hour)
		if !ok {
			return
		}
		if keyID != sealedFor[0] && keyID != sealedFor[1] {
			t.Fatalf("opened %q for key %q, for which nothing was sealed", id, keyID)
		}
		if got.nonce != c.nonce || string(got.params) != string(c.params) || !got.expires.Equal(c.expires) {
			t.Fatalf("opened to claims never sealed: %+v", got)
		}
		for _, other := range append(sealedFor, keyID+"x") {
			if _, ok := s.open(id, other, now, 2*time.Hour); ok && other != keyID {
				t.Fatalf("%q opens for key %q and for %q", id, keyID, other)
			}
		}
	})
}
