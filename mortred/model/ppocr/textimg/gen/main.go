// Command gen writes the OCR golden images as PNG files, to look at them:
//
//	go run ./mortred/model/ppocr/textimg/gen -out /tmp/ppocr-golden
//
// The tests render the same images in memory (ppocr's golden_test.go).
package main

import (
	"flag"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"

	"github.com/fe64bb06/frontdoor/mortred/model/ppocr/textimg"
)

func main() {
	out := flag.String("out", "ppocr-golden", "directory to write the PNG files into")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for name, img := range textimg.Golden() {
		if err := write(filepath.Join(*out, name+".png"), img); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func write(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
