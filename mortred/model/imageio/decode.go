// Package imageio turns request bytes into pixels: JPEG, PNG and WebP only,
// with the image's declared size checked before any pixel is decoded, so a
// small file that claims a huge canvas (a decompression bomb) costs nothing.
package imageio

import (
	"bytes"
	"errors"
	"image"
	"image/jpeg"
	"image/png"
	"io"

	"golang.org/x/image/webp"

	"github.com/fe64bb06/frontdoor/mortred/model"
)

// DefaultMaxPixels is the default limit on width × height: 40 megapixels,
// about five 4K frames; an RGBA decode of that size needs 160 MB.
const DefaultMaxPixels = 40_000_000

type format struct {
	name   string
	config func(io.Reader) (image.Config, error)
	decode func(io.Reader) (image.Image, error)
}

var (
	fmtJPEG = format{"jpeg", jpeg.DecodeConfig, jpeg.Decode}
	fmtPNG  = format{"png", png.DecodeConfig, png.Decode}
	fmtWebP = format{"webp", webp.DecodeConfig, webp.Decode}
)

// sniff picks the decoder by magic bytes rather than through image.Decode's
// global registry, so that a format some other package registers (GIF, BMP)
// is not silently accepted.
func sniff(b []byte) (format, bool) {
	switch {
	case len(b) >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF:
		return fmtJPEG, true
	case len(b) >= 8 && string(b[:8]) == "\x89PNG\r\n\x1a\n":
		return fmtPNG, true
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return fmtWebP, true
	}
	return format{}, false
}

// Sniff checks, from the leading bytes alone, that data is a JPEG, PNG or
// WebP file, with Decode's error (status 3) when it is not. The server calls
// it before it queues an item, so that bytes that are no image at all fail
// at once instead of after a wait for a worker, and never take a queue place.
func Sniff(data []byte) error {
	_, err := formatOf(data)
	return err
}

func formatOf(data []byte) (format, error) {
	if len(data) == 0 {
		return format{}, model.BadImage("empty image: send a JPEG, PNG or WebP file, base64-encoded")
	}
	f, ok := sniff(data)
	if !ok {
		return format{}, model.BadImage("unsupported or undecodable image (%d bytes): send JPEG, PNG or WebP", len(data))
	}
	return f, nil
}

// Decode decodes one image into RGB. maxPixels ≤ 0 means DefaultMaxPixels.
// Every failure is a *model.ItemError (status 3): it fails only this item.
func Decode(data []byte, maxPixels int) (*RGB, error) {
	if maxPixels <= 0 {
		maxPixels = DefaultMaxPixels
	}
	f, err := formatOf(data)
	if err != nil {
		return nil, err
	}
	cfg, err := f.config(bytes.NewReader(data))
	if err != nil {
		return nil, model.BadImage("undecodable %s header: %v", f.name, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, model.BadImage("%s image has no pixels (%dx%d)", f.name, cfg.Width, cfg.Height)
	}
	if int64(cfg.Width)*int64(cfg.Height) > int64(maxPixels) {
		return nil, model.BadImage("%s image is %dx%d = %d pixels, over the limit of %d: refused as a possible decompression bomb; downscale it",
			f.name, cfg.Width, cfg.Height, int64(cfg.Width)*int64(cfg.Height), maxPixels)
	}
	img, err := f.decode(bytes.NewReader(data))
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, model.BadImage("truncated %s image: %v", f.name, err)
		}
		return nil, model.BadImage("undecodable %s image: %v", f.name, err)
	}
	return FromImage(img), nil
}
