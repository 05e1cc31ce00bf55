package mcp

import (
	"bytes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/chacha20poly1305"
)

// A 2025-era session id the router hands out is sealed: it carries, in
// encrypted and authenticated form, everything a router needs to continue
// the session, so that any router with the same session key can serve it
// (session.go). The SDK's own session ids stay inside the process.
//
// The id is unpadded base64url of
//
//	version (1 byte, 1) ‖ AEAD nonce (24 random bytes) ‖ ciphertext
//
// sealed with XChaCha20-Poly1305 under a key derived from the session key
// by HKDF-SHA256 (info sessionKeyInfo). The associated data is the purpose
// label, the version byte and the id of the API key that opened the
// session ("" with keys off), so an id opens only for requests made with
// that same key. The plaintext is
//
//	issued (unix seconds, 8 bytes) ‖ expires (8) ‖ session nonce (16) ‖
//	initialize params (JSON: protocolVersion, clientInfo, capabilities)
//
// The session nonce tells sessions apart (and is the id's local name);
// the params let a router that never saw the session rebuild it as the
// client opened it.

const (
	// sealVersion is the id format above.
	sealVersion = 1
	// sessionKeyInfo is the HKDF purpose label; a key used for anything
	// else derives another AEAD key.
	sessionKeyInfo = "mentat mcp session id v1"
	// MinSessionKeyBytes is the least a session key may hold, decoded.
	MinSessionKeyBytes = 32
	// MaxSessionKeys bounds the lines of a session key file (every line is
	// tried on an id that does not open).
	MaxSessionKeys = 16
	// maxParamsBytes bounds the initialize params an id carries; larger
	// params are cut down (sealedParams).
	maxParamsBytes = 1024
	// maxSealedID bounds what the opener decodes: more than any id the
	// router makes.
	maxSealedID = 2048
	// claimsFixed is the plaintext before the params.
	claimsFixed = 8 + 8 + 16
)

// ParseSessionKeys reads a session key file: one key a line, each the
// base64 text of at least MinSessionKeyBytes bytes (the output of
// `head -c 32 /dev/urandom | base64`); blank lines and lines starting with
// # are skipped. The first key seals new session ids, every key opens
// them. Errors name the line, never its text.
func ParseSessionKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, err := decodeKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d is not base64 text; write one key a line, e.g. from head -c 32 /dev/urandom | base64 -w0", i+1)
		}
		if len(key) < MinSessionKeyBytes {
			return nil, fmt.Errorf("line %d holds %d bytes, fewer than %d; make a key with head -c 32 /dev/urandom | base64 -w0", i+1, len(key), MinSessionKeyBytes)
		}
		if len(keys) == MaxSessionKeys {
			return nil, fmt.Errorf("more than %d keys; keep the newest (first) and the ones sessions still use", MaxSessionKeys)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("no key in the file; put one in (head -c 32 /dev/urandom | base64 -w0) or unset the variable")
	}
	return keys, nil
}

// decodeKey takes standard base64 with or without padding.
func decodeKey(s string) ([]byte, error) {
	if b, err := base64.StdEncoding.Strict().DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.Strict().DecodeString(s)
}

// LoadSessionKeys reads and parses the session key file at path
// (MENTAT_SESSION_KEY_FILE). A file readable by group or others is used,
// with a session_key_file_permissions warning.
func LoadSessionKeys(path string, log *slog.Logger) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the session key: %w", err)
	}
	keys, err := ParseSessionKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && log != nil {
		log.Warn("session_key_file_permissions", "file", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()),
			"advice", "the file holds the key that seals MCP session ids; make it readable by this process only: chmod 600 "+path)
	}
	return keys, nil
}

// sealer seals and opens session ids. Safe for concurrent use.
type sealer struct {
	aeads []cipher.AEAD // [0] seals; all open
}

// newSealer derives one AEAD per key; no keys makes a random one, so ids
// open on this process only.
func newSealer(keys [][]byte) (*sealer, error) {
	if len(keys) == 0 {
		k := make([]byte, MinSessionKeyBytes)
		_, _ = rand.Read(k) // never fails (crypto/rand)
		keys = [][]byte{k}
	}
	s := &sealer{}
	for _, k := range keys {
		if len(k) < MinSessionKeyBytes {
			return nil, fmt.Errorf("mcp: a session key has %d bytes, fewer than %d", len(k), MinSessionKeyBytes)
		}
		dk, err := hkdf.Key(sha256.New, k, nil, sessionKeyInfo, chacha20poly1305.KeySize)
		if err != nil {
			return nil, err
		}
		aead, err := chacha20poly1305.NewX(dk)
		if err != nil {
			return nil, err
		}
		s.aeads = append(s.aeads, aead)
	}
	return s, nil
}

// sessionClaims is what a sealed id carries.
type sessionClaims struct {
	issued, expires time.Time
	nonce           [16]byte
	// params are the initialize params to rebuild the session with: a
	// JSON object with protocolVersion, clientInfo and capabilities.
	params json.RawMessage
}

// associated is the AEAD's associated data for an id of API key keyID.
func associated(keyID string) []byte {
	ad := append([]byte("mentat-mcp-session\x00"), sealVersion, 0)
	return append(ad, keyID...)
}

// seal makes the id of c for API key keyID ("" with keys off).
func (s *sealer) seal(c *sessionClaims, keyID string) string {
	plain := make([]byte, claimsFixed, claimsFixed+len(c.params))
	binary.BigEndian.PutUint64(plain[0:], uint64(c.issued.Unix()))
	binary.BigEndian.PutUint64(plain[8:], uint64(c.expires.Unix()))
	copy(plain[16:], c.nonce[:])
	plain = append(plain, c.params...)

	aead := s.aeads[0]
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plain)+aead.Overhead())
	out[0] = sealVersion
	_, _ = rand.Read(out[1:])
	out = aead.Seal(out, out[1:1+aead.NonceSize()], plain, associated(keyID))
	return base64.RawURLEncoding.EncodeToString(out)
}

// open returns the claims of id if it was sealed by one of the keys for
// API key keyID, and is not past its expiry nor older than maxAge at now.
// Anything else (not base64url, another format, forged, altered, sealed
// with another key or for another API key, expired) is not ok; the
// caller answers all of them alike.
func (s *sealer) open(id, keyID string, now time.Time, maxAge time.Duration) (*sessionClaims, bool) {
	if len(id) > maxSealedID {
		return nil, false
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(id)
	if err != nil || len(raw) < 1+chacha20poly1305.NonceSizeX+chacha20poly1305.Overhead+claimsFixed || raw[0] != sealVersion {
		return nil, false
	}
	nonce, box := raw[1:1+chacha20poly1305.NonceSizeX], raw[1+chacha20poly1305.NonceSizeX:]
	ad := associated(keyID)
	var plain []byte
	for _, aead := range s.aeads {
		if plain, err = aead.Open(nil, nonce, box, ad); err == nil {
			break
		}
	}
	if err != nil || len(plain) < claimsFixed {
		return nil, false
	}
	c := &sessionClaims{
		issued:  time.Unix(int64(binary.BigEndian.Uint64(plain[0:])), 0),
		expires: time.Unix(int64(binary.BigEndian.Uint64(plain[8:])), 0),
		params:  json.RawMessage(plain[claimsFixed:]),
	}
	copy(c.nonce[:], plain[16:claimsFixed])
	if !now.Before(c.expires) || !now.Before(c.issued.Add(maxAge)) {
		return nil, false
	}
	if !bytes.HasPrefix(c.params, []byte("{")) || !json.Valid(c.params) {
		return nil, false
	}
	return c, true
}

// sealedParams is the part of p a sealed id keeps, at most maxParamsBytes
// of JSON: protocolVersion, clientInfo and capabilities; if that is too
// big, protocolVersion and clientInfo; if still too big, protocolVersion
// and clientInfo's name and version, cut short. Only the protocol version
// changes what the rebuilt session does (the version it negotiates); the
// rest is kept for what a handler might read from the session.
func sealedParams(p *sdk.InitializeParams) json.RawMessage {
	if p == nil {
		p = &sdk.InitializeParams{}
	}
	type kept struct {
		ProtocolVersion string                  `json:"protocolVersion"`
		ClientInfo      *sdk.Implementation     `json:"clientInfo,omitempty"`
		Capabilities    *sdk.ClientCapabilities `json:"capabilities,omitempty"`
	}
	for _, k := range []kept{
		{p.ProtocolVersion, p.ClientInfo, p.Capabilities},
		{p.ProtocolVersion, p.ClientInfo, nil},
	} {
		if b, err := json.Marshal(k); err == nil && len(b) <= maxParamsBytes {
			return b
		}
	}
	// A version no server supports negotiates as an empty one does (the
	// latest), and every known version is short. Each kept string is at
	// most 6× its length in JSON (\u escapes): 6×(16+96+32) = 864 bytes
	// plus the field names stays within maxParamsBytes.
	k := kept{ProtocolVersion: p.ProtocolVersion}
	if len(k.ProtocolVersion) > 16 {
		k.ProtocolVersion = ""
	}
	if p.ClientInfo != nil {
		k.ClientInfo = &sdk.Implementation{Name: cut(p.ClientInfo.Name, 96), Version: cut(p.ClientInfo.Version, 32)}
	}
	b, _ := json.Marshal(k)
	return b
}

// cut shortens s to at most n bytes of valid UTF-8.
func cut(s string, n int) string {
	if len(s) > n {
		s = s[:n] // a rune cut in two is dropped below
	}
	return strings.ToValidUTF8(s, "")
}
