package warmup

import (
	"encoding/json"
	"testing"
)

func TestShapeDiff(t *testing.T) {
	cases := []struct {
		name, got, ref string
		want           string // "" means the same shape
	}{
		{"same values", `{"class_id":1,"category":"light","scores":[0.2,0.8]}`, `{"class_id":1,"category":"light","scores":[0.2,0.8]}`, ""},
		{"other values", `{"class_id":0,"category":"dark","scores":[0.9,0.1]}`, `{"class_id":1,"category":"light","scores":[0.2,0.8]}`, ""},
		{"more scores", `{"class_id":1,"category":"x","scores":[0.1,0.1,0.8]}`, `{"class_id":1,"category":"x","scores":[0.2,0.8]}`,
			"d.scores has 3 numbers, the old version's 2"},
		{"no scores", `{"scores":[]}`, `{"scores":[0.2,0.8]}`, "d.scores has 0 numbers, the old version's 2"},
		{"scores now", `{"scores":[0.5]}`, `{"scores":[]}`, "d.scores has 1 numbers, the old version's 0"},
		{"both empty", `{"scores":[]}`, `{"scores":[]}`, ""},
		{"a missing key", `{"class_id":1}`, `{"class_id":1,"category":"x"}`, `d lacks "category", which the old version has`},
		{"a new key", `{"class_id":1,"category":"x","top":[]}`, `{"class_id":1,"category":"x"}`, `d has "top", which the old version lacks`},
		{"number to string", `{"class_id":"1"}`, `{"class_id":1}`, "d.class_id is a string, the old version's a number"},
		{"object to array", `[]`, `{}`, "d is an array, the old version's an object"},
		{"null", `{"a":null}`, `{"a":{}}`, "d.a is null, the old version's an object"},
		{"boolean", `{"a":true}`, `{"a":1}`, "d.a is a boolean, the old version's a number"},
		{"more detections", `[{"score":0.9,"bbox":[1,2,3,4]},{"score":0.5,"bbox":[5,6,7,8]}]`, `[{"score":0.7,"bbox":[1,1,2,2]}]`, ""},
		{"no detections", `[]`, `[{"score":0.7,"bbox":[1,1,2,2]}]`, ""},
		{"detections, none before", `[{"score":0.7,"bbox":[1,1,2,2]}]`, `[]`, ""},
		{"a detection's bbox", `[{"score":0.9,"bbox":[1,2,3,4]},{"score":0.5,"bbox":[5,6,7]}]`, `[{"score":0.7,"bbox":[1,1,2,2]}]`,
			"d[1].bbox has 3 numbers, the old version's 4"},
		{"a detection's key", `[{"score":0.9,"box":[1,2,3,4]}]`, `[{"score":0.7,"bbox":[1,1,2,2]}]`, `d[0] lacks "bbox", which the old version has`},
		{"polygons of other lengths", `{"polygon":[[0,0],[1,0],[1,1]]}`, `{"polygon":[[0,0],[1,0],[1,1],[0,1]]}`, ""},
		{"a point of three numbers", `{"polygon":[[0,0],[1,0,2]]}`, `{"polygon":[[0,0],[1,0]]}`, "d.polygon[1] has 3 numbers, the old version's 2"},
		{"numbers to strings", `{"a":["x","y"]}`, `{"a":[1,2]}`, "d.a[0] is a string, the old version's a number"},
		{"strings of other lengths", `{"a":["x","y","z"]}`, `{"a":["x"]}`, ""},
		{"an odd key", `{"a b":{"c":1}}`, `{"a b":{"c":"1"}}`, `d["a b"].c is a number, the old version's a string`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got, ref any
			if err := json.Unmarshal([]byte(c.got), &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(c.ref), &ref); err != nil {
				t.Fatal(err)
			}
			if d := shapeDiff("d", got, ref); d != c.want {
				t.Errorf("shapeDiff = %q, want %q", d, c.want)
			}
		})
	}
}
