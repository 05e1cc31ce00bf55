package proxy

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// TestInflightRows follows one request through the registry: the row
// appears with its model, group, body size and stream flag, shows the
// wait for a first byte, then the bytes returned, and leaves at the end.
func TestInflightRows(t *testing.T) {
	release := make(chan struct{})
	firstSent := make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		select { // waiting: headers are out, no body byte yet
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: 0123456789\n\n")
		w.(http.Flusher).Flush()
		close(firstSent)
		<-r.Context().Done()
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	body := `{"model":"m","stream":true,"prompt":"hello"}`
	before := time.Now()
	resp := rt.post(t, "/v1/completions", jsonCT, body)

	var row Request
	eventually(t, "a row", func() bool {
		rows := rt.p.Inflight().Snapshot()
		if len(rows) == 1 {
			row = rows[0]
		}
		return len(rows) == 1
	})
	if row.Model != "m" || row.Group != "g-m" || row.BodyBytes != int64(len(body)) || !row.Stream ||
		!row.FirstByte.IsZero() || row.OutBytes != 0 || row.Start.Before(before) || row.ID == 0 {
		t.Fatalf("row while waiting: %+v", row)
	}
	if c := rt.p.Inflight().Counts(); c["m"] != 1 || len(c) != 1 {
		t.Fatalf("counts %v", c)
	}
	close(release)
	<-firstSent
	buf := make([]byte, 64)
	n, _ := io.ReadAtLeast(resp.Body, buf, len("data: 0123456789\n\n"))
	eventually(t, "first byte and bytes returned", func() bool {
		row = rt.p.Inflight().Snapshot()[0]
		return !row.FirstByte.IsZero() && row.OutBytes == int64(n)
	})
	if row.FirstByte.Before(row.Start) {
		t.Fatalf("first byte %v before start %v", row.FirstByte, row.Start)
	}
	resp.Body.Close()
	eventually(t, "the row to leave", func() bool { return rt.p.Inflight().Len() == 0 })
	if c := rt.p.Inflight().Counts(); len(c) != 0 {
		t.Fatalf("counts after the end: %v", c)
	}

	// A refused request never gets a row; a finished one leaves.
	r2 := rt.post(t, "/v1/completions", jsonCT, `{"model":"unknown"}`)
	r2.Body.Close()
	if rt.p.Inflight().Len() != 0 {
		t.Fatal("refused request left a row")
	}
}

func TestInflightSnapshotIsACopy(t *testing.T) {
	in := newInflight()
	a := in.add("m", "g", 10, false, time.Now())
	b := in.add("m", "g", 20, true, time.Now())
	rows := in.Snapshot()
	if len(rows) != 2 || rows[0].ID != a.id || rows[1].ID != b.id {
		t.Fatalf("rows %+v not oldest first", rows)
	}
	rows[0].Model = "changed"
	counts := in.Counts()
	counts["m"] = 99
	if in.Snapshot()[0].Model != "m" || in.Counts()["m"] != 2 {
		t.Fatal("snapshot or counts share memory with the registry")
	}
	in.remove(a)
	in.remove(b)
	if in.Len() != 0 || len(in.Counts()) != 0 {
		t.Fatal("rows left behind")
	}
}
