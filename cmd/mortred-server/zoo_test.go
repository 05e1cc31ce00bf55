package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
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

// greyPNG is a w×h grey pattern.
func greyPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(i % 251)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestBinaryServesTheZoo runs the shipped BLAZEFACE, NSFW_MOBILENETV2,
// SELFIE, NANODET, CENTERNET, REALESRGAN_X4 and REALESRGAN_X4PLUS_ANIME servers (real
// models from setup-models) and checks what a client sees:
// a batch with a corrupt item answers 200 with that item alone failed, an
// unknown param is 422 with its pointer.
func TestBinaryServesTheZoo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	astro := base64.StdEncoding.EncodeToString(modeltest.Photo(t, "astronaut.png"))
	small := base64.StdEncoding.EncodeToString(greyPNG(t, 64, 48))
	large := base64.StdEncoding.EncodeToString(greyPNG(t, 520, 520))
	for _, c := range []struct {
		conf, uri, want string
	}{
		{"blazeface.toml", "/mortred_ai_server_v1/face_detection/blazeface", `"keypoints":[[`},
		{"nsfw_mobilenet_v2.toml", "/mortred_ai_server_v1/classification/nsfw_mobilenet_v2", `"category":"Neutral"`},
		{"selfie.toml", "/mortred_ai_server_v1/segmentation/selfie", `"mask":"iVBORw0KGgo`},
		{"nanodet.toml", "/mortred_ai_server_v1/detection/nanodet", `"category":"person"`},
		{"centernet.toml", "/mortred_ai_server_v1/detection/centernet", `"category":"person"`},
		{"realesrgan.toml", "/mortred_ai_server_v1/super_resolution/realesrgan_x4", `"width":256,"height":192,"scale":4`},
		{"realesrgan_x4plus_anime.toml", "/mortred_ai_server_v1/super_resolution/realesrgan_x4plus_anime", `"width":256,"height":192,"scale":4`},
	} {
		superres := strings.HasPrefix(c.conf, "realesrgan")
		t.Run(c.conf, func(t *testing.T) {
			srv := serve(t, c.conf, "zoo-token")
			defer srv.stop(t)
			img := astro
			if superres {
				img = small // quick
			}
			code, env := post(t, srv.base+c.uri, "zoo-token", `{"images":["`+img+`","bm90IGFuIGltYWdl"]}`)
			if code != 200 || env.Status != envelope.StatusOK || len(env.Results) != 2 ||
				env.Results[0].Status != envelope.StatusOK || !strings.Contains(string(env.Results[0].Data), c.want) ||
				env.Results[1].Status != envelope.StatusEmptyImage || string(env.Results[1].Data) != "null" {
				t.Fatalf("batch with a corrupt item → %d status %d, %d results (want item 0 with %s, item 1 status 3)", code, env.Status, len(env.Results), c.want)
			}
			code, env = post(t, srv.base+c.uri, "zoo-token", `{"images":["`+img+`"],"params":{"top":3}}`)
			if code != 422 || len(env.Errors) != 1 || env.Errors[0].Pointer != "/params/top" {
				t.Fatalf("unknown param → %d %+v", code, env)
			}
			if c.conf == "nsfw_mobilenet_v2.toml" {
				// The classification's top list and its params.
				code, env = post(t, srv.base+c.uri, "zoo-token", `{"images":["`+img+`"],"params":{"top_k":1}}`)
				if code != 200 || len(env.Results) != 1 || !strings.Contains(string(env.Results[0].Data), `"top":[{"class_id":2,"category":"Neutral","score":`) {
					t.Fatalf("top_k 1 → %d %+v", code, env)
				}
				code, env = post(t, srv.base+c.uri, "zoo-token", `{"images":["`+img+`"],"params":{"top_k":6}}`)
				if code != 422 || len(env.Errors) != 1 || env.Errors[0].Pointer != "/params/top_k" {
					t.Fatalf("top_k 6 of 5 classes → %d %+v", code, env)
				}
			}
			if superres {
				code, env = post(t, srv.base+c.uri, "zoo-token", `{"images":["`+large+`"]}`)
				if code != 422 || len(env.Results) != 1 || env.Results[0].Status != envelope.StatusInvalidRequest {
					t.Fatalf("520×520 over max_input_pixels → %d %+v", code, env)
				}
			}
		})
	}
}
