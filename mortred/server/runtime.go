package server

import (
	"runtime"
	"sync"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/gcfloor"
)

var floorOnce sync.Once

// RaiseHeapFloor keeps the collector's heap goal at gcfloor.DefaultFloor
// or more while the live heap is small (package gcfloor: unless GOGC is
// set), for the life of the process. Once per process; Serve calls it,
// and so does bench/ppocr for its in-process loop, so that both run with
// the same collector.
func RaiseHeapFloor() {
	floorOnce.Do(func() { gcfloor.Auto() })
}

var procsOnce sync.Once

// addWorkerProcs gives Go code as many more Ps as there are workers, unless
// the operator set GOMAXPROCS. A worker spends most of its time in ONNX
// Runtime, a cgo call that keeps its P until the runtime's monitor takes it
// back (tens of microseconds or more); with one P per core and a worker per
// core, the HTTP handlers of the next requests waited for that, and the
// workers then found the queue empty. The extra Ps only run Go code while the
// workers' threads are in C, and since the workers decode the images
// themselves (infer), that Go code is the light HTTP, JSON and base64 work.
// On 2 cores with 2 workers, at saturation, as a share of the in-process
// loop (bench/ppocr): PPOCR_CLS 87-89 % with one P per core, 93-99 % with
// these; BLAZEFACE 96-97 % and 91-94 %. Once per process; Serve calls it.
func addWorkerProcs(workers int) {
	procsOnce.Do(func() {
		if _, set := envconf.OS().Value("GOMAXPROCS"); set || workers < 1 {
			return
		}
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + workers)
	})
}
