package routes

import (
	"reflect"
	"testing"
	"time"
)

func TestLookup(t *testing.T) {
	r, err := NewRoute("m1", "g1", "http://127.0.0.1:8000/v1", "vllm")
	if err != nil {
		t.Fatal(err)
	}
	if r.Root.String() != "http://127.0.0.1:8000" {
		t.Fatalf("root = %s", r.Root)
	}
	s := New(time.Now(),
		map[string]*Route{"m1": r},
		map[string]*Group{
			"g1": {Name: "g1", Healthy: true, Models: []string{"m1"}},
			"g2": {Name: "g2", WhyNot: "no running actors", Models: []string{"m2"}},
			"g3": {Name: "g3", WhyNot: "not probed yet"},
		}, nil)
	if got, g := s.Lookup("m1"); got != r || g.Name != "g1" {
		t.Fatalf("m1: %v %v", got, g)
	}
	if got, g := s.Lookup("m2"); got != nil || g == nil || g.Name != "g2" {
		t.Fatalf("m2 (listed by last probe of a failing group): %v %v", got, g)
	}
	if got, g := s.Lookup("g3"); got != nil || g == nil || g.WhyNot != "not probed yet" {
		t.Fatalf("g3 (group's own name): %v %v", got, g)
	}
	if got, g := s.Lookup("g1"); got != nil || g != nil {
		t.Fatalf("g1 (a healthy group's own name, which its engine does not list): %v %v", got, g)
	}
	if got, g := s.Lookup("nope"); got != nil || g != nil {
		t.Fatalf("unknown: %v %v", got, g)
	}
	if !reflect.DeepEqual(s.Available(), []string{"m1"}) || !reflect.DeepEqual(s.GroupNames(), []string{"g1", "g2", "g3"}) {
		t.Fatal("listing")
	}
}

func TestNewRouteRoot(t *testing.T) {
	for base, root := range map[string]string{
		"http://h:1/v1":      "http://h:1",
		"http://h:1/v1/":     "http://h:1",
		"http://h:1/x/v1":    "http://h:1/x",
		"http://h:1/openai":  "http://h:1/openai",
		"http://[::1]:80/v1": "http://[::1]:80",
	} {
		r, err := NewRoute("m", "g", base, "")
		if err != nil || r.Root.String() != root {
			t.Errorf("%s: root %v, want %s (%v)", base, r.Root, root, err)
		}
	}
}

func TestHolder(t *testing.T) {
	var h Holder
	if h.Load() == nil || len(h.Load().Models) != 0 {
		t.Fatal("zero holder")
	}
	s := Empty()
	h.Store(s)
	if h.Load() != s {
		t.Fatal("store/load")
	}
}

func TestDiscoveryNote(t *testing.T) {
	for _, c := range []struct {
		name    string
		groups  map[string]*Group
		daemons map[string]*Daemon
		want    string
	}{
		{"no daemon watched", nil, nil,
			"the router watches no mentatd daemon: set MENTAT_DAEMONS to the daemons' HTTP addresses, or have them announce to MENTAT_ANNOUNCE_PORT"},
		{"none reachable", nil, map[string]*Daemon{
			"10.0.0.2:6380": {Error: "GET /status: connection refused"},
			"10.0.0.1:6380": {},
		}, "no mentatd daemon is reachable (10.0.0.1:6380: not read yet; 10.0.0.2:6380: GET /status: connection refused)"},
		{"one connected", nil, map[string]*Daemon{"a": {Error: "x"}, "b": {Connected: true}}, ""},
		{"groups known", map[string]*Group{"g": {Name: "g"}}, map[string]*Daemon{"a": {Error: "x"}}, ""},
	} {
		if got := New(time.Now(), nil, c.groups, c.daemons).DiscoveryNote(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}
