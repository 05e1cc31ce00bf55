package agent

import (
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
)

const tcp4 = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 100 0 0 10 0
   2: 0B00000A:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 100 0 0 10 0
   3: 0100007F:1F42 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 1004 1 0000000000000000 100 0 0 10 0
`

const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F42 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2001 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F43 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2002 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:1F44 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2003 1 0000000000000000 100 0 0 10 0
   3: 000080FE00000000FF0000FE010000FE:1F45 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2004 1 0000000000000000 100 0 0 10 0
`

func TestParseProcNetAndFind(t *testing.T) {
	ls4, err := ParseProcNet(strings.NewReader(tcp4))
	if err != nil {
		t.Fatal(err)
	}
	ls6, err := ParseProcNet(strings.NewReader(tcp6))
	if err != nil {
		t.Fatal(err)
	}
	all := append(ls4, ls6...)
	if len(ls4) != 3 || len(ls6) != 4 {
		t.Fatalf("listeners: %v %v (the established row must not count)", ls4, ls6)
	}
	tests := []struct {
		port int
		want BindFinding
		note string
	}{
		{8000, BindFinding{Listening: true, Wide: true}, ""},
		{8001, BindFinding{Listening: true, Addrs: []string{"10.0.0.11", "127.0.0.1"}}, "bound to 10.0.0.11,127.0.0.1 only"},
		{8002, BindFinding{Listening: true, Wide: true}, ""}, // :: in tcp6
		{8003, BindFinding{Listening: true, Addrs: []string{"::1"}}, "bound to ::1 only"},
		{8004, BindFinding{Listening: true, Addrs: []string{"127.0.0.1"}}, "bound to 127.0.0.1 only"}, // v4-mapped
		{8005, BindFinding{Listening: true, Addrs: []string{"fe80::fe00:ff:fe00:1"}}, "bound to fe80::fe00:ff:fe00:1 only"},
		{9999, BindFinding{}, ""},
	}
	for _, tc := range tests {
		f := Find(all, tc.port)
		if !reflect.DeepEqual(f, tc.want) || f.Note() != tc.note {
			t.Errorf("port %d: %+v %q, want %+v %q", tc.port, f, f.Note(), tc.want, tc.note)
		}
	}
}

func TestParseProcNetSkipsGarbage(t *testing.T) {
	for _, in := range []string{"", "\n\n", "0: zz:1F40 0 0A", "0: 0100007F:1F4 0 0A", "0: 0100007F 0 0A",
		"0: 01000:1F40 x 0A", "x 0100007F:1F40 x 0A"} {
		ls, err := ParseProcNet(strings.NewReader(in))
		if err != nil || len(ls) != 0 {
			t.Errorf("%q: %v %v", in, ls, err)
		}
	}
}

// The parser reads this machine's real tables and sees a listener the test
// opened.
func TestParseRealProcNet(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	defer f.Close()
	ls, err := ParseProcNet(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := Find(ls, port).Note(); got != "bound to 127.0.0.1 only" {
		t.Fatalf("note %q", got)
	}
}

func FuzzParseProcNet(f *testing.F) {
	f.Add(tcp4)
	f.Add(tcp6)
	f.Add("0: 0100007F:1F40 0 0A")
	f.Add("   0: 00000000000000000000000000000000:FFFF 0 0A\n")
	f.Fuzz(func(t *testing.T, in string) {
		ls, _ := ParseProcNet(strings.NewReader(in))
		for _, l := range ls {
			if !l.Addr.IsValid() || l.Port < 0 || l.Port > 65535 {
				t.Fatalf("bad listener %+v from %q", l, in)
			}
			n := Find(ls, l.Port)
			if !n.Listening || (n.Wide && n.Note() != "") || (!n.Wide && !strings.HasPrefix(n.Note(), "bound to ")) {
				t.Fatalf("finding %+v for %q", n, in)
			}
		}
	})
}
