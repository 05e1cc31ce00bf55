package ort

// Batch is a reusable input buffer for one [N,C,H,W] tensor. Items smaller
// than H×W are written top-left and the rest stays zero: that zero padding is
// what the PP-OCR recogniser and classifier were trained with (the value after
// normalisation, not black).
//
// The buffer only grows, so a worker that has seen its largest batch stops
// allocating; callers keep H and W to a few fixed steps so that this, and
// ONNX Runtime's arena, stay bounded.
type Batch struct {
	buf []float32
}

// Reset returns a zeroed [n,c,h,w] tensor backed by the buffer. It is valid
// until the next Reset.
func (b *Batch) Reset(n, c, h, w int) Tensor {
	size := n * c * h * w
	if cap(b.buf) < size {
		b.buf = make([]float32, size)
	}
	data := b.buf[:size]
	clear(data)
	return Tensor{Shape: []int64{int64(n), int64(c), int64(h), int64(w)}, Data: data}
}

// Item returns the i-th [C,H,W] slab of an N-first tensor.
func (t Tensor) Item(i int) []float32 {
	if len(t.Shape) == 0 || t.Shape[0] == 0 {
		return nil
	}
	per := len(t.Data) / int(t.Shape[0])
	return t.Data[i*per : (i+1)*per]
}
