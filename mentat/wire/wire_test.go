package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestSignTestVector(t *testing.T) {
	doc := []byte(`{"universe":"kü","b":[2,{"d":4,"c":3}],"a":1}`)
	got, err := Sign([]byte("k"), doc)
	if err != nil {
		t.Fatal(err)
	}
	const want = "ec381f4b20bc7eb6b1f18c7f15b06a5c7c60aca04b4ffcba2c1910ac6262ed39"
	if got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if !Verify([]byte("k"), doc, strings.ToUpper(want)) || Verify([]byte("K"), doc, want) {
		t.Fatal("Verify wrong")
	}
}

func TestCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":{"d":[1, 2],"c":"x"}}`, `{"a":{"c":"x","d":[1,2]},"b":1}`},
		{`"kü<>&"`, `"kü<>&"`},
		{`"a\"b\\c\n\u0001"`, `"a\"b\\c\n\u0001"`},
		{`{"é":1,"z":2,"a":3}`, `{"a":3,"z":2,"é":1}`},
		{`[true,false,null]`, `[true,false,null]`},
	}
	for _, tt := range tests {
		got, err := Canonical([]byte(tt.in))
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if string(got) != tt.want {
			t.Errorf("Canonical(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	if _, err := Canonical([]byte(`{} {}`)); err == nil {
		t.Fatal("trailing data accepted")
	}
}

func TestDatagramRoundTrip(t *testing.T) {
	p := Announcement{Proto: Proto, NodeID: NodeID("10.0.0.1"), Universe: "default", HTTP: "10.0.0.1:6380",
		Addrs: []string{"10.0.0.1"}, BootID: "b1", Seq: 41, T: 1787862155}
	key := []byte("secret")
	b, err := EncodeDatagram(p, key)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeDatagram(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Payload, p) || !d.Signed() || !d.VerifySig(key) || d.VerifySig([]byte("other")) {
		t.Fatalf("round trip: %+v", d)
	}
	// Tampering with the payload breaks the signature.
	tampered := strings.Replace(string(b), `"seq":41`, `"seq":42`, 1)
	d2, err := DecodeDatagram([]byte(tampered))
	if err != nil || d2.VerifySig(key) {
		t.Fatalf("tampered datagram verified (err=%v)", err)
	}
	unsigned, _ := EncodeDatagram(p, nil)
	d3, err := DecodeDatagram(unsigned)
	if err != nil || d3.Signed() || d3.VerifySig(key) {
		t.Fatalf("unsigned: %+v %v", d3, err)
	}
}

func TestDecodeDatagramForms(t *testing.T) {
	legacy := `{"mentat_announce":1,"node_id":"n","http":"127.0.0.1:6380","addrs":["127.0.0.1"],"seq":3}`
	d, err := DecodeDatagram([]byte(legacy))
	if err != nil || !d.Legacy || d.Signed() || d.Payload.HTTP != "127.0.0.1:6380" || d.UniverseOrDefault() != "default" {
		t.Fatalf("legacy: %+v %v", d, err)
	}
	bad := []string{
		`not json`,
		`{}`,
		`{"p":{"http":""}}`,
		`{"p":{"http":"1.2.3.4:1"},"sig":""}`,
		`{"p":{"http":"1.2.3.4:1","t":1.5}}`,
		`{"p":[1]}`,
		strings.Repeat(" ", MaxDatagram+1),
	}
	for _, b := range bad {
		if _, err := DecodeDatagram([]byte(b)); err == nil {
			t.Errorf("accepted %.40q", b)
		}
	}
}

const currentSnapshot = `{"proto":"0.99","node_id":"6d656e7461743a31302e3130302e302e31","node_ip":"10.100.0.1",
 "hostname":"n1","addrs":["10.100.0.1","192.168.1.11"],"seq":41,"boot_id":"6d6474919bbe7beb","extra":{"x":1},
 "peers":{"6d656e3132":{"node_ip":"10.100.0.2","link_ip":"10.100.0.2",
   "addrs":["10.100.0.2","192.168.1.12"],"control_port":6379,"http_port":6380,
   "alive":true,"stale":false}},
 "groups":{"glm53":{
   "agents":{"glm53@glm53@10.100.0.1":{"node_id":"x","node_ip":"10.100.0.1",
      "container":"glm53","pid":412,"alive":true,
      "services":{"openai":{"host":"","port":8002,"path":"/v1","provider":"vllm","note":""},
                  "mcp":{"host":"","port":9000,"path":"/mcp","provider":"","note":""}}}},
   "actors":{"a:9f01":{"name":"w0","node_id":"x","state":"running","reason":"","pid":9312}}}}}`

const legacySnapshot = `{"node_id":"n","node_ip":"10.100.0.1","addrs":["10.100.0.1"],
 "groups":{"glm53":{
   "agents":[{"id":"glm53@a","node_ip":"10.100.0.1","alive":true,"provider":"VLLM",
      "services":{"mcp":"http://10.0.0.9:9000/mcp"},
      "services_ports":{"openai":{"port":8002,"path":"/v1"}},
      "service_notes":{"openai":"bound to 127.0.0.1 only"}}],
   "actors":[{"id":"a1","state":"running"},{"id":"a2","state":"dead (exit 1)"}]}}}`

func TestDecodeSnapshotCurrent(t *testing.T) {
	s, err := DecodeSnapshot([]byte(currentSnapshot))
	if err != nil {
		t.Fatal(err)
	}
	if s.NodeIP != "10.100.0.1" || len(s.Addrs) != 2 || s.Peers["6d656e3132"].HTTPPort != 6380 {
		t.Fatalf("top/peers: %+v", s)
	}
	a := s.Groups["glm53"].Agents["glm53@glm53@10.100.0.1"]
	if oa := a.Services[ServiceOpenAI]; !oa.PortForm() || oa.Port != 8002 || oa.Provider != "vllm" || oa.URL("10.0.0.1") != "http://10.0.0.1:8002/v1" {
		t.Fatalf("openai: %+v", oa)
	}
	if s.Groups["glm53"].Actors["a:9f01"].State != ActorRunning {
		t.Fatal("actor state")
	}
	// Our own encoding reads back the same.
	b, _ := json.Marshal(s)
	s2, err := DecodeSnapshot(b)
	if err != nil || !reflect.DeepEqual(s, s2) {
		t.Fatalf("re-decode differs: %v", err)
	}
}

func TestDecodeSnapshotLegacy(t *testing.T) {
	s, err := DecodeSnapshot([]byte(legacySnapshot))
	if err != nil {
		t.Fatal(err)
	}
	g := s.Groups["glm53"]
	a := g.Agents["glm53@a"]
	oa, mcp := a.Services[ServiceOpenAI], a.Services[ServiceMCP]
	if !oa.PortForm() || oa.Port != 8002 || oa.Path != "/v1" || oa.Provider != "vllm" || oa.Note != "bound to 127.0.0.1 only" {
		t.Fatalf("openai: %+v", oa)
	}
	if mcp.PortForm() || mcp.URL("") != "http://10.0.0.9:9000/mcp" {
		t.Fatalf("mcp: %+v", mcp)
	}
	if g.Actors["a2"].State != ActorDead || g.Actors["a2"].Reason != "exit 1" || g.Actors["a1"].State != ActorRunning {
		t.Fatalf("actors: %+v", g.Actors)
	}
}

func TestDecodeSnapshotRejects(t *testing.T) {
	for _, b := range []string{`[]`, `{"groups":{"g":{"agents":7}}}`, `{"peers":"x"}`, `{"groups":{"g":{"actors":"x"}}}`} {
		if _, err := DecodeSnapshot([]byte(b)); err == nil {
			t.Errorf("accepted %s", b)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in   string
		want Service
		err  bool
	}{
		{"8000/v1", Service{Port: 8000, Path: "/v1"}, false},
		{"8000", Service{Port: 8000}, false},
		{"9000/mcp/", Service{Port: 9000, Path: "/mcp"}, false},
		{"http://0.0.0.0:8000/v1", Service{Port: 8000, Path: "/v1"}, false},
		{"http://[::]:8000/v1", Service{Port: 8000, Path: "/v1"}, false},
		{"http://10.0.0.5:8000/v1", Service{Host: "10.0.0.5", Port: 8000, Path: "/v1"}, false},
		{"http://proxy.example:80/x/v1", Service{Host: "proxy.example", Port: 80, Path: "/x/v1"}, false},
		{"", Service{}, true},
		{"abc", Service{}, true},
		{"0", Service{}, true},
		{"70000/v1", Service{}, true},
		{"https://h:1/v1", Service{}, true},
		{"http://h/v1", Service{}, true},
		{"http://h:1/v1?x=1", Service{}, true},
		{"8000/v 1", Service{}, true},
	}
	for _, tt := range tests {
		got, err := ParseEndpoint(tt.in)
		if (err != nil) != tt.err || (!tt.err && got != tt.want) {
			t.Errorf("ParseEndpoint(%q) = %+v, %v; want %+v, err=%v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestNodeID(t *testing.T) {
	if NodeID("10.100.0.1") != "6d656e7461743a31302e3130302e302e31" {
		t.Fatal(NodeID("10.100.0.1"))
	}
}

func FuzzDecodeDatagram(f *testing.F) {
	b, _ := EncodeDatagram(Announcement{HTTP: "127.0.0.1:6380", Addrs: []string{"127.0.0.1"}}, []byte("k"))
	f.Add(b)
	f.Add([]byte(`{"mentat_announce":1,"http":"1.2.3.4:5"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := DecodeDatagram(data)
		if err != nil {
			return
		}
		if d.Payload.HTTP == "" || len(d.Raw) == 0 {
			t.Fatalf("accepted datagram without http or payload: %q", data)
		}
		d.VerifySig([]byte("k"))
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte(currentSnapshot))
	f.Add([]byte(legacySnapshot))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		if s.Groups == nil || s.Peers == nil {
			t.Fatal("nil maps in decoded snapshot")
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("decoded snapshot does not re-encode: %v", err)
		}
	})
}

func FuzzCanonical(f *testing.F) {
	f.Add([]byte(`{"universe":"kü","b":[2,{"d":4,"c":3}],"a":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Canonical(data)
		if err != nil {
			return
		}
		c2, err := Canonical(c)
		if err != nil || string(c) != string(c2) {
			t.Fatalf("canonical form not stable: %q -> %q (%v)", c, c2, err)
		}
	})
}
