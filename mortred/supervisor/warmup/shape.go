package warmup

import (
	"fmt"
	"slices"
	"strconv"
)

// shapeDiff returns "" when got (a decoded JSON value) has the same shape
// as ref, else where, under path, the first difference is and what it is:
//
//   - the same JSON type at every place (null, boolean, number, string,
//     array, object);
//   - objects with the same keys, compared key by key in sorted order;
//   - arrays of numbers of the same length (a classifier's scores; an
//     empty array next to one of numbers counts as 0 numbers);
//   - other arrays of any lengths, whose elements, when both are non-empty,
//     have the shape of ref's element at the same index (its last one past
//     its end).
//
// Values are not compared.
func shapeDiff(path string, got, ref any) string {
	if gk, rk := kind(got), kind(ref); gk != rk {
		return fmt.Sprintf("%s is %s, the old version's %s", path, gk, rk)
	}
	switch g := got.(type) {
	case map[string]any:
		r := ref.(map[string]any)
		for _, k := range sortedKeys(r) {
			if _, ok := g[k]; !ok {
				return fmt.Sprintf("%s lacks %q, which the old version has", path, k)
			}
		}
		keys := sortedKeys(g)
		for _, k := range keys {
			if _, ok := r[k]; !ok {
				return fmt.Sprintf("%s has %q, which the old version lacks", path, k)
			}
		}
		for _, k := range keys {
			if d := shapeDiff(field(path, k), g[k], r[k]); d != "" {
				return d
			}
		}
	case []any:
		r := ref.([]any)
		gn, rn := numbers(g), numbers(r)
		if (gn || rn) && (gn || len(g) == 0) && (rn || len(r) == 0) && len(g) != len(r) {
			return fmt.Sprintf("%s has %d numbers, the old version's %d", path, len(g), len(r))
		}
		if len(g) == 0 || len(r) == 0 {
			return ""
		}
		for i, e := range g {
			if d := shapeDiff(path+"["+strconv.Itoa(i)+"]", e, r[min(i, len(r)-1)]); d != "" {
				return d
			}
		}
	}
	return ""
}

// kind names v's JSON type with its article.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

// numbers reports whether a is a non-empty array of numbers only.
func numbers(a []any) bool {
	for _, e := range a {
		if _, ok := e.(float64); !ok {
			return false
		}
	}
	return len(a) > 0
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// field appends an object key to a path: .key for identifiers, ["key"]
// otherwise; a bare key at the root.
func field(path, key string) string {
	if !isIdent(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func isIdent(s string) bool {
	for i, c := range s {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}
