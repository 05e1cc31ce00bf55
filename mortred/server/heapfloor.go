package server

import "sync"

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
