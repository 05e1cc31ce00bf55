package server

import (
	"runtime"
	"sync"

	"github.com/fe64bb06/frontdoor/internal/envconf"
)

// HeapFloor is the Go heap the collector lets a model-server process reach
// before it runs. The process's own live heap is about 1 MB (the model's
// memory is ONNX Runtime's, outside it), so Go's minimum goal of 4 MB made
// it collect after every dozen or so decoded images — about 100 cycles a
// second at PP-OCR classifier rates, each stopping the world. A floor, unlike
// a higher GOGC, does not multiply a large live heap (a request of many big
// images): past the floor, GOGC applies as usual.
const HeapFloor = 32 << 20

var (
	floorOnce sync.Once
	//lint:ignore U1000 never read: it exists to stay reachable
	ballast []byte
)

// RaiseHeapFloor keeps a HeapFloor-sized block live for the life of the
// process. The block holds no pointers and is never written, so the
// collector does not scan it and, taken from fresh memory, the kernel never
// backs it: it raises the collector's goal, not the resident size. It is
// process-wide and runs once; Serve calls it, and so does bench/ppocr for
// its in-process loop, so that both run with the same collector.
func RaiseHeapFloor() {
	floorOnce.Do(func() { ballast = make([]byte, HeapFloor) })
}

var procsOnce sync.Once

// addWorkerProcs gives Go code as many more Ps as there are workers, unless
// the operator set GOMAXPROCS. A worker spends its time in ONNX Runtime, a
// cgo call that keeps its P until the runtime's monitor takes it back (tens
// of microseconds or more); with one P per core and a worker per core, the
// HTTP handlers and the image decoding of the next requests waited for that,
// and the workers then found the queue empty (PPOCR_CLS at saturation on 2
// cores: 86-87 % -> 88-90 % of the in-process loop, same CPU per item). The
// cores are not oversubscribed by more than the kernel already arbitrates:
// the extra Ps only run Go code while the workers' threads are in C. Once
// per process; Serve calls it.
func addWorkerProcs(workers int) {
	procsOnce.Do(func() {
		if _, set := envconf.OS().Value("GOMAXPROCS"); set || workers < 1 {
			return
		}
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + workers)
	})
}
