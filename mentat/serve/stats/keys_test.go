package stats

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/series"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

type fakeKeys struct{ since []int64 }

func (f *fakeKeys) Usage() []keys.Usage { return []keys.Usage{{ID: "team-a", State: "active"}} }

func (f *fakeKeys) Series(since int64) keys.SeriesSnapshot {
	f.since = append(f.since, since)
	return keys.SeriesSnapshot{Times: []int64{5000}, Keys: map[string]keys.KeySeries{"team-a": {Requests: series.Values{2}}}}
}

// The key series route answers GET with the store's series after since,
// and refuses other methods and a since that is not a time.
func TestKeysSeriesHandler(t *testing.T) {
	f := &fakeKeys{}
	h := KeysSeriesHandler(f)
	for _, c := range []struct {
		method, target string
		code           int
	}{
		{"GET", "/stats/keys/series.json?since=1234", 200},
		{"HEAD", "/stats/keys/series.json", 200},
		{"POST", "/stats/keys/series.json", 405},
		{"GET", "/stats/keys/series.json?since=-1", 400},
		{"GET", "/stats/keys/series.json?since=soon", 400},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.target, nil))
		if rec.Code != c.code {
			t.Errorf("%s %s: %d, want %d (%s)", c.method, c.target, rec.Code, c.code, rec.Body)
		}
		if c.code == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("405 without Allow: %v", rec.Header())
		}
		if c.method == "GET" && c.code == 200 {
			var doc keys.SeriesSnapshot
			if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || len(doc.Times) != 1 || doc.Keys["team-a"].Requests[0] != 2 {
				t.Errorf("answer %s (%v)", rec.Body, err)
			}
		}
	}
	if len(f.since) != 2 || f.since[0] != 1234 || f.since[1] != 0 {
		t.Errorf("series asked with since %v, want [1234 0]", f.since)
	}
}

// /stats.json carries "keys" only once SetKeys is called.
func TestDocumentKeys(t *testing.T) {
	st := New(&routes.Holder{}, nil, nil, nil)
	if doc := st.Document(context.Background()); doc.Keys != nil {
		t.Fatalf("keys off, yet keys %v", doc.Keys)
	}
	st.SetKeys(&fakeKeys{})
	b, _ := json.Marshal(st.Document(context.Background()))
	var doc map[string]json.RawMessage
	_ = json.Unmarshal(b, &doc)
	if string(doc["keys"]) == "" || string(doc["keys"])[0] != '[' {
		t.Errorf("document %s lacks keys", b)
	}
}
