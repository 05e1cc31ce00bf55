package envconf

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestString(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"unset takes default", map[string]string{}, "def"},
		{"empty takes default", map[string]string{"X": ""}, "def"},
		{"blank takes default", map[string]string{"X": "  "}, "def"},
		{"value kept", map[string]string{"X": "v"}, "v"},
		{"value trimmed", map[string]string{"X": " v "}, "v"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Map(tt.env).String("X", "def"); got != tt.want {
				t.Fatalf("String = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSeconds(t *testing.T) {
	tests := []struct {
		value  *string
		want   float64
		ok     bool
		warned bool
	}{
		{nil, 7, false, false},
		{ptr(""), 7, false, false},
		{ptr("2"), 2, true, false},
		{ptr("0.25"), 0.25, true, false},
		{ptr(" 3 "), 3, true, false},
		{ptr("0"), 7, false, true},
		{ptr("-1"), 7, false, true},
		{ptr("abc"), 7, false, true},
		{ptr("NaN"), 7, false, true},
		{ptr("Inf"), 7, false, true},
		{ptr("1e999"), 7, false, true},
		{ptr("5s"), 7, false, true},
	}
	for _, tt := range tests {
		name := "unset"
		if tt.value != nil {
			name = "value=" + *tt.value
		}
		t.Run(name, func(t *testing.T) {
			m := map[string]string{}
			if tt.value != nil {
				m["POLL_INTERVAL_S"] = *tt.value
			}
			var warned bool
			e := Map(m)
			e.Warn = func(string, string, string) { warned = true }
			if got := e.Seconds("POLL_INTERVAL_S", 7); got != tt.want {
				t.Fatalf("Seconds = %v, want %v", got, tt.want)
			}
			if _, ok := e.SecondsOK("POLL_INTERVAL_S"); ok != tt.ok {
				t.Fatalf("SecondsOK ok = %v, want %v", ok, tt.ok)
			}
			if warned != tt.warned {
				t.Fatalf("warned = %v, want %v", warned, tt.warned)
			}
		})
	}
}

func TestDuration(t *testing.T) {
	e := Map(map[string]string{"A_S": "1.5", "B_S": "-2", "HUGE_S": "1e300"})
	if got := e.Duration("A_S", time.Second); got != 1500*time.Millisecond {
		t.Fatalf("A_S = %v", got)
	}
	if got := e.Duration("B_S", time.Second); got != time.Second {
		t.Fatalf("B_S = %v", got)
	}
	if got := e.Duration("HUGE_S", time.Second); got <= 0 {
		t.Fatalf("HUGE_S overflowed to %v", got)
	}
}

func TestPort(t *testing.T) {
	tests := []struct {
		value     string
		allowZero bool
		want      int
	}{
		{"", false, 6381},
		{"8080", false, 8080},
		{"0", false, 6381},
		{"0", true, 0},
		{"65536", true, 6381},
		{"-1", true, 6381},
		{"http", true, 6381},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			if got := Map(map[string]string{"P": tt.value}).Port("P", 6381, tt.allowZero); got != tt.want {
				t.Fatalf("Port(%q) = %d, want %d", tt.value, got, tt.want)
			}
		})
	}
}

func TestInt(t *testing.T) {
	e := Map(map[string]string{"A": "3", "B": "x", "C": "-4"})
	if e.Int("A", 1) != 3 || e.Int("B", 1) != 1 || e.Int("C", 1) != 1 || e.Int("D", 1) != 1 {
		t.Fatal("Int rules broken")
	}
}

func TestFraction(t *testing.T) {
	var warned int
	e := Map(map[string]string{"A": "0.9", "B": "1", "C": "0", "D": "1.5", "E": "x", "F": "NaN"})
	e.Warn = func(string, string, string) { warned++ }
	if e.Fraction("A", 0.5) != 0.9 || e.Fraction("B", 0.5) != 1 || e.Fraction("C", 0.5) != 0.5 || e.Fraction("D", 0.5) != 0.5 ||
		e.Fraction("E", 0.5) != 0.5 || e.Fraction("F", 0.5) != 0.5 || e.Fraction("G", 0.5) != 0.5 || warned != 4 {
		t.Fatalf("Fraction rules broken (%d warnings)", warned)
	}
}

func TestChoice(t *testing.T) {
	parse := func(v string) (string, error) {
		if v = strings.ToLower(v); v == "a" || v == "b" {
			return v, nil
		}
		return "", errors.New("want a or b")
	}
	var warned []string
	env := Map(map[string]string{"C1": " B ", "C2": "z", "C3": ""})
	env.Warn = func(name, value, reason string) { warned = append(warned, name+"="+value+": "+reason) }
	if got := env.Choice("C1", "a", parse); got != "b" {
		t.Errorf("C1 = %q, want b", got)
	}
	if got := env.Choice("C2", "a", parse); got != "a" {
		t.Errorf("C2 = %q, want the default", got)
	}
	if got := env.Choice("C3", "a", parse); got != "a" {
		t.Errorf("empty C3 = %q, want the default", got)
	}
	if len(warned) != 1 || warned[0] != "C2=z: want a or b; using the default" {
		t.Errorf("warnings %q", warned)
	}
}

func TestListAndListSet(t *testing.T) {
	def := []string{"127.0.0.1:6380"}
	tests := []struct {
		name    string
		env     map[string]string
		list    []string
		listSet []string
	}{
		{"unset", map[string]string{}, def, def},
		{"set and empty", map[string]string{"L": ""}, def, []string{}},
		{"set and blank", map[string]string{"L": " , "}, def, []string{}},
		{"items trimmed", map[string]string{"L": " a, b ,,c "}, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Map(tt.env)
			if got := e.List("L", def); !reflect.DeepEqual(got, tt.list) {
				t.Fatalf("List = %#v, want %#v", got, tt.list)
			}
			got := e.ListSet("L", def)
			if !reflect.DeepEqual(got, tt.listSet) {
				t.Fatalf("ListSet = %#v, want %#v", got, tt.listSet)
			}
		})
	}
	// The default slice must not be aliased: a caller may append to it.
	got := Map(nil).List("L", def)
	got[0] = "changed"
	if def[0] != "127.0.0.1:6380" {
		t.Fatal("List aliased its default")
	}
}

func TestZeroEnvReadsNothing(t *testing.T) {
	var e Env
	if e.String("PATH", "d") != "d" {
		t.Fatal("zero Env read the process environment")
	}
}

func TestOSReadsProcessEnvironment(t *testing.T) {
	t.Setenv("ENVCONF_TEST_VAR", "x")
	if OS().String("ENVCONF_TEST_VAR", "d") != "x" {
		t.Fatal("OS did not read the environment")
	}
}

func ptr(s string) *string { return &s }
