// Package envconf is the one place that reads configuration from the
// environment, with the rules the manuals share:
//
//   - an unset or empty variable takes its default;
//   - a *_S value must be a positive number, anything else takes the default;
//   - a list variable may tell "unset" apart from "set and empty" when the
//     manual says so (MENTAT_DAEMONS).
//
// Invalid values never stop a process here; they fall back to the default and
// are reported through Env.Warn so that an operator can see why.
package envconf

import (
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Env reads variables through Lookup. The zero value reads nothing; use OS or
// Map.
type Env struct {
	// Lookup returns a variable's value and whether it is set.
	Lookup func(name string) (string, bool)
	// Warn, when non-nil, is told about a value that was present but invalid
	// and therefore replaced by the default.
	Warn func(name, value, reason string)
}

// OS reads the process environment.
func OS() Env { return Env{Lookup: os.LookupEnv} }

// Map reads from m; handy in tests.
func Map(m map[string]string) Env {
	return Env{Lookup: func(k string) (string, bool) { v, ok := m[k]; return v, ok }}
}

func (e Env) raw(name string) (string, bool) {
	if e.Lookup == nil {
		return "", false
	}
	return e.Lookup(name)
}

func (e Env) warn(name, value, reason string) {
	if e.Warn != nil {
		e.Warn(name, value, reason)
	}
}

// Value returns the trimmed value and true when the variable is set and not
// empty.
func (e Env) Value(name string) (string, bool) {
	v, ok := e.raw(name)
	v = strings.TrimSpace(v)
	if !ok || v == "" {
		return "", false
	}
	return v, true
}

// String returns the value, or def when unset or empty.
func (e Env) String(name, def string) string {
	if v, ok := e.Value(name); ok {
		return v
	}
	return def
}

// SecondsOK returns a *_S value in seconds and true when it is set to a
// positive finite number. Anything else (unset, empty, zero, negative, not a
// number) returns false; a present but invalid value is reported to Warn.
func (e Env) SecondsOK(name string) (float64, bool) {
	v, ok := e.Value(name)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
		e.warn(name, v, "must be a positive number of seconds; using the default")
		return 0, false
	}
	return f, true
}

// Seconds returns a *_S value in seconds, or def.
func (e Env) Seconds(name string, def float64) float64 {
	if f, ok := e.SecondsOK(name); ok {
		return f
	}
	return def
}

// Duration is Seconds as a time.Duration.
func (e Env) Duration(name string, def time.Duration) time.Duration {
	if f, ok := e.SecondsOK(name); ok {
		return SecondsToDuration(f)
	}
	return def
}

// SecondsToDuration converts seconds to a Duration, saturating instead of
// overflowing for absurdly large values.
func SecondsToDuration(f float64) time.Duration {
	if f >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(f * float64(time.Second))
}

// Fraction returns a value between 0 (excluded) and 1, or def; anything
// else is reported to Warn.
func (e Env) Fraction(name string, def float64) float64 {
	v, ok := e.Value(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0 && f <= 1) {
		e.warn(name, v, "must be a number above 0 and at most 1; using the default")
		return def
	}
	return f
}

// Port returns a TCP/UDP port number. allowZero lets 0 through (it means
// "off" for some listeners); an out-of-range or non-numeric value takes def.
func (e Env) Port(name string, def int, allowZero bool) int {
	v, ok := e.Value(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !allowZero) {
		e.warn(name, v, "must be a port number; using the default")
		return def
	}
	return n
}

// Int returns a non-negative integer value, or def.
func (e Env) Int(name string, def int) int {
	v, ok := e.Value(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		e.warn(name, v, "must be a non-negative integer; using the default")
		return def
	}
	return n
}

// Choice returns the value of a variable that takes one of a fixed set of
// words, or def. parse turns the value into its canonical form or says
// why it is not one of them (that reason is reported to Warn).
func (e Env) Choice(name, def string, parse func(string) (string, error)) string {
	v, ok := e.Value(name)
	if !ok {
		return def
	}
	c, err := parse(v)
	if err != nil {
		e.warn(name, v, err.Error()+"; using the default")
		return def
	}
	return c
}

// List splits a comma-separated value into trimmed, non-empty items. Unset,
// empty, or a value with no items takes def.
func (e Env) List(name string, def []string) []string {
	v, _ := e.Value(name)
	if out := SplitList(v); out != nil {
		return out
	}
	return append([]string(nil), def...)
}

// ListSet is List for variables where "set and empty" differs from "unset":
// unset takes def; set to an empty (or blank) value yields an empty,
// non-nil list.
func (e Env) ListSet(name string, def []string) []string {
	v, ok := e.raw(name)
	if !ok {
		return append([]string(nil), def...)
	}
	out := SplitList(v)
	if out == nil {
		out = []string{}
	}
	return out
}

// SplitList splits on commas, trims each item and drops empty ones.
func SplitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
