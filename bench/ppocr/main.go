// Command ppocr benchmarks every served model — PPOCR_CLS and PPOCR_REC and
// the zoo's servers (face, nsfw, selfie, nanodet, centernet, esrgan, esrgan-anime; -models picks) —
// served over HTTP by bin/mortred-server against the limit: a plain
// in-process loop over the same ONNX Runtime sessions (as many instances as
// the server's workers), with batching off and on. It prints a Markdown table
// (and writes it to -out) with the server's share of the in-process
// throughput; the target is ≥ 90 %.
//
//	make build && go run ./bench/ppocr -d 10s
//
// Needs `make setup-models`; the library comes from MORTRED_ORT_LIB or .deps/.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	_ "github.com/fe64bb06/frontdoor/mortred/model/detect"
	_ "github.com/fe64bb06/frontdoor/mortred/model/face"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
	_ "github.com/fe64bb06/frontdoor/mortred/model/ppocr"
	"github.com/fe64bb06/frontdoor/mortred/model/ppocr/textimg"
	_ "github.com/fe64bb06/frontdoor/mortred/model/segment"
	_ "github.com/fe64bb06/frontdoor/mortred/model/superres"
	"github.com/fe64bb06/frontdoor/mortred/server"
)

type target struct {
	id, kind, modelConf, serverConf string
	// photo is the python3-skimage photograph sent as every item; empty
	// means the rendered text line.
	photo string
	// crop, when not empty, cuts the photograph to that rectangle
	// (re-encoded as PNG): super-resolution's work grows with the pixels,
	// and a batch must stay short next to a round.
	crop image.Rectangle
}

var targets = map[string]target{
	"cls":       {"PPOCR_CLS", "classification", "conf/models/ppocr_cls.toml", "conf/server/ppocr_cls.toml", "", image.Rectangle{}},
	"rec":       {"PPOCR_REC", "text_recognition", "conf/models/ppocr_rec.toml", "conf/server/ppocr_rec.toml", "", image.Rectangle{}},
	"face":      {"BLAZEFACE", "face_detection", "conf/models/blazeface.toml", "conf/server/blazeface.toml", "astronaut.png", image.Rectangle{}},
	"nsfw":      {"NSFW_MOBILENETV2", "classification", "conf/models/nsfw_mobilenet_v2.toml", "conf/server/nsfw_mobilenet_v2.toml", "astronaut.png", image.Rectangle{}},
	"selfie":    {"SELFIE", "segmentation", "conf/models/selfie.toml", "conf/server/selfie.toml", "astronaut.png", image.Rectangle{}},
	"nanodet":   {"NANODET", "detection", "conf/models/nanodet.toml", "conf/server/nanodet.toml", "astronaut.png", image.Rectangle{}},
	"centernet": {"CENTERNET", "detection", "conf/models/centernet.toml", "conf/server/centernet.toml", "astronaut.png", image.Rectangle{}},
	"esrgan":    {"REALESRGAN_X4", "super_resolution", "conf/models/realesrgan.toml", "conf/server/realesrgan.toml", "coffee.png", image.Rect(200, 100, 264, 164)},
	// The RRDB model does about 25 times the compact model's work per
	// pixel: a 32×32 cut keeps one item near 0.1 s.
	"esrgan-anime": {"REALESRGAN_X4PLUS_ANIME", "super_resolution", "conf/models/realesrgan_x4plus_anime.toml", "conf/server/realesrgan_x4plus_anime.toml", "coffee.png", image.Rect(200, 100, 232, 132)},
}

// allModels is every key of targets, in the report's order.
const allModels = "cls,rec,face,nsfw,selfie,nanodet,centernet,esrgan,esrgan-anime"

// minBatches is how many in-process batch times a segment lasts at least:
// a segment ends when the last call started before its end returns, so its
// tail runs part-empty for up to one batch; at 8 batch times that costs
// either path a few percent at most, where a model with long batches (NANODET,
// REALESRGAN_X4 batching on) in a short segment would be measured mostly on
// its tail.
const minBatches = 8

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/ppocr:", err)
		os.Exit(1)
	}
}

func run() error {
	root := orttest.RepoRoot()
	bin := flag.String("server", filepath.Join(root, "bin", "mortred-server"), "mortred-server binary (make build)")
	d := flag.Duration("d", 10*time.Second, "measured time of each path per scenario, split over -rounds")
	rounds := flag.Int("rounds", 5, "segments per path and scenario, in-process and HTTP alternating, so that both see the same machine load")
	maxCalls := flag.Int("max-calls", 100000, "upper bound on calls per loop and segment")
	clients := flag.Int("clients", 8, "concurrent HTTP clients with batching off; with batching on at least 2 × workers × batch, so a full batch waits whenever a worker frees")
	batch := flag.Int("batch", 8, "batch size when batching is on")
	workers := flag.Int("workers", 2, "model instances: in-process, and the server's worker_nums")
	threads := flag.Int("threads", 1, "ONNX Runtime intra-op threads per session: in-process, and the server's intra_op_threads")
	which := flag.String("models", allModels, "comma-separated: "+allModels)
	skipHTTP := flag.Bool("skip-http", false, "only the in-process limit")
	photos := flag.String("photos", "jpeg", "encoding of the zoo's photographs: jpeg (quality 90, as a camera or a browser sends a photo) or png (the skimage file as shipped: about 1 MB of base64 for 512×512)")
	out := flag.String("out", filepath.Join(root, "bench", "out", "ppocr.md"), "Markdown report file")
	flag.Parse()
	if *rounds < 1 || *d <= 0 || *workers < 1 || *threads < 1 || *batch < 1 || *clients < 1 {
		return fmt.Errorf("-d, -rounds, -workers, -threads, -batch and -clients must be positive")
	}

	// The in-process loop gets the model server's heap floor, so that both
	// paths run with the same garbage collector settings.
	server.RaiseHeapFloor()
	lib, err := ort.ResolveLib(orttest.LibPath())
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, textimg.Line(textimg.TextHello, 32, 6)); err != nil {
		return err
	}
	img := buf.Bytes()
	tmp, err := os.MkdirTemp("", "ppocr-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	load0 := loadAvg()
	seg := *d / time.Duration(*rounds)
	warm := min(time.Second, max(seg/2, 200*time.Millisecond))
	var rep strings.Builder
	var inputs []string
	fmt.Fprintf(&rep, "| model | batching | path | items/s | p50 ms | p99 ms | errors | server / in-process | per round | CPU ms/item | CPU ratio |\n|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, key := range strings.Split(*which, ",") {
		tg, ok := targets[strings.TrimSpace(key)]
		if !ok {
			return fmt.Errorf("unknown model %q (%s)", key, allModels)
		}
		item, what := img, fmt.Sprintf("the %q line", textimg.TextHello)
		if tg.photo != "" {
			if item, err = photo(tg.photo, tg.crop, *photos); err != nil {
				return err
			}
			what = "skimage " + tg.photo
			if !tg.crop.Empty() {
				what += fmt.Sprintf(" cut at %v", tg.crop.Min)
			}
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(item))
		if err != nil {
			return fmt.Errorf("%s: %w", tg.id, err)
		}
		inputs = append(inputs, fmt.Sprintf("%s %s (%d×%d %s, %d KB)", tg.id, what, cfg.Width, cfg.Height, strings.ToUpper(format), (len(item)+512)>>10))
		modelConf := filepath.Join(root, tg.modelConf)
		for _, b := range []int{1, *batch} {
			mode := "off"
			c := *clients
			if b > 1 {
				mode = fmt.Sprintf("on (%d)", b)
				c = max(c, 2**workers*b)
			}
			if err := scenario(&rep, tg, mode, modelConf, lib, *bin, root, tmp, item, b, c, *workers, *threads, *rounds, seg, warm, *maxCalls, *skipHTTP); err != nil {
				return err
			}
		}
	}
	head := fmt.Sprintf("## Model servers vs in-process loop\n\n"+
		"%s, %d CPUs, ONNX Runtime %s, intra-op threads %d, %d workers (in-process instances = server worker_nums), "+
		"%s per path and scenario in %d rounds (in-process and HTTP alternating, after at least %s of warm-up each; "+
		"a round lasts at least %d in-process batch times, so slow models run longer). "+
		"One image per item and per HTTP request (keep-alive connections): %s. "+
		"Load average (1, 5, 15 min) before: %s, after: %s. "+
		"Target (issue 20): every model server at saturation reaches ≥ 90 %% of the in-process items/s, batching off and on.\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), ort.Version(), *threads, *workers,
		*d, *rounds, warm, minBatches, strings.Join(inputs, "; "), load0, loadAvg())
	notes := "\nBoth paths run the same model instances' code: the loop's instances are built by the same factory from the same model TOML " +
		"with the same intra-op threads, as many as the server's worker_nums, and each loop goroutine runs, per item, what a program of " +
		"its own would: Prepare on the same image bytes (decode, resize, the model's input) then Run (the session and the answer, mask and " +
		"upscaled PNG included); the loop's process has the server's Go heap floor (server.RaiseHeapFloor), so both run the same garbage " +
		"collector. The server adds HTTP, the JSON envelope, base64 (the body is 4/3 of the image file), the queue and the JSON answer; its " +
		"clients (pre-built request bytes, keep-alive, a minimal HTTP/1.1 reader) run in this process on the same cores. " +
		"Items/s and the ratio are over all rounds; \"per round\" is the lowest and highest round ratio. CPU ms/item is user+system " +
		"time per item: in-process, this process; HTTP, the server plus its clients. CPU ratio is the in-process CPU per item over the " +
		"HTTP path's: the share of the loop's rate the server would reach on otherwise idle cores, and the figure that survives other " +
		"load on the machine, which moves items/s between rounds.\n"
	report := head + rep.String() + notes
	fmt.Print(report)
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(*out, []byte(report), 0o644)
	}
	return nil
}

// scenario measures one model and batch size: the in-process loop and the
// server, alternating segments of seg each.
func scenario(rep *strings.Builder, tg target, mode, modelConf, lib, bin, root, tmp string, img []byte,
	b, clients, workers, threads, rounds int, seg, warm time.Duration, maxCalls int, skipHTTP bool) error {
	fmt.Fprintf(os.Stderr, "%s batching %s: loading...\n", tg.id, mode)
	lim, err := newInProc(tg.kind, modelConf, lib, workers, threads, b, img)
	if err != nil {
		return err
	}
	defer lim.close()
	var srv *child
	var load *httpLoad
	if !skipHTTP {
		if srv, err = startServer(bin, filepath.Join(root, tg.serverConf), modelConf, lib, b, workers, threads, tmp); err != nil {
			return fmt.Errorf("%s: %w", tg.id, err)
		}
		defer srv.stop()
		load = newHTTPLoad(srv.addr, serverURI(filepath.Join(root, tg.serverConf)), clients, img)
		defer load.close()
	}
	// Warm-up: connections, ONNX Runtime's arena for the batch shapes, the
	// batcher's steady state. The loop's warm-up also times a batch, which
	// sets the length of the rounds.
	w := lim.run(tg.id, warm, maxCalls)
	seg = max(seg, minBatches*w.pct(0.5))
	warm = max(warm, 2*w.pct(0.5))
	if load != nil {
		load.run(tg.id, warm, maxCalls, srv.pid())
	}
	inSum, httpSum := &result{}, &result{}
	lo, hi := 1e9, 0.0
	for r := range rounds {
		in := lim.run(tg.id, seg, maxCalls)
		inSum.add(in)
		if load == nil {
			continue
		}
		h := load.run(tg.id, seg, maxCalls, srv.pid())
		httpSum.add(h)
		ratio := 100 * h.throughput() / in.throughput()
		lo, hi = min(lo, ratio), max(hi, ratio)
		fmt.Fprintf(os.Stderr, "%s batching %s round %d (%s): in-process %.1f items/s, HTTP %.1f items/s (%.0f %%), load %s\n",
			tg.id, mode, r+1, seg.Round(time.Millisecond), in.throughput(), h.throughput(), ratio, loadAvg())
	}
	inCPU := cpuPerItem(inSum.cpuSelf, inSum.items)
	row(rep, tg.id, mode, "in-process", inSum, "", "", fmt.Sprintf("%.2f", inCPU), "")
	if load != nil {
		srvCPU, cliCPU := cpuPerItem(httpSum.cpuServer, httpSum.items), cpuPerItem(httpSum.cpuSelf, httpSum.items)
		cpuRatio := ""
		if srvCPU+cliCPU > 0 {
			cpuRatio = fmt.Sprintf("%.0f %%", 100*inCPU/(srvCPU+cliCPU))
		}
		row(rep, tg.id, mode, fmt.Sprintf("HTTP (%d clients)", clients), httpSum,
			fmt.Sprintf("%.0f %%", 100*httpSum.throughput()/inSum.throughput()), fmt.Sprintf("%.0f–%.0f %%", lo, hi),
			fmt.Sprintf("%.2f + %.2f", srvCPU, cliCPU), cpuRatio)
	}
	return nil
}

// photo reads a python3-skimage photograph, cut to crop when that is not
// empty, in format: png (unchanged when not cut) or jpeg (quality 90).
func photo(name string, crop image.Rectangle, format string) ([]byte, error) {
	if format != "png" && format != "jpeg" {
		return nil, fmt.Errorf("-photos %q: want jpeg or png", format)
	}
	b, err := os.ReadFile(filepath.Join(modeltest.PhotoDir, name))
	if err != nil || (crop.Empty() && format == "png") {
		return b, err
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	if !crop.Empty() {
		img = img.(interface {
			SubImage(image.Rectangle) image.Image
		}).SubImage(crop)
	}
	var out bytes.Buffer
	if format == "jpeg" {
		err = jpeg.Encode(&out, img, &jpeg.Options{Quality: 90})
	} else {
		err = png.Encode(&out, img)
	}
	return out.Bytes(), err
}

// loadAvg is /proc/loadavg's three averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func row(w *strings.Builder, id, mode, path string, r *result, ratio, rounds, cpu, cpuRatio string) {
	fmt.Fprintf(w, "| %s | %s | %s | %.1f | %s | %s | %d | %s | %s | %s | %s |\n", id, mode, path, r.throughput(), ms(r.pct(0.5)), ms(r.pct(0.99)), r.errors, ratio, rounds, cpu, cpuRatio)
	if r.firstErr != nil {
		fmt.Fprintf(os.Stderr, "%s %s: first error: %v\n", id, path, r.firstErr)
	}
}

func serverURI(conf string) string {
	b, err := os.ReadFile(conf)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "server_uri"); ok {
			v = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), "="))
			return strings.Trim(strings.Fields(v)[0], `"`)
		}
	}
	return ""
}
