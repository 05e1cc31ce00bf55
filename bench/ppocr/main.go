// Command ppocr benchmarks PPOCR_CLS and PPOCR_REC served over HTTP by
// bin/mortred-server against the limit: a plain in-process loop over the same
// ONNX Runtime sessions (as many instances as the server's workers), with
// batching off and on. It prints a Markdown table (and writes it to -out) with
// the server's share of the in-process throughput; the target is ≥ 90 %.
//
//	make build && go run ./bench/ppocr -d 10s
//
// Needs `make setup-models`; the library comes from MORTRED_ORT_LIB or .deps/.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/model/ort"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
	_ "github.com/fe64bb06/frontdoor/mortred/model/ppocr"
	"github.com/fe64bb06/frontdoor/mortred/model/ppocr/textimg"
)

type target struct {
	id, kind, modelConf, serverConf string
}

var targets = map[string]target{
	"cls": {"PPOCR_CLS", "classification", "conf/models/ppocr_cls.toml", "conf/server/ppocr_cls.toml"},
	"rec": {"PPOCR_REC", "text_recognition", "conf/models/ppocr_rec.toml", "conf/server/ppocr_rec.toml"},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/ppocr:", err)
		os.Exit(1)
	}
}

func run() error {
	root := orttest.RepoRoot()
	bin := flag.String("server", filepath.Join(root, "bin", "mortred-server"), "mortred-server binary (make build)")
	d := flag.Duration("d", 10*time.Second, "duration of each scenario")
	maxCalls := flag.Int("max-calls", 100000, "upper bound on calls per loop")
	clients := flag.Int("clients", 8, "concurrent HTTP clients (enough to saturate the server)")
	batch := flag.Int("batch", 8, "batch size when batching is on")
	workers := flag.Int("workers", 2, "model instances in-process (the server's worker_nums)")
	which := flag.String("models", "cls,rec", "comma-separated: cls, rec")
	skipHTTP := flag.Bool("skip-http", false, "only the in-process limit")
	out := flag.String("out", filepath.Join(root, "bench", "out", "ppocr.md"), "Markdown report file")
	flag.Parse()

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

	var rep strings.Builder
	fmt.Fprintf(&rep, "| model | batching | path | items/s | p50 ms | p99 ms | errors | server / in-process |\n|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, key := range strings.Split(*which, ",") {
		tg, ok := targets[strings.TrimSpace(key)]
		if !ok {
			return fmt.Errorf("unknown model %q (cls, rec)", key)
		}
		modelConf := filepath.Join(root, tg.modelConf)
		for _, b := range []int{1, *batch} {
			mode := "off"
			if b > 1 {
				mode = fmt.Sprintf("on (%d)", b)
			}
			fmt.Fprintf(os.Stderr, "%s batch %d: in-process...\n", tg.id, b)
			lim, err := inProcess(tg.id, tg.kind, modelConf, lib, *workers, b, img, *d, *maxCalls)
			if err != nil {
				return err
			}
			row(&rep, tg.id, mode, "in-process", lim, "")
			if *skipHTTP {
				continue
			}
			fmt.Fprintf(os.Stderr, "%s batch %d: HTTP...\n", tg.id, b)
			srv, err := startServer(*bin, filepath.Join(root, tg.serverConf), modelConf, lib, b, tmp)
			if err != nil {
				return fmt.Errorf("%s: %w", tg.id, err)
			}
			url := srv.base + serverURI(filepath.Join(root, tg.serverConf))
			c := *clients
			if b > 1 {
				c = max(c, 2*b)
			}
			h := overHTTP(tg.id, url, c, img, *d, *maxCalls)
			srv.stop()
			row(&rep, tg.id, mode, fmt.Sprintf("HTTP (%d clients)", c), h, fmt.Sprintf("%.0f %%", 100*h.throughput()/lim.throughput()))
		}
	}
	head := fmt.Sprintf("## PP-OCR: model server vs in-process loop\n\n"+
		"%s, %d CPUs, ONNX Runtime %s, intra-op threads 1, %d workers (in-process instances = server worker_nums), "+
		"%s per scenario, one %q line image (PNG) per item; HTTP requests carry one image each. "+
		"Target: the server at saturation reaches ≥ 90 %% of the in-process items/s.\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), ort.Version(), *workers, *d, textimg.TextHello)
	report := head + rep.String()
	fmt.Print(report)
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(*out, []byte(report), 0o644)
	}
	return nil
}

func row(w *strings.Builder, id, mode, path string, r *result, ratio string) {
	fmt.Fprintf(w, "| %s | %s | %s | %.1f | %s | %s | %d | %s |\n", id, mode, path, r.throughput(), ms(r.pct(0.5)), ms(r.pct(0.99)), r.errors, ratio)
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
