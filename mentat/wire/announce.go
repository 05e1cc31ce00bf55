package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxDatagram is the largest announcement a receiver accepts, in bytes.
const MaxDatagram = 1400

// DefaultUniverse is the universe of an announcement that names none.
const DefaultUniverse = "default"

// Announcement is the payload ("p") of a daemon's UDP announcement. Values
// are strings and integers only: a float would not survive re-serialisation
// and would break signatures.
type Announcement struct {
	Proto    string   `json:"proto"`
	NodeID   string   `json:"node_id"`
	Universe string   `json:"universe"`
	Control  string   `json:"control,omitempty"`
	HTTP     string   `json:"http"`
	Addrs    []string `json:"addrs"`
	BootID   string   `json:"boot_id"`
	Seq      int64    `json:"seq"`
	T        int64    `json:"t"`
}

// Datagram is a decoded announcement with what a receiver needs to check it.
type Datagram struct {
	Payload Announcement
	// Raw is the payload exactly as received; signatures cover its
	// canonical form, so fields this version does not know still count.
	Raw json.RawMessage
	// Sig is the lowercase hex signature, empty when unsigned.
	Sig string
	// Legacy marks the older {"mentat_announce":1,...} form (always unsigned).
	Legacy bool
}

// UniverseOrDefault returns the payload's universe, "default" when missing.
func (d *Datagram) UniverseOrDefault() string {
	if d.Payload.Universe == "" {
		return DefaultUniverse
	}
	return d.Payload.Universe
}

// Signed reports whether the datagram carries a signature.
func (d *Datagram) Signed() bool { return d.Sig != "" }

// VerifySig checks the signature against key.
func (d *Datagram) VerifySig(key []byte) bool {
	return d.Sig != "" && Verify(key, d.Raw, d.Sig)
}

// DecodeDatagram parses an announcement datagram. It does not check the
// signature, the universe or the sources: the receiver does that in the
// order the protocol sets (universe before any signature work).
func DecodeDatagram(b []byte) (*Datagram, error) {
	if len(b) > MaxDatagram {
		return nil, fmt.Errorf("announcement is %d bytes, over %d", len(b), MaxDatagram)
	}
	var env struct {
		P        json.RawMessage `json:"p"`
		Sig      *string         `json:"sig"`
		Announce json.RawMessage `json:"mentat_announce"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("announcement: %w", err)
	}
	d := &Datagram{}
	switch {
	case len(env.P) > 0 && firstByte(env.P) == '{':
		d.Raw = env.P
		if env.Sig != nil {
			d.Sig = *env.Sig
			if d.Sig == "" {
				return nil, errors.New("announcement: empty sig")
			}
		}
	case len(env.Announce) > 0 && !bytes.Equal(bytes.TrimSpace(env.Announce), []byte("null")):
		d.Raw = json.RawMessage(b)
		d.Legacy = true
	default:
		return nil, errors.New("announcement: neither a payload \"p\" nor the legacy mentat_announce form")
	}
	if err := json.Unmarshal(d.Raw, &d.Payload); err != nil {
		return nil, fmt.Errorf("announcement payload: %w", err)
	}
	if d.Payload.HTTP == "" {
		return nil, errors.New("announcement: no http address")
	}
	return d, nil
}

// EncodeDatagram serialises p, signing it when key is non-empty.
func EncodeDatagram(p Announcement, key []byte) ([]byte, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	env := struct {
		P   json.RawMessage `json:"p"`
		Sig string          `json:"sig,omitempty"`
	}{P: raw}
	if len(key) > 0 {
		if env.Sig, err = Sign(key, raw); err != nil {
			return nil, err
		}
	}
	out, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	if len(out) > MaxDatagram {
		return nil, fmt.Errorf("announcement would be %d bytes, over %d (too many addrs?)", len(out), MaxDatagram)
	}
	return out, nil
}
