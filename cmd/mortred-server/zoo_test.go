package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

// post sends one envelope and decodes the answer.
func post(t *testing.T, url, token, body string) (int, envelope.Response) {
	t.Helper()
	r, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env envelope.Response
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
	}
	return resp.StatusCode, env
}

// TestBinaryServesTheZoo runs the shipped BLAZEFACE, NSFW_MOBILENETV2,
// SELFIE and NANODET servers (real models from setup-models) and checks what a client sees:
// a batch with a corrupt item answers 200 with that item alone failed, an
// unknown param is 422 with its pointer.
func TestBinaryServesTheZoo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	astro := base64.StdEncoding.EncodeToString(modeltest.Photo(t, "astronaut.png"))
	for _, c := range []struct {
		conf, uri, want string
	}{
		{"blazeface.toml", "/mortred_ai_server_v1/face_detection/blazeface", `"keypoints":[[`},
		{"nsfw_mobilenet_v2.toml", "/mortred_ai_server_v1/classification/nsfw_mobilenet_v2", `"category":"Neutral"`},
		{"selfie.toml", "/mortred_ai_server_v1/segmentation/selfie", `"mask":"iVBORw0KGgo`},
		{"nanodet.toml", "/mortred_ai_server_v1/detection/nanodet", `"category":"person"`},
	} {
		t.Run(c.conf, func(t *testing.T) {
			srv := serve(t, c.conf, "zoo-token")
			defer srv.stop(t)
			code, env := post(t, srv.base+c.uri, "zoo-token", `{"images":["`+astro+`","bm90IGFuIGltYWdl"]}`)
			if code != 200 || env.Status != envelope.StatusOK || len(env.Results) != 2 ||
				env.Results[0].Status != envelope.StatusOK || !strings.Contains(string(env.Results[0].Data), c.want) ||
				env.Results[1].Status != envelope.StatusEmptyImage || string(env.Results[1].Data) != "null" {
				t.Fatalf("batch with a corrupt item → %d %+v", code, env)
			}
			code, env = post(t, srv.base+c.uri, "zoo-token", `{"images":["`+astro+`"],"params":{"top":3}}`)
			if code != 422 || len(env.Errors) != 1 || env.Errors[0].Pointer != "/params/top" {
				t.Fatalf("unknown param → %d %+v", code, env)
			}
		})
	}
}
